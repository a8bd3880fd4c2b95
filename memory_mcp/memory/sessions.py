"""MemoryOS's mid-term tier: exchanges grouped into sessions, each with a heat.

    H = heat_alpha * visits + heat_beta * exchanges + heat_gamma * exp(-hours since last visit / tau)

A visit is a retrieval that returned one of the session's pages. Visits are counted in memory
and saved in batches, with the next document write, never by rewriting a file per query (which
is what MemoryOS does). Heat decides which sessions leave the searched set first, lifts the
ranking of pages slightly, and brings forward the analysis of a session that is in demand.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from memory_mcp.base.settings import Settings
from memory_mcp.models import MemoryDocument, Page, SessionState
from memory_mcp.store.page_sequence import columns_of

RETRIEVALS_PER_SAVE = 20
SECONDS_PER_SAVE = 60.0


def session_of(page: Page) -> str:
    """The session a page belongs to: its thread, or for thread-less pages the day it was said."""
    return session_named(page.thread_id or "", page.timestamp)


def session_named(thread: str, timestamp: str) -> str:
    """The session of a page of this thread ("": none) said at `timestamp`."""
    return f"thread:{thread}" if thread else f"day:{timestamp[:10]}"


def thread_of_session(session: str) -> str:
    """The updater's thread key for a session (thread-less pages share the thread "")."""
    return session.removeprefix("thread:") if session.startswith("thread:") else ""


def heat(state: SessionState, exchanges: int, now: datetime, settings: Settings) -> float:
    """MemoryOS's segment heat. A session never visited is as recent as its creation, which the
    caller passes as `lastVisit` when there is no visit yet."""
    recency = 0.0
    if state.lastVisit:
        hours = max(0.0, (now - _parse(state.lastVisit)).total_seconds() / 3600)
        recency = math.exp(-hours / settings.heat_tau_hours)
    interactions = max(0, exchanges - state.counted)
    return settings.heat_alpha * state.visits + settings.heat_beta * interactions + settings.heat_gamma * recency


class SessionTable:
    """Per scope: the session of every page (in log order), session sizes, and visits not saved yet."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.generation = -1
        self.page_sessions: list[str] = []
        self.sizes: Counter[str] = Counter()
        self.first_seen: dict[str, str] = {}  # session -> timestamp of its first page
        self._names: dict[str, str] = {}  # a session's name held once, not once a page
        self.unsaved_visits: Counter[str] = Counter()
        self.unsaved_last_visit: dict[str, str] = {}
        self.unsaved_retrievals = 0
        self._clock = clock
        self._saved_at = clock()

    def catch_up(self, generation: int, pages: Sequence[Page]) -> None:
        """Take in pages added since the last call (or start over if the log was replaced)."""
        if generation != self.generation:
            self.generation = generation
            self.page_sessions, self.sizes, self.first_seen, self._names = [], Counter(), {}, {}
        added = columns_of(pages).between(len(self.page_sessions))
        if not added:
            return
        timestamps = added.timestamps
        named = list(map(session_named, added.threads, timestamps))
        self.sizes.update(named)
        self.page_sessions += [self._names.setdefault(name, name) for name in named]
        firsts = dict(zip(reversed(named), reversed(timestamps)))  # earliest wins
        for name, timestamp in firsts.items():
            self.first_seen.setdefault(name, timestamp)

    def visit(self, sessions: Iterable[str], when: str) -> None:
        """One retrieval returned pages of these sessions: one visit each."""
        self.unsaved_retrievals += 1
        for session in set(sessions):
            self.unsaved_visits[session] += 1
            self.unsaved_last_visit[session] = when

    def should_save(self) -> bool:
        """Every RETRIEVALS_PER_SAVE retrievals, or after SECONDS_PER_SAVE with any visit unsaved."""
        if not self.unsaved_visits:
            return False
        return self.unsaved_retrievals >= RETRIEVALS_PER_SAVE or self._clock() - self._saved_at >= SECONDS_PER_SAVE

    def apply_unsaved(self, document: MemoryDocument) -> MemoryDocument:
        """The document with the unsaved visits added to what it holds (which may include other
        processes' visits), ready to write; the table then counts from zero again."""
        sessions = {name: state.model_copy() for name, state in document.sessions.items()}
        for name, count in self.unsaved_visits.items():
            state = sessions.setdefault(name, SessionState())
            state.visits += count
            state.lastVisit = max(state.lastVisit, self.unsaved_last_visit.get(name, ""))
        self.unsaved_visits.clear()
        self.unsaved_last_visit.clear()
        self.unsaved_retrievals = 0
        self._saved_at = self._clock()
        return document.model_copy(update={"sessions": sessions})

    def state(self, document: MemoryDocument, session: str) -> SessionState:
        """The session as it stands, counting unsaved visits; never visited = last visited at creation."""
        state = document.sessions.get(session, SessionState()).model_copy()
        state.visits += self.unsaved_visits.get(session, 0)
        state.lastVisit = max(
            state.lastVisit, self.unsaved_last_visit.get(session, ""), self.first_seen.get(session, "")
        )
        return state

    def heats(
        self, document: MemoryDocument, now: datetime, settings: Settings, only: Iterable[str] | None = None
    ) -> dict[str, float]:
        """Heat of every session, or of `only` those (per query, only the hits' sessions matter)."""
        names = self.sizes if only is None else set(only)
        return {name: heat(self.state(document, name), self.sizes[name], now, settings) for name in names}


@dataclass(frozen=True)
class SessionView:
    """One session as a person looking through their memory sees it."""

    name: str  # "thread:<id>" or "day:<date>"
    exchanges: int
    heat: float
    archived: bool
    visits: int
    last_visit: str


def session_views(
    pages: Sequence[Page], document: MemoryDocument, now: datetime, settings: Settings
) -> list[SessionView]:
    """Every session of the log, hottest first, with what decides whether everyday retrieval still
    searches it (visits saved so far; a running server may hold a few it has not saved yet)."""
    table = SessionTable()
    table.catch_up(0, pages)
    archived = archived_sessions(document)
    views = []
    for name, size in table.sizes.items():
        saved = document.sessions.get(name, SessionState())
        warmth = heat(table.state(document, name), size, now, settings)
        views.append(SessionView(name, size, warmth, name in archived, saved.visits, saved.lastVisit))
    return sorted(views, key=lambda view: (-view.heat, view.name))


def archived_sessions(document: MemoryDocument) -> frozenset[str]:
    return frozenset(name for name, state in document.sessions.items() if state.archived)


def sessions_to_archive(
    heats: dict[str, float],
    visits: dict[str, int],
    archived: frozenset[str],
    unanalysed: set[str],
    capacity: int,
) -> list[str]:
    """The coldest sessions (lowest heat, then fewest visits) beyond `capacity`, skipping any with
    an exchange not yet analysed: eviction must never cost memory that was not extracted yet."""
    live = [name for name in heats if name not in archived]
    excess = len(live) - capacity
    if excess <= 0:
        return []
    candidates = sorted(
        (name for name in live if name not in unanalysed), key=lambda n: (heats[n], visits.get(n, 0), n)
    )
    return candidates[:excess]


def _parse(timestamp: str) -> datetime:
    moment = datetime.fromisoformat(timestamp)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
