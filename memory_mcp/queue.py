"""The debounce queue: when to run memory updates, never how.

Each key (a scope and a thread) has its own timer, so a busy thread delays nobody else. Work for
one scope never overlaps itself (its document is read, changed and written as a whole), while
different scopes run side by side on a small pool of workers. The queue holds only timers: what
is pending is recorded with the pages themselves, so losing the queue (a crash, a restart) loses
no work, and `resume` rebuilds it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from memory_mcp.rules import UpdateReport
from memory_mcp.store import Scope

log = logging.getLogger(__name__)

Key = tuple[Scope, str]
RunUpdate = Callable[[Scope, str], UpdateReport]

# A thread that never falls quiet is still updated, at the latest after this many debounce windows.
MAX_DEFERRALS = 4
RETRY_BASE_SECONDS = 30.0
RETRY_MAX_SECONDS = 600.0


@dataclass
class _Timer:
    due: float
    first_notified: float
    failures: int = 0


class UpdateQueue:
    def __init__(
        self,
        run: RunUpdate,
        debounce_seconds: float,
        workers: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._run = run
        self._debounce = debounce_seconds
        self._worker_count = workers
        self._clock = clock
        self._timers: dict[Key, _Timer] = {}
        self._failures: dict[Key, int] = {}
        self._busy: set[Scope] = set()
        self._condition = threading.Condition()
        self._closing = False
        self._workers: list[threading.Thread] = []
        self.last_errors: dict[Key, str] = {}

    # --- scheduling -----------------------------------------------------------------------

    def start(self) -> None:
        for number in range(self._worker_count):
            worker = threading.Thread(target=self._work, name=f"memory-updater-{number}", daemon=True)
            worker.start()
            self._workers.append(worker)

    def notify(self, scope: Scope, thread: str, delay: float | None = None) -> None:
        """New pages for this key: (re)start its quiet-time timer."""
        now = self._clock()
        with self._condition:
            if self._closing:
                return
            timer = self._timers.get((scope, thread))
            wait = self._debounce if delay is None else delay
            if timer is None:
                self._timers[(scope, thread)] = _Timer(due=now + wait, first_notified=now)
            else:
                latest = timer.first_notified + MAX_DEFERRALS * self._debounce
                timer.due = max(timer.due if timer.failures else now, min(now + wait, latest))
            self._condition.notify()

    def resume(self, keys: Iterable[Key]) -> None:
        """Schedule keys found pending at start-up to run now, unless an add has already set their
        timer: pages added since the start wait for their debounce like any others."""
        now = self._clock()
        with self._condition:
            if self._closing:
                return
            for key in keys:
                self._timers.setdefault(key, _Timer(due=now, first_notified=now))
            self._condition.notify_all()

    def discard(self, scope: Scope) -> None:
        """Drop the timers of an erased scope (for a user: of their agents too)."""
        with self._condition:
            for key in [key for key in self._timers if key[0] == scope or _within_user(key[0], scope)]:
                del self._timers[key]
                self._failures.pop(key, None)
                self.last_errors.pop(key, None)

    def queued(self) -> list[Key]:
        with self._condition:
            return list(self._timers)

    # --- running now ----------------------------------------------------------------------

    def run_now(self, scope: Scope, threads: Callable[[], Iterable[str]]) -> UpdateReport:
        """Run every pending thread of `scope` in the caller's thread, skipping the timers.
        `threads` is asked once the scope is ours, so it sees the latest pending work."""

        def run_threads() -> UpdateReport:
            with self._condition:
                for key in [key for key in self._timers if key[0] == scope]:
                    del self._timers[key]
            report = UpdateReport()
            for thread in threads():
                outcome = self._run_guarded((scope, thread))
                self._record((scope, thread), outcome)
                report.merge(outcome)
            return report

        return self.run_exclusive(scope, run_threads)

    def run_exclusive(self, scope: Scope, work: Callable[[], UpdateReport]) -> UpdateReport:
        """Run `work` in the caller's thread once no worker is updating `scope`, keeping them off it meanwhile."""
        with self._condition:
            while scope in self._busy:
                self._condition.wait()
            self._busy.add(scope)
        try:
            return work()
        finally:
            with self._condition:
                self._busy.discard(scope)
                self._condition.notify_all()

    def shutdown(self, timeout: float) -> int:
        """Run what is due or waiting right away, for at most `timeout` seconds; return how many
        keys were left (their pages stay pending on disk and resume at next start)."""
        deadline = self._clock() + timeout
        with self._condition:
            self._closing = True
            for timer in self._timers.values():
                timer.due = 0
            self._condition.notify_all()
        for worker in self._workers:
            worker.join(max(0.0, deadline - self._clock()))
        with self._condition:
            left = len(self._timers) + len(self._busy)
        if left:
            log.warning("%d memory updates still pending at shutdown; they resume at next start", left)
        return left

    # --- workers --------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            key = self._next_key()
            if key is None:
                return
            try:
                self._record(key, self._run_guarded(key))
            finally:
                with self._condition:
                    self._busy.discard(key[0])
                    self._condition.notify_all()

    def _next_key(self) -> Key | None:
        """Wait for a due key whose scope is free, and claim its scope; None when shutting down."""
        with self._condition:
            while True:
                now = self._clock()
                ready = [key for key, timer in self._timers.items() if key[0] not in self._busy]
                due = [key for key in ready if self._timers[key].due <= now]
                if due:
                    key = min(due, key=lambda k: self._timers[k].due)
                    del self._timers[key]
                    self._busy.add(key[0])
                    return key
                if self._closing and not self._timers:
                    return None
                next_due = min((self._timers[key].due for key in ready), default=None)
                self._condition.wait(None if next_due is None else max(0.0, next_due - now))

    def _run_guarded(self, key: Key) -> UpdateReport:
        try:
            return self._run(*key)
        except Exception as exc:  # a worker must survive anything one update throws
            log.exception("memory update for %s failed", key[0].describe())
            return UpdateReport(errors=[f"unexpected error: {type(exc).__name__}: {exc}"])

    def _record(self, key: Key, report: UpdateReport) -> None:
        """Remember the outcome; a failed key is retried later with growing delays."""
        with self._condition:
            if not report.errors:
                self._failures.pop(key, None)
                self.last_errors.pop(key, None)
                return
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            self.last_errors[key] = report.errors[-1]
            if self._closing:
                return
            delay = min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** (failures - 1))
            now = self._clock()
            self._timers[key] = _Timer(due=now + delay, first_notified=now, failures=failures)
            self._condition.notify()


def _within_user(candidate: Scope, user_scope: Scope) -> bool:
    return user_scope.agent_name is None and candidate.user_id == user_scope.user_id
