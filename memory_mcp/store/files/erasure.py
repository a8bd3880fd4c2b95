"""Erasing and rewriting pages of a JSON store's log: the log and vectors files are written
aside without them (or with their new text), then put in place, so that a crash leaves each file
whole, old or new; an erase marks the document first, and whoever reads it next finishes."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from memory_mcp.base.errors import MemoryGone
from memory_mcp.models import MemoryDocument, Page
from memory_mcp.store.durable import put_in_place, remove_stale_temps, written_aside
from memory_mcp.store.files.document import marked, write_document
from memory_mcp.store.files.layout import DIRECTORY_FILE, PAGES_FILE, ScopeFiles
from memory_mcp.store.files.page_log import PageLogFiles, lines
from memory_mcp.store.files.scopes import FileScopes, ScopeState, let_go_of_log, os_errors
from memory_mcp.store.files.vectors import vectors_file_without
from memory_mcp.store.interfaces import Scope
from memory_mcp.store.records import page_record

log = logging.getLogger(__name__)


class PageErasure:
    """Erases and rewrites pages of the scopes under one root."""

    def __init__(self, scopes: FileScopes, page_log: PageLogFiles) -> None:
        self._scopes = scopes
        self._log = page_log

    def erase_pages(
        self, scope: Scope, page_ids: Sequence[str], change: Callable[[MemoryDocument, list[int]], MemoryDocument]
    ) -> None:
        """The log and vectors without the pages are written aside first (a full disk changes
        nothing); then the document, changed and marked with the ids being erased; then the files
        put in place, and the mark cleared. A crash after the document write leaves the mark, and
        whoever reads this memory next, in any process, finishes the erase (`finish_erasing`)."""
        state = self._scopes.get(scope)
        files = self._scopes.layout.files(scope)
        with (
            os_errors(f"erase exchanges of {scope.describe()}"),
            state.document_lock,
            self._scopes.holding(state.document_file_lock, scope),
            self._scopes.holding_log(state, scope),
        ):
            if not files.directory.is_dir():
                raise MemoryGone(f"the memory of {scope.describe()} was erased; nothing was written")
            positions, aside = self._written_without(state, scope, files, set(page_ids))
            erasing = list(page_ids) if aside else []
            try:
                write_document(state, files.memory, lambda d: marked(change(d, positions), erasing))
            except BaseException:
                for temp, _ in aside:
                    temp.unlink(missing_ok=True)
                raise
            _put_in_place(state, aside)
            _without_crashed_copies(files)
            if erasing:
                write_document(state, files.memory, lambda d: marked(d, []))

    def rewrite_pages(self, scope: Scope, pages: Sequence[Page]) -> None:
        """The log and vectors are written aside, then put in place, vectors first: a crash
        between the two leaves the old text with its vectors gone, which a scrub run again finds."""
        state = self._scopes.get(scope)
        files = self._scopes.layout.files(scope)
        replacing = {page.page_id: page for page in pages}
        path, vectors_path = files.pages, files.vectors
        with os_errors(f"rewrite exchanges of {scope.describe()}"), self._scopes.holding_log(state, scope):
            if not files.directory.is_dir():
                raise MemoryGone(f"the memory of {scope.describe()} was erased; nothing was written")
            data, ids = self._log.records(state, scope, path)
            if not any(page_id in replacing for page_id in ids):
                return
            records = (
                page_record(replacing[page_id]).encode() if page_id in replacing else line
                for page_id, line in zip(ids, lines(data, len(data)), strict=True)
            )
            aside = [(written_aside(path, b"".join(record + b"\n" for record in records)), path)]
            kept = vectors_file_without(vectors_path, lambda vector: vector.page_id in replacing)
            if kept is not None:
                aside.insert(0, (written_aside(vectors_path, kept), vectors_path))
            _put_in_place(state, aside)
            _without_crashed_copies(files)

    def finish_erasing(self, state: ScopeState, scope: Scope, document: MemoryDocument) -> MemoryDocument:
        """Finish an erase a crash cut short after its document write (held: the document locks)."""
        files = self._scopes.layout.files(scope)
        with self._scopes.holding_log(state, scope):
            _, aside = self._written_without(state, scope, files, set(document.analysis.erasing))
            _drop_derived(files.directory)  # also where the crash came after the log was put in place
            _put_in_place(state, aside)
            _without_crashed_copies(files)
        log.warning("finished erasing %d exchanges of %s", len(document.analysis.erasing), scope.describe())
        return write_document(state, files.memory, lambda d: marked(d, []))

    def _written_without(
        self, state: ScopeState, scope: Scope, files: ScopeFiles, erased: set[str]
    ) -> tuple[list[int], list[tuple[Path, Path]]]:
        """The positions of the `erased` pages in the log, and the log and vectors files without
        them written aside, as (temp, target) pairs, for those that hold any (held: log locks)."""
        path, vectors_path = files.pages, files.vectors
        aside: list[tuple[Path, Path]] = []
        positions: list[int] = []
        with contextlib.suppress(FileNotFoundError):  # no log yet: facts only
            data, ids = self._log.records(state, scope, path)
            positions = [number for number, page_id in enumerate(ids) if page_id in erased]
            if positions:
                gone = set(positions)
                kept = b"".join(  # the lines as a read splits them: at newlines only
                    line + b"\n" for number, line in enumerate(lines(data, len(data))) if number not in gone
                )
                aside.append((written_aside(path, kept), path))
        kept_vectors = vectors_file_without(vectors_path, lambda vector: vector.page_id in erased)
        if kept_vectors is not None:
            aside.append((written_aside(vectors_path, kept_vectors), vectors_path))
        return positions, aside


def _put_in_place(state: ScopeState, aside: list[tuple[Path, Path]]) -> None:
    for temp, target in aside:
        if target.name == PAGES_FILE:
            # Before the log: a crash between the two must not leave the old log's saved index and
            # page directory beside the new log (a scrub keeps the ids they are checked against).
            _drop_derived(target.parent)
        put_in_place(temp, target)  # its directory synced: the removals above land with it
        if target.name == PAGES_FILE:
            let_go_of_log(state)  # read again: a new file, a new generation


def _without_crashed_copies(files: ScopeFiles) -> None:
    """The temps of the log and the vectors a crashed writer left: copies of records that may be
    erased now. Every writer of them holds the log's locks, as the caller does: none is under way."""
    for path in (files.pages, files.vectors):
        remove_stale_temps(path, older_than=0)


def _drop_derived(directory: Path) -> None:
    """A log's saved word index and page directory: they hold the pages' words, ids and
    timestamps. A directory written aside (a save under way, or one a crash cut short) goes too."""
    derived = ScopeFiles(directory)
    derived.index.unlink(missing_ok=True)
    derived.page_directory.unlink(missing_ok=True)
    for temp in directory.glob(f".{DIRECTORY_FILE}.*.tmp"):
        temp.unlink(missing_ok=True)
