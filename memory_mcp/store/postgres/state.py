"""What the PostgreSQL store keeps in a process for each scope: the log's columns as read, the
document at its version, and the locks that order this process's threads (the database's own
locks order the instances)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from memory_mcp.models import MemoryDocument, Page
from memory_mcp.store.page_sequence import StoredPages
from memory_mcp.store.scope_state import CachedLog, done_when_idle, retire_log


@dataclass
class DocumentCache:
    version: int
    document: MemoryDocument


class RowPages(StoredPages):
    """The pages of a log at one generation: their ids, threads and timestamps as read, each page
    fetched by its position when asked for."""

    def __init__(self, load: Callable[[Sequence[int]], list[Page]]) -> None:
        super().__init__()
        self._load_rows = load

    @classmethod
    def from_columns(
        cls, load: Callable[[Sequence[int]], list[Page]], ids: list[str], threads: list[str], timestamps: list[str]
    ) -> RowPages:
        """The pages a saved directory lists."""
        pages = cls(load)
        pages._take_columns(ids, threads, timestamps)
        return pages

    def add(self, page_id: str, thread_id: str | None, timestamp: str) -> None:
        self._note(page_id, thread_id, timestamp)

    def _load(self, positions: Sequence[int]) -> list[Page]:
        return self._load_rows(positions)


@dataclass(kw_only=True)
class RowLog(CachedLog):
    """The log as read: its pages' columns (`end`: one past the highest position read)."""

    pages: RowPages
    directory_pages: int = 0  # how many pages the saved directory covers


@dataclass
class ScopeState:
    log_lock: threading.Lock = field(default_factory=threading.Lock)
    document_lock: threading.Lock = field(default_factory=threading.Lock)  # guards `document`
    update_lock: threading.Lock = field(default_factory=threading.Lock)  # one update_document at a time here
    update_guard: threading.Lock = field(default_factory=threading.Lock)  # the updater's turn, in this process
    log: RowLog | None = None
    document: DocumentCache | None = None


def drop_cached(state: ScopeState) -> bool:
    """Let go of a scope's cached pages and document, unless a thread is using them right now (the
    generation is the database's, so reading them again changes nothing else)."""

    def drop() -> None:
        state.log = state.document = None

    return done_when_idle([state.log_lock, state.document_lock], drop)


def let_go_of_log(state: ScopeState) -> None:
    """Forget the log as read (held: state.log_lock): exchanges were erased from it."""
    retire_log(state.log)
    state.log = None
