"""What both stores keep in a process for each scope: its state, made on first use; the log read so
far, grown in place by this process's own appends; and its locks, taken at once or within a bound."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from memory_mcp.store.interfaces import Scope
from memory_mcp.store.page_sequence import HeldPages, PageSequence, StoredPages

StateT = TypeVar("StateT")


class ScopeStates(Generic[StateT]):
    """Per-scope state, made on first use and then kept, erase or not: a thread may hold one of
    its locks while another erases the scope, and both must mean the same lock.

    What a state caches (pages, document) is kept for the `cached` most recently used scopes
    only: beyond them, `drop_cached(state)` lets go of the least recently used one's, unless it
    is in use right now (it returns False), and the next read of that scope reads it again."""

    def __init__(
        self,
        make: Callable[[Scope], StateT],
        cached: int | None = None,
        drop_cached: Callable[[StateT], bool] | None = None,
    ) -> None:
        self._make = make
        self._states: dict[Scope, StateT] = {}
        self._guard = threading.Lock()
        self._cached = cached
        self._drop_cached = drop_cached
        self._recent: OrderedDict[Scope, None] = OrderedDict()

    def get(self, scope: Scope) -> StateT:
        with self._guard:
            state = self._states.get(scope)
            if state is None:
                state = self._states[scope] = self._make(scope)
            self._recent[scope] = None
            self._recent.move_to_end(scope)
            overflow = self._overflow()
        for old_scope, old in overflow:
            if self._drop_cached is not None and not self._drop_cached(old):  # in use: it counts as recent
                with self._guard:
                    self._recent[old_scope] = None
        return state

    def _overflow(self) -> list[tuple[Scope, StateT]]:
        """The least recently used scopes beyond the budget, taken off the recent list (held: guard)."""
        if self._cached is None or self._drop_cached is None:
            return []
        overflow = []
        while len(self._recent) > self._cached:
            oldest, _ = self._recent.popitem(last=False)
            overflow.append((oldest, self._states[oldest]))
        return overflow

    def known(self) -> list[tuple[Scope, StateT]]:
        """Every scope with a state, and the state (what a closing store looks through)."""
        with self._guard:
            return list(self._states.items())

    def erased(self, scope: Scope) -> list[StateT]:
        """The known states an erase of `scope` touches: its own, and for a user their agents'."""
        with self._guard:
            return [
                state
                for known, state in self._states.items()
                if known == scope or (scope.agent_name is None and known.user_id == scope.user_id)
            ]


@dataclass(kw_only=True)
class CachedLog:
    """The pages of one scope's log this process has read, and where the next read starts (a byte
    offset in a file, a position in a table)."""

    generation: int
    pages: PageSequence = field(default_factory=HeldPages)
    end: int = 0

    def extend_if_at(self, start: int, end: int) -> bool:
        """Whether pages this process has just appended from `start` to `end` may be taken in (the
        caller does): only if the cache had read exactly up to `start` (otherwise the next read
        fetches them with whatever came between)."""
        if self.end != start:
            return False
        self.end = end
        return True


def retire_log(cached: CachedLog | None) -> None:
    """The log was erased from (held: its lock): a sequence of it handed out before gives none of
    its pages back, not even those it kept."""
    if cached is not None and isinstance(cached.pages, StoredPages):
        cached.pages.retire()


def acquire(lock: threading.Lock, wait: float) -> bool:
    """Take `lock` at once (wait 0) or within `wait` seconds."""
    return lock.acquire(timeout=wait) if wait > 0 else lock.acquire(blocking=False)


def done_when_idle(locks: Sequence[threading.Lock], work: Callable[[], None]) -> bool:
    """Do `work` holding every one of `locks` if each is free right now (never waiting, so it
    cannot deadlock whatever order others take them in); False when one is taken."""
    held: list[threading.Lock] = []
    try:
        for lock in locks:
            if not lock.acquire(blocking=False):
                return False
            held.append(lock)
        work()
        return True
    finally:
        for lock in reversed(held):
            lock.release()
