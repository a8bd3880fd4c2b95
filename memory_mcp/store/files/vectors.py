"""The JSON store's page vectors: one file per scope (`vectors.jsonl`), appended to, and rewritten
whole, under a new id, when vectors are erased.

The file begins with a record holding a random id, new at every rewrite; a reader's mark is that
id and a byte offset in the file, `file_id << MARK_OFFSET_BITS | offset`, so that a mark into a
file that was rewritten since (even on a recycled inode) is never taken for a mark into this one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path

from memory_mcp.store.durable import append_records, atomic_write, opened_for_reading, read_bytes, remove_stale_temps
from memory_mcp.store.files.page_log import PageLogFiles, first_record
from memory_mcp.store.files.scopes import FileScopes, os_errors
from memory_mcp.store.interfaces import Scope
from memory_mcp.store.records import PageVector, vector_from_record, vector_record

log = logging.getLogger(__name__)

MARK_OFFSET_BITS = 48  # of a vectors mark: the byte offset; the bits above hold the file's id
_VECTORS_HEADER_START = b'{"vectors_file": '
_OFFSET_MASK = (1 << MARK_OFFSET_BITS) - 1


class VectorFiles:
    """The vectors files of the scopes under one root."""

    def __init__(self, scopes: FileScopes, page_log: PageLogFiles) -> None:
        self._scopes = scopes
        self._log = page_log

    def append_vectors(self, scope: Scope, vectors: Sequence[PageVector], of_pages: bool = True) -> None:
        if not vectors:
            return
        state = self._scopes.get(scope)
        files = self._scopes.layout.files(scope)
        path = files.vectors
        with os_errors(f"store page vectors for {scope.describe()}"), self._scopes.holding_log(state, scope):
            if not files.directory.is_dir():  # under the lock an erase takes: not erased meanwhile
                return
            if of_pages:  # pages erased since their vectors were computed: their vectors go too
                stored = set(self._log.ids_held(state, scope, files.pages))
                vectors = [vector for vector in vectors if vector.page_id in stored]
            records = b"".join((vector_record(vector) + "\n").encode("ascii") for vector in vectors)
            if records:
                header = b"" if path.exists() and path.stat().st_size else _vectors_header()
                append_records(path, header + records)

    def read_vectors(self, scope: Scope, after: int) -> tuple[list[PageVector], int]:
        """A mark is the file's id (its first record, new at every rewrite) and a byte offset in
        it: `file_id << MARK_OFFSET_BITS | offset`."""
        path = self._scopes.layout.files(scope).vectors
        with os_errors(f"read the page vectors of {scope.describe()}"):
            try:
                with opened_for_reading(path) as fd:
                    file_id = _vectors_file_id(first_record(fd))
                    size = os.fstat(fd).st_size
                    after = after & _OFFSET_MASK if after >> MARK_OFFSET_BITS == file_id else 0
                    after = after if after <= size else 0
                    data = os.pread(fd, size - after, after)
            except FileNotFoundError:
                return [], 0
        complete = data[: data.rfind(b"\n") + 1]  # a torn last line is an append under way or cut short
        vectors = []
        for line in complete.splitlines():
            if line.startswith(_VECTORS_HEADER_START):
                continue
            try:
                vectors.append(vector_from_record(line))
            except (ValueError, KeyError, TypeError):
                log.warning("%s holds a damaged line; its page will be embedded again", path)
        return vectors, file_id << MARK_OFFSET_BITS | (after + len(complete))

    def erase_vectors(self, scope: Scope, model: str, ids: Sequence[str]) -> None:
        state = self._scopes.get(scope)
        path = self._scopes.layout.files(scope).vectors
        with os_errors(f"erase vectors of {scope.describe()}"), self._scopes.holding_log(state, scope):
            if path.exists():
                kept = vectors_without(read_bytes(path), lambda vector: vector.model == model and vector.page_id in ids)
                if kept is not None:
                    atomic_write(path, kept)
                remove_stale_temps(path)


def vectors_without(data: bytes, erased: Callable[[PageVector], bool]) -> bytes | None:
    """The vectors file `data` without the records `erased` picks, under a new file id; None when
    it holds none of them (nothing to rewrite)."""
    kept, dropped = [], False
    for line in data[: data.rfind(b"\n") + 1].splitlines():
        if line.startswith(_VECTORS_HEADER_START):
            continue
        with contextlib.suppress(ValueError, KeyError, TypeError):  # a damaged line stays as it was
            if erased(vector_from_record(line)):
                dropped = True
                continue
        kept.append(line + b"\n")
    return _vectors_header() + b"".join(kept) if dropped else None


def vectors_file_without(path: Path, erased: Callable[[PageVector], bool]) -> bytes | None:
    """The vectors file at `path` without the records `erased` picks (see `vectors_without`);
    None when there is no such file or it holds none of them."""
    return vectors_without(read_bytes(path), erased) if path.exists() else None


def _vectors_header() -> bytes:
    """The first record of a vectors file: a random id, so that a reader's mark into a file that
    was rewritten since (even on a recycled inode) is never taken for a mark into this one."""
    return _VECTORS_HEADER_START + b"%d}\n" % (secrets.randbits(40) | 1)


def _vectors_file_id(first: bytes) -> int:
    """The id in a vectors file's first record (0: a file from before ids, or empty)."""
    if not first.startswith(_VECTORS_HEADER_START):
        return 0
    try:
        return int(json.loads(first)["vectors_file"])
    except (ValueError, KeyError, TypeError):
        return 0
