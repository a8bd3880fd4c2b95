"""Running structured-memory updates in the background: when (the queue), with what (the updater
and its LLM client), one scope at a time across processes, cancellable by an erase, and resumed at
start (with host memory a crash left unapplied).

With no LLM endpoint there is no queue and no updater; resuming host memory still runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from memory_mcp.base.clock import now
from memory_mcp.base.errors import MemoryGone, StorageError
from memory_mcp.base.settings import Settings
from memory_mcp.extraction import host_facts, retention
from memory_mcp.extraction.llm_client import ChatClient, RetryPolicy
from memory_mcp.extraction.queue import UpdateQueue
from memory_mcp.extraction.updater import Updater, pending_threads
from memory_mcp.memory.rules import UpdateReport
from memory_mcp.store import MemoryStore, Scope

log = logging.getLogger(__name__)

# Retention looks at a scope at most this often: each erase rewrites the scope's whole log.
RETENTION_INTERVAL_SECONDS = 3600.0


class UpdateRunner:
    def __init__(self, settings: Settings, store: MemoryStore, extraction_on: bool) -> None:
        self.settings = settings
        self.store = store
        self._updater: Updater | None = None
        self._queue: UpdateQueue | None = None
        self._running: dict[Scope, threading.Event] = {}  # cancel switches of updates under way
        self._running_guard = threading.Lock()
        self._retention_at: dict[Scope, float] = {}  # when retention last looked at a scope (monotonic)
        if extraction_on:
            assert settings.llm_model is not None  # extraction_on requires it
            memory = settings.memory
            chat = ChatClient(
                base_url=settings.openai_base_url,
                api_key=settings.openai_api_key,
                model=settings.llm_model,
                timeout=memory.llm_timeout_seconds,
                retry=RetryPolicy(attempts=memory.llm_max_attempts),
                max_output_tokens=memory.llm_max_output_tokens,
                response_format=memory.llm_response_format,
            )
            self._updater = Updater(settings, store, chat)
            self._queue = UpdateQueue(self._run_update, memory.debounce_seconds, memory.max_concurrent_updates)

    def start(self) -> None:
        """Start the workers, and resume pending work off the caller's thread."""
        if self._queue is not None:
            self._queue.start()
        threading.Thread(target=self._resume, name="memory-resume", daemon=True).start()

    def shutdown(self) -> int:
        """Give pending updates `shutdown_flush_seconds`; return how many were left."""
        return 0 if self._queue is None else self._queue.shutdown(self.settings.memory.shutdown_flush_seconds)

    # --- what the service asks -----------------------------------------------------------

    def added(self, scope: Scope, thread: str) -> None:
        """New pages in a thread: restart its quiet-time timer."""
        if self._queue is not None:
            self._queue.notify(scope, thread)

    def analyse_soon(self, scope: Scope, thread: str) -> None:
        """A session in demand: analyse its pending exchanges without waiting for the debounce."""
        if self._queue is not None:
            self._queue.notify(scope, thread, delay=0)

    def flush(self, scope: Scope, retry_failed: bool) -> UpdateReport:
        """Run every pending thread of the scope now (and what was set aside, when asked)."""
        report = UpdateReport()
        if self._queue is not None:
            if retry_failed:
                report.merge(self._queue.run_exclusive(scope, lambda: self._retry_set_aside(scope)))
            report.merge(self._queue.run_now(scope, lambda: list(pending_threads(self.store, scope))))
        return report

    def stop_for_erase(self, scopes: list[Scope]) -> None:
        """Cut off the updates under way on scopes about to be erased (what they would write is
        refused anyway), and drop their timers."""
        with self._running_guard:
            for scope in scopes:
                if scope in self._running:
                    self._running[scope].set()
        if self._queue is not None:
            for scope in scopes:
                self._queue.discard(scope)

    def queued(self, only_user: str | None = None) -> int:
        """Updates waiting: all of them, or `only_user`'s."""
        waiting = self._queue.queued() if self._queue is not None else []
        return sum(1 for scope, _ in waiting if only_user is None or scope.user_id == only_user)

    def last_errors(self, only_user: str | None) -> list[str]:
        errors = self._queue.last_errors.items() if self._queue is not None else []
        return [message for (scope, _), message in errors if only_user is None or scope.user_id == only_user]

    # --- the work ------------------------------------------------------------------------

    def _run_update(self, scope: Scope, thread: str) -> UpdateReport:
        """One queued update of a thread."""
        assert self._updater is not None
        updater = self._updater
        return self._with_update_right(scope, lambda cancel: updater.update_thread(scope, thread, cancel))

    def _retry_set_aside(self, scope: Scope) -> UpdateReport:
        """The set-aside exchanges of a scope, analysed again on request."""
        assert self._updater is not None
        updater = self._updater
        return self._with_update_right(scope, lambda cancel: updater.retry_set_aside(scope, cancel))

    def _with_update_right(self, scope: Scope, work: Callable[[threading.Event], UpdateReport]) -> UpdateReport:
        """Run `work` with the scope's update right held across threads and processes, and a
        cancel switch an erase can pull."""
        if not self.store.read_pages(scope).pages:
            return UpdateReport()  # nothing stored (or just erased)
        with self.store.exclusive_updates(scope) as acquired:
            if not acquired:
                return UpdateReport(errors=["another process is updating this memory; will retry"])
            cancel = threading.Event()
            with self._running_guard:
                self._running[scope] = cancel
            try:
                report = work(cancel)
                self._keep_retention(scope)
                return report
            except MemoryGone:
                return UpdateReport()  # erased meanwhile: there is nothing left to update
            finally:
                with self._running_guard:
                    self._running.pop(scope, None)

    def _keep_retention(self, scope: Scope) -> None:
        """Erase the scope's exchanges past `memory.retention_days`, if it is on and the scope was
        not looked at within RETENTION_INTERVAL_SECONDS (held: the scope's update right)."""
        days = self.settings.memory.retention_days
        if days is None:
            return
        with self._running_guard:
            last = self._retention_at.get(scope)
            if last is not None and time.monotonic() - last < RETENTION_INTERVAL_SECONDS:
                return
            self._retention_at[scope] = time.monotonic()
        try:
            erased = retention.erase_expired(self.store, scope, days, now(), extraction_on=self._updater is not None)
        except StorageError as exc:
            log.warning("exchanges of %s past retention not erased: %s", scope.describe(), exc)
            return
        if erased:
            log.info("erased %d exchanges of %s older than %d days", erased, scope.describe(), days)

    def _resume(self) -> None:
        """At start: finish applying host memory a crash interrupted, and queue pending updates."""
        for scope in self.store.list_scopes():
            try:
                host_facts.apply_pending(self.store, scope, self.settings)
                if self.settings.memory.retention_days is not None:
                    self._with_update_right(scope, lambda _cancel: UpdateReport())
                threads = pending_threads(self.store, scope) if self._queue is not None else {}
            except StorageError as exc:
                log.warning("not resuming updates for %s: %s", scope.describe(), exc)
                continue
            if self._queue is not None:
                self._queue.resume((scope, thread) for thread in threads)
