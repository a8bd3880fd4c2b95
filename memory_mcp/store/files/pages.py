"""The JSON page log read by byte offset, and the directory of it that a start reads instead of
parsing every record.

A page of the log is known by where its record lies; it is parsed when a caller asks for it (the
few a retrieve shows). The directory (saved beside the log) holds, for the first records of the
log, where each lies and its id, thread and timestamp. It is derived data, trusted only when whole (its SHA-256 trailer), of this format, and
made from the bytes the log begins with now (their SHA-256 is in it): the records it covers were
checked when it was made, so a start checks the bytes, not each record, and parses only what
was appended since. Anything else (missing, damaged, stale) is not used: the log is parsed as
without one, and a new directory saved.

Layout: MAGIC, a 4-byte length and a JSON header, the records' offsets (int64, one more than
records: where the last ends), each record's thread as its number in the header's list (int32),
the ids and timestamps as one JSON array of two lists, and the trailer.
"""

from __future__ import annotations

import hashlib
import os
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from memory_mcp.base.errors import LogReplaced, StorageError
from memory_mcp.base.framing import copied_array, framed, unframed
from memory_mcp.models import Page
from memory_mcp.store.durable import opened_for_reading, read_bytes
from memory_mcp.store.page_sequence import StoredPages, packed_columns, unpacked_columns
from memory_mcp.store.records import page_from_record

MAGIC = b"memory-mcp page directory\n"
FORMAT = 1
_HASH_CHUNK = 1 << 20


class FilePages(StoredPages):
    """The pages of one log file (`inode` at `path`), parsed from their records when asked for."""

    def __init__(self, path: Path, inode: int) -> None:
        super().__init__()
        self._path = path
        self._inode = inode
        self._offsets = array("q", [0])  # where each record starts, then where the last one ends

    @property
    def end(self) -> int:
        """Where the last record known ends (just past its newline)."""
        return self._offsets[-1]

    @classmethod
    def from_columns(
        cls, path: Path, inode: int, offsets: array[int], ids: list[str], threads: list[str], timestamps: list[str]
    ) -> FilePages:
        """The pages a saved directory lists (`offsets`: one more than the pages)."""
        pages = cls(path, inode)
        pages._offsets = offsets
        pages._take_columns(ids, threads, timestamps)
        return pages

    def offsets(self, count: int) -> array[int]:
        """Where each of the first `count` records starts, then where the last of them ends."""
        return self._offsets[: count + 1]

    def add(self, page_id: str, thread_id: str | None, timestamp: str, end: int) -> None:
        """The next record of the log, of the page with these fields, ending at byte `end` (its
        offset first: the sequence's length, its ids' length, must never run ahead of it)."""
        self._offsets.append(end)
        self._note(page_id, thread_id, timestamp)

    def _load(self, positions: Sequence[int]) -> list[Page]:
        spans = [(positions.start, positions.stop)] if isinstance(positions, range) else [(n, n + 1) for n in positions]
        try:
            with opened_for_reading(self._path) as fd:
                if os.fstat(fd).st_ino != self._inode:
                    raise LogReplaced(f"exchanges were erased from {self._path} while it was read; ask again")
                chunks = [self._records(fd, start, stop) for start, stop in spans]
        except FileNotFoundError:
            raise LogReplaced(f"{self._path} was erased while it was read; ask again") from None
        except OSError as exc:
            raise StorageError(f"could not read exchanges from {self._path}: {exc}") from exc
        try:
            return [page_from_record(record) for records in chunks for record in records]
        except ValidationError:
            raise StorageError(f"{self._path} changed where it was read before; read it again") from None

    def _records(self, fd: int, start: int, stop: int) -> list[bytes]:
        """The records of pages `start` to `stop`, in one read."""
        first, last = self._offsets[start], self._offsets[stop]
        data = os.pread(fd, last - first, first)
        records = data.split(b"\n")
        if len(data) != last - first or len(records) != stop - start + 1 or records[-1]:
            raise StorageError(f"{self._path} changed where it was read before; read it again")
        return records[:-1]


@dataclass(frozen=True)
class Directory:
    """What a usable directory gives a start: the pages it covers and what is known of them."""

    pages: FilePages
    host_memory_end: int  # every page carrying host memory is among the first this many
    digest: hashlib._Hash  # of the bytes the pages' records take, to go on with as the log grows


def encode_directory(pages: FilePages, count: int, host_memory_end: int, digest: hashlib._Hash) -> bytes:
    """A directory of the first `count` of `pages`, whose records are the log's first bytes up to
    where the last of them ends (their SHA-256 `digest`)."""
    offsets = pages.offsets(count)
    names, threads, listed = packed_columns(pages, count)
    header = {
        "format": FORMAT,
        "pages": count,
        "covered": offsets[-1],
        "log_sha256": digest.hexdigest(),
        "host_memory_end": host_memory_end,
        "threads": names,
    }
    return framed(MAGIC, header, [offsets.tobytes(), threads, listed])


def read_directory(directory_path: Path, log_fd: int, log_path: Path, inode: int) -> Directory | None:
    """The saved directory of the log open as `log_fd`, if there is one it may be used with."""
    try:
        data = read_bytes(directory_path)
        return _decoded(data, log_fd, log_path, inode)
    except (OSError, ValueError, KeyError, TypeError, struct.error):  # missing, damaged, stale, not ours
        return None


def log_digest(log_fd: int, length: int) -> hashlib._Hash:
    """SHA-256 of the log's first `length` bytes, read in chunks (never all held at once); more
    bytes may be added to it as the log grows."""
    digest = hashlib.sha256()
    position = 0
    while position < length:
        chunk = os.pread(log_fd, min(_HASH_CHUNK, length - position), position)
        if not chunk:
            raise ValueError("the log is shorter than its directory says")
        digest.update(chunk)
        position += len(chunk)
    return digest


def _decoded(data: bytes, log_fd: int, log_path: Path, inode: int) -> Directory:
    header, parts = unframed(data, MAGIC)
    if header.get("format") != FORMAT:
        raise ValueError("of another format")
    count, covered = header["pages"], header["covered"]
    if os.fstat(log_fd).st_size < covered:
        raise ValueError("made from a longer log than this one")
    digest = log_digest(log_fd, covered)
    if digest.hexdigest() != header["log_sha256"]:
        raise ValueError("made from other bytes than the log begins with")
    offsets = copied_array("q", parts[: 8 * (count + 1)])
    position = 8 * (count + 1)
    numbers, listed = parts[position : position + 4 * count], parts[position + 4 * count :]
    ids, threads, timestamps = unpacked_columns(header["threads"], numbers, listed, count)
    import numpy as np

    steps = np.diff(np.frombuffer(offsets, dtype=np.int64))
    if len(offsets) != count + 1 or offsets[0] != 0 or offsets[-1] != covered or (steps <= 0).any():
        raise ValueError("damaged (its records do not add up)")
    pages = FilePages.from_columns(log_path, inode, offsets, ids, threads, timestamps)
    return Directory(pages, int(header["host_memory_end"]), digest)
