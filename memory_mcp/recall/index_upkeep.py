"""Keeps the saved word index of the scopes a process writes, so that a history written by
processes that never retrieve (a server whose model only adds, an import, the team server taking
hooks' exchanges) still starts fast: without a saved index, the first retrieve after a restart
tokenises every exchange (3.4 s at 30,000).

Once writes have paused for `idle_seconds` (or, under writes that never pause, every BUSY_FACTOR
times that), the scopes written meanwhile are handed to `keep` on a thread of its own (started by
the first write: a process that only reads has none); at close, those not handed over yet are
kept on the caller's thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from memory_mcp.store import Scope

log = logging.getLogger(__name__)

BUSY_FACTOR = 6


class IdleIndexer:
    """Calls `keep(scope, added)` for each scope written, with how many pages were added to it
    since it was last called, once no write came for `idle_seconds` (see the module)."""

    def __init__(self, keep: Callable[[Scope, int], None], idle_seconds: float) -> None:
        self._keep = keep
        self._idle_seconds = idle_seconds
        self._written: dict[Scope, int] = {}
        self._first_write = self._last_write = 0.0
        self._closed = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def wrote(self, scope: Scope, added: int) -> None:
        """`added` pages were just written to the scope's log."""
        if added <= 0:
            return
        with self._changed:
            if self._closed:
                return
            first = not self._written
            self._written[scope] = self._written.get(scope, 0) + added
            self._last_write = time.monotonic()
            if first:  # else the thread's deadline only moves later: it finds out when it wakes
                self._first_write = self._last_write
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="index-upkeep", daemon=True)
                    self._thread.start()
                self._changed.notify()

    def close(self) -> None:
        """Stop, and keep the scopes written but not handed to `keep` yet."""
        with self._changed:
            self._closed = True
            self._changed.notify()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._changed:
            left, self._written = self._written, {}
        self._keep_each(left)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._closed and (wait := self._wait()) > 0:
                    self._changed.wait(wait)
                if self._closed:
                    return
                written, self._written = self._written, {}
            self._keep_each(written)

    def _keep_each(self, written: dict[Scope, int]) -> None:
        for scope, added in written.items():
            try:
                self._keep(scope, added)
            except Exception:  # only a head start: the next reader indexes what is not saved
                log.warning("the word index of %s was not kept up to date", scope.describe(), exc_info=True)

    def _wait(self) -> float:
        """How long until the scopes written are due to be kept (a day when none are)."""
        if not self._written:
            return 86400.0
        now = time.monotonic()
        return min(self._last_write + self._idle_seconds, self._first_write + BUSY_FACTOR * self._idle_seconds) - now
