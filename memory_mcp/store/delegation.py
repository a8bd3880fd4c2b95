"""What every backend hands on unchanged: its documents, derived data and erasing, each `MemoryStore`
method passed to the part that does it. A backend sets the parts in its constructor and writes
only what it does itself (the store as a whole, and its pages)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from memory_mcp.models import MemoryDocument, Page
from memory_mcp.store.interfaces import DocumentStore, SavedIndexStore, Scope, VectorStore
from memory_mcp.store.records import PageVector


class PageErasing(Protocol):
    """The part that erases or rewrites pages of a scope (see `ErasingStore`)."""

    def erase_pages(
        self, scope: Scope, page_ids: Sequence[str], change: Callable[[MemoryDocument, list[int]], MemoryDocument]
    ) -> None: ...

    def rewrite_pages(self, scope: Scope, pages: Sequence[Page]) -> None: ...


class ScopeErasing(Protocol):
    """The part that replaces or erases a scope whole (see `ErasingStore`)."""

    def replace(self, scope: Scope, parts: Sequence[tuple[Scope, MemoryDocument, Sequence[Page]]]) -> None: ...

    def erase(self, scope: Scope) -> None: ...


class DelegatingStore:
    """The document, vector, saved index and erasing methods of `MemoryStore`, each handed to the
    part its backend set: `_documents`, `_vectors`, `_saved_index`, `_erasure` (pages erased or
    rewritten) and `_scope_erasure` (a scope replaced or erased whole). One part may serve as several."""

    _documents: DocumentStore
    _vectors: VectorStore
    _saved_index: SavedIndexStore
    _erasure: PageErasing
    _scope_erasure: ScopeErasing

    # --- structured memory ----------------------------------------------------------------

    def read_document(self, scope: Scope) -> MemoryDocument:
        return self._documents.read_document(scope)

    def write_document(self, scope: Scope, document: MemoryDocument) -> MemoryDocument:
        return self._documents.write_document(scope, document)

    def update_document(
        self,
        scope: Scope,
        change: Callable[[MemoryDocument], MemoryDocument],
        *,
        create: bool = True,
        log_generation: int | None = None,
    ) -> MemoryDocument:
        return self._documents.update_document(scope, change, create=create, log_generation=log_generation)

    def exclusive_updates(self, scope: Scope, wait: float = 0.0) -> AbstractContextManager[bool]:
        return self._documents.exclusive_updates(scope, wait)

    # --- derived data: vectors and the saved word index -----------------------------------

    def append_vectors(self, scope: Scope, vectors: Sequence[PageVector], of_pages: bool = True) -> None:
        self._vectors.append_vectors(scope, vectors, of_pages)

    def read_vectors(self, scope: Scope, after: int) -> tuple[list[PageVector], int]:
        return self._vectors.read_vectors(scope, after)

    def erase_vectors(self, scope: Scope, model: str, ids: Sequence[str]) -> None:
        self._vectors.erase_vectors(scope, model, ids)

    def has_index_snapshot(self, scope: Scope) -> bool:
        return self._saved_index.has_index_snapshot(scope)

    def read_index_snapshot(self, scope: Scope) -> bytes | None:
        return self._saved_index.read_index_snapshot(scope)

    def write_index_snapshot(self, scope: Scope, data: bytes, generation: int) -> bool:
        return self._saved_index.write_index_snapshot(scope, data, generation)

    # --- erasing --------------------------------------------------------------------------

    def erase_pages(
        self, scope: Scope, page_ids: Sequence[str], change: Callable[[MemoryDocument, list[int]], MemoryDocument]
    ) -> None:
        self._erasure.erase_pages(scope, page_ids, change)

    def rewrite_pages(self, scope: Scope, pages: Sequence[Page]) -> None:
        self._erasure.rewrite_pages(scope, pages)

    def replace(self, scope: Scope, parts: Sequence[tuple[Scope, MemoryDocument, Sequence[Page]]]) -> None:
        self._scope_erasure.replace(scope, parts)

    def erase(self, scope: Scope) -> None:
        self._scope_erasure.erase(scope)
