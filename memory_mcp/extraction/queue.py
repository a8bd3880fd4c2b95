"""The debounce queue: when to run memory updates, never how.

Each key (a scope and a thread) has its own timer, so a busy thread delays nobody else. Work for
one scope never overlaps itself (its document is read, changed and written as a whole), while
different scopes run side by side on a small pool of workers. The queue holds only timers: what
is pending is recorded with the pages themselves, so losing the queue (a crash, a restart) loses
no work, and `resume` rebuilds it.

`Schedule` makes every decision from the times its caller passes in, with no threads and no
clock, so each rule is tested by advancing a number; `UpdateQueue` is the threaded shell that
reads the clock, waits, and keeps busy scopes apart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass

from memory_mcp.memory.rules import UpdateReport
from memory_mcp.store import Scope

log = logging.getLogger(__name__)

Key = tuple[Scope, str]
RunUpdate = Callable[[Scope, str], UpdateReport]

# A thread that never falls quiet is still updated, at the latest after this many debounce windows.
MAX_DEFERRALS = 4
RETRY_BASE_SECONDS = 30.0
RETRY_MAX_SECONDS = 600.0


def retry_delay(failures: int) -> float:
    """Wait before the next try of a key that failed `failures` times in a row: doubling, so a
    down LLM is not hammered, yet capped, so a repaired one is used again within minutes."""
    return min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2.0 ** (failures - 1))


@dataclass
class _Timer:
    due: float
    first_notified: float
    failures: int = 0


class Schedule:
    """Which key runs when: debounce, deferral cap, retries, resume, discard and close.

    Not thread-safe and never waits: the caller holds a lock, passes `now`, and says which scopes
    are busy."""

    def __init__(self, debounce_seconds: float) -> None:
        self._debounce = debounce_seconds
        self._timers: dict[Key, _Timer] = {}
        self._failures: dict[Key, int] = {}
        self.closed = False
        self.last_errors: dict[Key, str] = {}

    def notify(self, key: Key, now: float, delay: float | None = None) -> None:
        """New pages for `key`: restart its quiet time (`delay`, by default the debounce), but never
        past MAX_DEFERRALS windows after the first page, and never earlier than a failed key's retry."""
        if self.closed:
            return
        wait = self._debounce if delay is None else delay
        timer = self._timers.get(key)
        if timer is None:
            self._timers[key] = _Timer(due=now + wait, first_notified=now)
            return
        latest = timer.first_notified + MAX_DEFERRALS * self._debounce
        timer.due = max(timer.due if timer.failures else now, min(now + wait, latest))

    def resume(self, keys: Iterable[Key], now: float) -> None:
        """Keys found pending at start-up run now, unless an add has already set their timer:
        pages added since the start wait for their debounce like any others."""
        if self.closed:
            return
        for key in keys:
            self._timers.setdefault(key, _Timer(due=now, first_notified=now))

    def take_due(self, now: float, busy: Container[Scope]) -> Key | None:
        """Remove and return the key due first among scopes not busy, or None if none is due yet."""
        due = [key for key in self._free(busy) if self._timers[key].due <= now]
        if not due:
            return None
        key = min(due, key=lambda k: self._timers[k].due)
        del self._timers[key]
        return key

    def next_due(self, busy: Container[Scope]) -> float | None:
        """When the next key of a scope not busy falls due (None: nothing to wait for until a
        scope is freed or a key is added)."""
        return min((self._timers[key].due for key in self._free(busy)), default=None)

    def record(self, key: Key, now: float, error: str | None) -> None:
        """A run's outcome: success forgets past failures; a failure is retried after
        `retry_delay`, except once closed (its pages stay pending for the next start)."""
        if error is None:
            self._failures.pop(key, None)
            self.last_errors.pop(key, None)
            return
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        self.last_errors[key] = error
        if not self.closed:
            self._timers[key] = _Timer(due=now + retry_delay(failures), first_notified=now, failures=failures)

    def cancel(self, scope: Scope) -> None:
        """Drop the timers of `scope` (not its agents'): the caller runs its threads itself.
        Failures are kept, so flushing a failing key does not reset its back-off."""
        for key in self._keys(lambda candidate: candidate == scope):
            del self._timers[key]

    def discard(self, scope: Scope) -> None:
        """Forget an erased scope (for a user: their agents too): timers, failures and errors."""
        for key in self._keys(lambda candidate: candidate == scope or _within_user(candidate, scope)):
            del self._timers[key]
            self._failures.pop(key, None)
            self.last_errors.pop(key, None)

    def close(self, now: float) -> None:
        """Shutting down: everything scheduled is due now, and no new work or retry is taken."""
        self.closed = True
        for timer in self._timers.values():
            timer.due = now

    def queued(self) -> list[Key]:
        return list(self._timers)

    @property
    def finished(self) -> bool:
        """Closed with nothing left to run: the workers may stop."""
        return self.closed and not self._timers

    def _free(self, busy: Container[Scope]) -> list[Key]:
        return [key for key in self._timers if key[0] not in busy]

    def _keys(self, matches: Callable[[Scope], bool]) -> list[Key]:
        return [key for key in self._timers if matches(key[0])]


class UpdateQueue:
    """The `Schedule` run by a pool of worker threads, never two of them on one scope."""

    def __init__(
        self,
        run: RunUpdate,
        debounce_seconds: float,
        workers: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._run = run
        self._worker_count = workers
        self._clock = clock
        self._schedule = Schedule(debounce_seconds)
        self._busy: set[Scope] = set()
        self._condition = threading.Condition()
        self._workers: list[threading.Thread] = []

    @property
    def last_errors(self) -> dict[Key, str]:
        """The latest error of each key whose last run failed (a copy: workers keep recording)."""
        with self._condition:
            return dict(self._schedule.last_errors)

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
            self._schedule.notify((scope, thread), now, delay)
            self._condition.notify()

    def resume(self, keys: Iterable[Key]) -> None:
        """Schedule keys found pending at start-up to run now (see `Schedule.resume`)."""
        now = self._clock()
        with self._condition:
            self._schedule.resume(keys, now)
            self._condition.notify_all()

    def discard(self, scope: Scope) -> None:
        """Drop the timers of an erased scope (for a user: of their agents too)."""
        with self._condition:
            self._schedule.discard(scope)

    def queued(self) -> list[Key]:
        with self._condition:
            return self._schedule.queued()

    # --- running now ----------------------------------------------------------------------

    def run_now(self, scope: Scope, threads: Callable[[], Iterable[str]]) -> UpdateReport:
        """Run every pending thread of `scope` in the caller's thread, skipping the timers.
        `threads` is asked once the scope is ours, so it sees the latest pending work."""

        def run_threads() -> UpdateReport:
            with self._condition:
                self._schedule.cancel(scope)
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
            self._release(scope)

    def shutdown(self, timeout: float) -> int:
        """Run what is due or waiting right away, for at most `timeout` seconds; return how many
        keys were left (their pages stay pending on disk and resume at next start)."""
        now = self._clock()
        deadline = now + timeout
        with self._condition:
            self._schedule.close(now)
            self._condition.notify_all()
        for worker in self._workers:
            worker.join(max(0.0, deadline - self._clock()))
        with self._condition:
            left = len(self._schedule.queued()) + len(self._busy)
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
                self._release(key[0])

    def _next_key(self) -> Key | None:
        """Wait for a due key whose scope is free, and claim its scope; None when shutting down."""
        with self._condition:
            while True:
                now = self._clock()
                key = self._schedule.take_due(now, self._busy)
                if key is not None:
                    self._busy.add(key[0])
                    return key
                if self._schedule.finished:
                    return None
                next_due = self._schedule.next_due(self._busy)
                self._condition.wait(None if next_due is None else max(0.0, next_due - now))

    def _release(self, scope: Scope) -> None:
        with self._condition:
            self._busy.discard(scope)
            self._condition.notify_all()

    def _run_guarded(self, key: Key) -> UpdateReport:
        try:
            return self._run(*key)
        except Exception as exc:  # a worker must survive anything one update throws
            log.exception("memory update for %s failed", key[0].describe())
            return UpdateReport(errors=[f"unexpected error: {type(exc).__name__}: {exc}"])

    def _record(self, key: Key, report: UpdateReport) -> None:
        """Remember the outcome; a failed key is retried later with growing delays."""
        now = self._clock()
        with self._condition:
            self._schedule.record(key, now, report.errors[-1] if report.errors else None)
            self._condition.notify()


def _within_user(candidate: Scope, user_scope: Scope) -> bool:
    return user_scope.agent_name is None and candidate.user_id == user_scope.user_id
