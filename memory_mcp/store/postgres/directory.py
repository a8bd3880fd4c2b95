"""A long log's directory as the PostgreSQL store saves it (a row of `page_directories`): its
first pages' ids, threads and timestamps in one value, so that a start reads one row and the rows
added since instead of streaming every row of the log.

It is derived data, trusted only when whole (its SHA-256 trailer), of this format, and of the
generation and length the row says: a log only grows within a generation, so its first pages are
the ones listed for as long as the generation lasts. Anything else is not used: the rows are read.

Layout: MAGIC, a 4-byte length and a JSON header (generation, pages, the threads' names), each
page's thread as its number among them (int32), the ids and timestamps as one JSON array of two
lists, and the trailer.
"""

from __future__ import annotations

from memory_mcp.base.framing import framed, unframed
from memory_mcp.store.page_sequence import PageSequence, packed_columns, unpacked_columns

MAGIC = b"memory-mcp row directory\n"
FORMAT = 1


def encode_directory(pages: PageSequence, count: int, generation: int) -> bytes:
    """A directory of the first `count` of `pages`, of the log at `generation`."""
    names, threads, listed = packed_columns(pages, count)
    header = {"format": FORMAT, "generation": generation, "pages": count, "threads": names}
    return framed(MAGIC, header, [threads, listed])


def decode_directory(data: bytes, generation: int, count: int) -> tuple[list[str], list[str], list[str]]:
    """The ids, threads and timestamps of the `count` pages a directory of the log at `generation`
    lists; ValueError (or KeyError, TypeError, struct.error) when it cannot be used."""
    header, parts = unframed(data, MAGIC)
    if header.get("format") != FORMAT:
        raise ValueError("of another format")
    if header["generation"] != generation or header["pages"] != count:
        raise ValueError("made from another log than its row says")
    return unpacked_columns(header["threads"], parts[: 4 * count], parts[4 * count :], count)
