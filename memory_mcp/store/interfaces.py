"""The storage interfaces the service depends on: one per part of what a store does, and
`MemoryStore`, their union, which every backend implements.

A caller that needs one part names that one (a saved index needs only `SavedIndexStore`); one
that needs them all names `MemoryStore`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from memory_mcp.base.errors import StorageError
from memory_mcp.models import MemoryDocument, Page
from memory_mcp.store.page_sequence import PageSequence
from memory_mcp.store.records import PageVector


@dataclass(frozen=True)
class Scope:
    """Whose memory: a user, or one agent of that user (agent_name None = the user's own)."""

    user_id: str
    agent_name: str | None = None

    def describe(self) -> str:
        return self.user_id if self.agent_name is None else f"{self.user_id}/{self.agent_name}"


@dataclass(frozen=True)
class PageLog:
    """The pages of one scope in the order they were added.

    `generation` changes whenever the log was replaced rather than appended to, so an index
    built over `pages[:n]` knows it may extend itself only while the generation is unchanged.
    The sequence is shared: callers read it and never mutate it. Its ids, threads and timestamps
    are columns: walk those, not the pages, where they are all that is needed. Pages are read back
    from the store when asked for, so they are asked for while it is open.
    """

    generation: int
    pages: PageSequence


class PageStore(Protocol):
    """The page log of each scope: verbatim exchanges, appended and read back in order."""

    def append_page(self, scope: Scope, page: Page) -> None:
        """Store `page` durably before returning; concurrent appenders never lose or mix records."""

    def append_pages(self, scope: Scope, pages: Sequence[Page]) -> None:
        """Store several pages in order, durably, as one write. Pages come from elsewhere (an
        import, a transcript): if any of their ids is already stored, raise `already_stored` and
        write nothing, so that two imports of the same pages at once cannot store them twice."""

    def read_pages(self, scope: Scope) -> PageLog:
        """All pages of `scope`, including those other processes appended since the last read."""

    def page_count(self, scope: Scope) -> int:
        """How many pages the scope's log holds, without keeping them in memory (for a status or
        a check at start that must not load every user's log). The JSON files are checked on the
        way, each record once: StorageError names the line of one that cannot be read."""

    def host_memory_from(self, scope: Scope, start: int) -> bool:
        """Whether a page at position `start` or later carries host memory, answered without
        keeping the log in memory (at start: is there host memory a crash left unapplied?)."""


class DocumentStore(Protocol):
    """The structured memory document of each scope, and the updater's turn at changing it."""

    def read_document(self, scope: Scope) -> MemoryDocument:
        """The scope's memory document (empty if none was written). Treat it as read-only."""

    def write_document(self, scope: Scope, document: MemoryDocument) -> MemoryDocument:
        """Atomically replace the scope's document; returns what was stored (with lastUpdated).
        Raises StorageError, writing nothing, if the current document is damaged."""

    def update_document(
        self,
        scope: Scope,
        change: Callable[[MemoryDocument], MemoryDocument],
        *,
        create: bool = True,
        log_generation: int | None = None,
    ) -> MemoryDocument:
        """Read, change and write the document under the scope's lock, so no concurrent edit is lost.

        Background work passes `create=False`: it may update memory, never begin it, so it cannot
        bring back memory erased meanwhile (MemoryGone is raised, nothing written). With
        `log_generation`, the write happens only if the page log is still the one read then, not
        one begun anew after an erase."""

    def exclusive_updates(self, scope: Scope, wait: float = 0.0) -> AbstractContextManager[bool]:
        """Claim the right to run the memory updater on `scope`, across threads and processes.
        Yields False when someone else still holds it after `wait` seconds (0: do not wait)."""


class VectorStore(Protocol):
    """Embeddings of each scope's pages (and facts): derived data, kept beside the log."""

    def append_vectors(self, scope: Scope, vectors: Sequence[PageVector], of_pages: bool = True) -> None:
        """Durably store embeddings (a scope erased meanwhile stores nothing): of the scope's
        pages, and then a vector whose page is no longer stored is dropped, so that no vector
        outlives an erase; or, `of_pages` False, of something else (facts) under ids of its own.
        Appended: a later vector for the same id and model wins."""

    def erase_vectors(self, scope: Scope, model: str, ids: Sequence[str]) -> None:
        """Erase, for good, the scope's vectors of `model` with these ids; nothing else changes."""

    def read_vectors(self, scope: Scope, after: int) -> tuple[list[PageVector], int]:
        """Vectors stored since mark `after` (0: all), and the mark to read on from. After vectors
        were erased (`erase_pages`), a mark from before may give every vector again, never a
        damaged one nor fewer than were stored since."""


class SavedIndexStore(Protocol):
    """Each scope's saved word index: derived from its log, valid only while that log is."""

    def has_index_snapshot(self, scope: Scope) -> bool:
        """Whether the scope has a saved word index to read (a cheap look: a file's presence, a
        row's), so that one is read ahead of the log only where there is one."""

    def read_index_snapshot(self, scope: Scope) -> bytes | None:
        """The scope's saved word index as saved (index_snapshot.py decides whether it may be
        used), or None when there is none."""

    def write_index_snapshot(self, scope: Scope, data: bytes, generation: int) -> bool:
        """Save the scope's word index, made from its log at `generation`, in place of the one
        before; False (nothing saved) when the log was replaced since or the scope erased, so a
        snapshot never outlives the exchanges it was made from."""


class ErasingStore(Protocol):
    """What takes memory away or puts other memory in its place, each in one step a crash
    cannot leave half done."""

    def erase_pages(
        self, scope: Scope, page_ids: Sequence[str], change: Callable[[MemoryDocument, list[int]], MemoryDocument]
    ) -> None:
        """Erase these pages for good, their vectors too, and apply `change` to the document in
        the same step, given the positions the pages had (ascending; ids no longer stored are
        skipped). The log gets a new generation when it loses a page, and the saved word index goes
        (it holds the words of the pages). Readers see the document and
        log before or after, never a mix (a backend without transactions finishes an erase a
        crash cut short on its next read). MemoryGone if the scope holds nothing."""

    def rewrite_pages(self, scope: Scope, pages: Sequence[Page]) -> None:
        """Store these pages in place of those with the same ids (same positions, threads and
        times: their text changed, as a scrub changes it), their vectors erased, the saved word
        index gone, and the log given a new generation: one step that a crash leaves done or not
        begun. Ids no longer stored are skipped. MemoryGone if the scope holds nothing."""

    def replace(self, scope: Scope, parts: Sequence[tuple[Scope, MemoryDocument, Sequence[Page]]]) -> None:
        """Everything stored for `scope` (for a user, their agents too) replaced by `parts` (each
        scope's document and pages) in one step: a crash leaves the old memory or the new, never
        neither nor a mix. Vectors and saved indexes of the old memory go with it."""

    def erase(self, scope: Scope) -> None:
        """Remove everything stored for `scope` (for a user, their agents too) at once: a crash
        leaves all of it or none, and writes racing the erase cannot bring any of it back."""


class StoreAdministration(Protocol):
    """The store as a whole: where it keeps memory, whether it can keep it now, whose it holds."""

    location: str  # where memory is kept, as it may be shown (a database's DSN without its password)

    def close(self) -> None:
        """Release what the store holds open (connections); it is not used afterwards."""

    def check_ready(self) -> None:
        """Raise StorageError if memory cannot be stored right now (what a health check asks)."""

    def bulk_loaded(self) -> None:
        """Many exchanges were just written at once (a migration, an import): prepare for reading
        them back (PostgreSQL gathers its planner's statistics, which a new table lacks until
        autovacuum runs: reading 30,000 pages back by position then took 13.5 s, not 0.1 s)."""

    def list_users(self) -> list[str]:
        """Ids of every user with stored memory, sorted."""

    def list_agents(self, user_id: str) -> list[str]:
        """Names of the user's agents with stored memory, sorted."""

    def list_scopes(self) -> list[Scope]:
        """Every user and every agent of a user with stored memory."""


class MemoryStore(PageStore, DocumentStore, VectorStore, SavedIndexStore, ErasingStore, StoreAdministration, Protocol):
    """Durable per-scope storage of verbatim pages and the structured memory document: every part
    above, as each backend provides them."""


def already_stored(scope: Scope, page_ids: Sequence[str]) -> StorageError:
    """The refusal of pages whose ids are stored already (append_pages, on every backend)."""
    shown = ", ".join(page_ids[:3]) + (f" (and {len(page_ids) - 3} more)" if len(page_ids) > 3 else "")
    return StorageError(
        f"could not store pages for {scope.describe()}: a page with one of the ids {shown} is already stored "
        "there; nothing was written"
    )
