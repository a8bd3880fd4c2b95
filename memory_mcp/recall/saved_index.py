"""A saved copy of a scope's word index, so that a restart does not tokenise every exchange again.

The index is derived data, so a snapshot is trusted only when all of this holds: it is whole (its
SHA-256 trailer matches what precedes it), of this format, made by the tokeniser in use now (the
terms of a probe sentence are saved with it and compared), and made from the same first pages the
log holds now (a digest of their ids and threads). The pages added since are then indexed as
usual. Anything else (a missing, damaged, stale or foreign snapshot) is not used: the index is
built from the log, as without snapshots, and a new snapshot is saved.

Layout: MAGIC, a 4-byte length and a JSON header (with the threads' names and the postings' part
sizes), the terms (UTF-8, one per line), the term offsets (int64), the postings (the parts of
posting_codec.compact: documents and signed weights, decoded a term at a time), the document
lengths (float64), each thread's newest page (see _ThreadTable), and the trailer.
"""

from __future__ import annotations

import hashlib
import logging
import struct
import threading
from array import array
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from memory_mcp.base.errors import StorageError
from memory_mcp.base.framing import framed, unframed
from memory_mcp.models import Page
from memory_mcp.recall.bm25 import BULK_BUILD_MIN_DOCUMENTS, NEIGHBOUR_WEIGHT, LexicalIndex
from memory_mcp.recall.index_state import IndexState, NewestPage, NewestPages
from memory_mcp.recall.posting_codec import PART_COUNT, CompactPostings, compact
from memory_mcp.recall.terms import index_terms
from memory_mcp.store import MemoryStore, PageLog, Scope
from memory_mcp.store.page_sequence import columns_of

log = logging.getLogger(__name__)

MAGIC = b"memory-mcp word index\n"
# 2: postings as float32 (document, weight) pairs; 3: thread entries saved, not searched for;
# 4: the terms as lines and the threads' newest pages as arrays, not in the JSON header (whose
# parse took 24 ms of a first retrieve at 10k exchanges); 5: the postings compact (posting_codec)
FORMAT = 5
# Its terms change whenever the tokeniser (stemming, stop words, splitting) does.
PROBE = "The children's café-visits in Zürich were running late: 3 times in 2023, O'Brien said"
_LENGTH = struct.Struct("<I")
Opened = tuple[dict[str, Any], memoryview]  # a snapshot's header and parts, its checksum checked
_Threads = tuple[list[str], list[bytes]]  # threads' names and the arrays of their newest pages


class UnusableSnapshot(ValueError):
    """Why a snapshot cannot be used (damaged, another format, or made from other pages)."""


def pages_digest(pages: Sequence[Page], count: int) -> str:
    """What the index of the first `count` pages was made from: their ids and threads, in order."""
    covered = columns_of(pages).between(0, count)
    listed = "\n".join(map("\t".join, zip(covered.ids, covered.threads)))
    return hashlib.sha256(f"{listed}\n".encode() if covered else b"").hexdigest()


class _ThreadTable(Mapping[str, NewestPage]):
    """Each thread's newest page as a snapshot holds it, read for a thread only when asked: a
    restart indexes the pages of a few threads, and a log holds thousands.

    Arrays, per thread in header order: its document (int64), where its counts and its slots end
    (int64, cumulative), then for all threads the counted terms and counts, and the slotted terms
    and slots (int32; a term is its number in the snapshot's terms)."""

    def __init__(self, names: list[str], terms: list[str], arrays: Sequence[memoryview]) -> None:
        self._number = {name: number for number, name in enumerate(names)}
        self._terms = terms
        # Views, not copies: the index keeps the snapshot's postings where they are, and with them the
        # whole snapshot (copies of these arrays held a second 2-10 MB at 20,000-30,000 exchanges).
        self._documents, self._count_ends, self._slot_ends = (part.cast("q") for part in arrays[:3])
        self._counted, self._counts, self._slotted, self._slots = (part.cast("i") for part in arrays[3:])

    @staticmethod
    def sizes(threads: int, counted: int, slotted: int) -> list[int]:
        return [8 * threads, 8 * threads, 8 * threads, 4 * counted, 4 * counted, 4 * slotted, 4 * slotted]

    @staticmethod
    def encode(newest: Mapping[str, NewestPage], terms: list[str]) -> _Threads:
        """The threads' names, in the order of their entries, and the arrays. The entries of a
        restored index's threads that no page was added to since are copied as they are, not
        decoded and encoded again (decoding 11,066 threads' took 0.3 s at 100,000 exchanges)."""
        if isinstance(newest, NewestPages) and isinstance(newest.saved, _ThreadTable):
            kept_names, kept = newest.saved._without(newest.added)
            return kept_names + list(newest.added), _joined(kept, _ThreadTable._encoded(newest.added, terms))
        return list(newest), _ThreadTable._encoded(newest, terms)

    @staticmethod
    def _encoded(newest: Mapping[str, NewestPage], terms: list[str]) -> list[bytes]:
        number = {term: n for n, term in enumerate(terms)}
        documents, count_ends, slot_ends = array("q"), array("q"), array("q")
        counted, counts, slotted, slots = array("i"), array("i"), array("i"), array("i")
        for document, thread_counts, thread_slots in newest.values():
            documents.append(document)
            counted.extend(number[term] for term in thread_counts)
            counts.extend(thread_counts.values())
            count_ends.append(len(counted))
            slotted.extend(number[term] for term in thread_slots)
            slots.extend(thread_slots.values())
            slot_ends.append(len(slotted))
        return [part.tobytes() for part in (documents, count_ends, slot_ends, counted, counts, slotted, slots)]

    def _without(self, names: Mapping[str, object]) -> _Threads:
        """This table's threads but `names`, as `encode` gives them."""
        import numpy as np

        keep = np.fromiter((name not in names for name in self._number), dtype=bool, count=len(self._number))
        arrays = [np.frombuffer(self._documents, dtype=np.int64)[keep].tobytes()]
        listed = []
        for ends, terms, values in (
            (self._count_ends, self._counted, self._counts),
            (self._slot_ends, self._slotted, self._slots),
        ):
            sizes = _ThreadTable._sizes(ends)
            entries = np.repeat(keep, sizes)
            arrays.append(np.cumsum(sizes[keep], dtype=np.int64).tobytes())
            listed += [np.frombuffer(part, dtype=np.int32)[entries].tobytes() for part in (terms, values)]
        return [name for name in self._number if name not in names], arrays + listed

    @staticmethod
    def _sizes(ends: memoryview) -> Any:
        """Each thread's number of entries in the arrays its cumulative `ends` end."""
        import numpy as np

        return np.diff(np.frombuffer(ends, dtype=np.int64), prepend=0)

    def check(self, pages: int, offsets: memoryview, entries: int) -> None:
        """UnusableSnapshot unless the terms' offsets and the threads' numbers point where they may:
        a file whose checksum holds but whose writer erred must not fail a retrieve later. The
        postings' document numbers are not read here (that would decode them all at a start)."""
        import numpy as np

        starts = np.frombuffer(offsets, dtype=np.int64)
        per_term = np.diff(starts)
        if starts[0] != 0 or starts[-1] != entries or (per_term < 0).any():
            raise UnusableSnapshot("damaged (its postings do not add up)")
        for ends, listed in ((self._count_ends, self._counted), (self._slot_ends, self._slotted)):
            if (_ThreadTable._sizes(ends) < 0).any() or (ends[-1] if ends else 0) != len(listed):
                raise UnusableSnapshot("damaged (its threads do not add up)")
        documents = np.frombuffer(self._documents, dtype=np.int64)
        counted, slotted = (np.frombuffer(part, dtype=np.int32) for part in (self._counted, self._slotted))
        slots = np.frombuffer(self._slots, dtype=np.int32)
        if (
            ((documents < 0) | (documents >= pages)).any()
            or any(((terms < 0) | (terms >= len(per_term))).any() for terms in (counted, slotted))
            or ((slots < 0) | (slots >= per_term[slotted])).any()
        ):
            raise UnusableSnapshot("damaged (its threads point outside it)")

    def __getitem__(self, thread: str) -> NewestPage:
        n = self._number[thread]
        count_start, slot_start = (self._count_ends[n - 1], self._slot_ends[n - 1]) if n else (0, 0)
        counted = range(count_start, self._count_ends[n])
        slotted = range(slot_start, self._slot_ends[n])
        return (
            self._documents[n],
            {self._terms[self._counted[i]]: self._counts[i] for i in counted},
            {self._terms[self._slotted[i]]: self._slots[i] for i in slotted},
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self._number)

    def __len__(self) -> int:
        return len(self._number)


def _joined(first: list[bytes], then: list[bytes]) -> list[bytes]:
    """Two thread tables' arrays (see _ThreadTable) as one: `then`'s threads after `first`'s."""
    ends = []
    for at, listed in ((1, 3), (2, 5)):
        shift = len(first[listed]) // 4  # where `then`'s entries start in the joined lists
        ends.append(first[at] + array("q", [end + shift for end in array("q", then[at])]).tobytes())
    return [first[0] + then[0], *ends, *(first[n] + then[n] for n in range(3, 7))]


def encode(state: IndexState, pages: int, digest: str) -> bytes:
    """A snapshot of the index `state` was taken from, made from the log's first `pages` pages
    (`digest`, their pages_digest): the state is a copy, so this may run while the index goes on."""
    names, threads = _ThreadTable.encode(state.newest_by_thread, state.terms)
    header = {
        "format": FORMAT,
        "probe": index_terms(PROBE),
        "neighbour_weight": NEIGHBOUR_WEIGHT,
        "pages": pages,
        "digest": digest,
        "terms": len(state.terms),
        "entries": len(state.entries) // 8,
        "total_length": state.total_length,
        "threads": names,
    }
    header["counted"], header["slotted"] = len(threads[3]) // 4, len(threads[5]) // 4
    terms = "\n".join(state.terms).encode()  # a term never holds a line break
    postings = compact(state.offsets, state.entries)
    header["postings"] = [len(part) for part in postings]
    return framed(MAGIC, header, [_LENGTH.pack(len(terms)), terms, state.offsets, *postings, state.lengths, *threads])


def decode(data: bytes, pages: Sequence[Page]) -> LexicalIndex:
    """The index a snapshot holds, if it may be used with the log's `pages` now; else
    UnusableSnapshot saying why."""
    return restored(opened(data), pages)


def opened(data: bytes) -> Opened:
    """A snapshot's header and parts once its checksum holds, else UnusableSnapshot: what can be
    checked without the pages (a read ahead does it on its own thread, off a first retrieve's path)."""
    try:
        return unframed(data, MAGIC)
    except ValueError as exc:
        raise UnusableSnapshot(str(exc)) from None


def restored(snapshot: Opened, pages: Sequence[Page]) -> LexicalIndex:
    """The index an `opened` snapshot holds, if it may be used with the log's `pages` now; else
    UnusableSnapshot saying why."""
    header, body = snapshot
    if header.get("format") != FORMAT or header.get("neighbour_weight") != NEIGHBOUR_WEIGHT:
        raise UnusableSnapshot(f"of another format ({header.get('format')})")
    if header.get("probe") != index_terms(PROBE):
        raise UnusableSnapshot("made by another tokeniser")
    count = header["pages"]
    if count > len(pages) or header["digest"] != pages_digest(pages, count):
        raise UnusableSnapshot("made from other exchanges than the log holds now")
    (terms_length,) = _LENGTH.unpack_from(body, 0)
    position = _LENGTH.size
    terms = bytes(body[position : position + terms_length]).decode().split("\n") if header["terms"] else []
    if len(terms) != header["terms"]:
        raise UnusableSnapshot("damaged (its terms do not add up)")
    position += terms_length
    names = header["threads"]
    if len(header["postings"]) != PART_COUNT:
        raise UnusableSnapshot("damaged (its postings are not whole)")
    sizes = [8 * (len(terms) + 1), *header["postings"], 8 * count]
    sizes += _ThreadTable.sizes(len(names), header["counted"], header["slotted"])
    parts = []
    for size in sizes:
        parts.append(body[position : position + size])
        position += size
    if position != len(body):
        raise UnusableSnapshot("damaged (its parts do not add up)")
    offsets, postings, lengths = parts[0], parts[1 : 1 + PART_COUNT], parts[1 + PART_COUNT]
    newest = _ThreadTable(names, terms, parts[2 + PART_COUNT :])
    newest.check(count, offsets, header["entries"])
    held = CompactPostings(offsets, postings)
    return LexicalIndex.from_state(IndexState(terms, offsets, b"", lengths, header["total_length"], newest, held))


class SnapshotKeeper:
    """When to use a saved index and when to save one, for the scopes of one store.

    A log of fewer than MIN_PAGES pages is indexed faster than a snapshot is checked; above it,
    an index is saved once built, again each time REFRESH_PAGES more pages were indexed, and at
    close if it grew at all, in the background (a copy of the index taken under the scope's lock, the
    encoding and the writing outside it)."""

    MIN_PAGES = BULK_BUILD_MIN_DOCUMENTS
    REFRESH_PAGES = 500

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self._saving: dict[Scope, threading.Thread] = {}
        self._guard = threading.Lock()

    def read_ahead(self, scope: Scope) -> Future[Opened | None]:
        """Start reading the scope's saved index and checking its checksum on a thread of its own,
        for a `saved_index` to come: a first retrieve reads it while the log is read (at 100k, then 72
        MB of float32 postings and 100,000 exchanges' fields: ~0.2 s less than one after the other)."""
        ahead: Future[Opened | None] = Future()

        def read() -> None:
            try:
                data = self.store.read_index_snapshot(scope)
                ahead.set_result(None if data is None else opened(data))
            except BaseException as exc:
                ahead.set_exception(exc)

        threading.Thread(target=read, name="index-snapshot-read", daemon=True).start()
        return ahead

    def saved_index(self, scope: Scope, page_log: PageLog, ahead: Future[Opened | None] | None = None) -> LexicalIndex:
        """The saved index of the log's first pages if there is a usable one, else an empty index
        (its saved copy as `ahead` read it, if given)."""
        if len(page_log.pages) < self.MIN_PAGES:
            return LexicalIndex()
        import numpy  # noqa: F401  # what decode needs, loaded while a snapshot read ahead arrives

        try:
            if ahead is None:
                data = self.store.read_index_snapshot(scope)
                index = None if data is None else decode(data, page_log.pages)
            else:
                snapshot = ahead.result()
                index = None if snapshot is None else restored(snapshot, page_log.pages)
            if index is None:
                return LexicalIndex()
        except (ValueError, KeyError, TypeError, struct.error) as exc:  # UnusableSnapshot, or parts not ours
            log.info("the saved word index of %s is not used: %s; it is built again", scope.describe(), exc)
            return LexicalIndex()
        except StorageError as exc:
            log.warning("the saved word index of %s cannot be read (%s); it is built again", scope.describe(), exc)
            return LexicalIndex()
        log.debug("word index of %s: %d exchanges from its snapshot", scope.describe(), len(index))
        return index

    def worth_saving(self, saved: int, indexed: int, closing: bool = False) -> bool:
        """Whether an index of `indexed` pages is worth saving over one of `saved` pages (when
        `closing`, any growth is: the next start then indexes nothing)."""
        return indexed >= self.MIN_PAGES and indexed - saved >= (self.REFRESH_PAGES if saved and not closing else 1)

    def due(self, scope: Scope, pages: int, added: int) -> bool:
        """Whether a process that added `added` of a log's `pages` pages without indexing them
        should build and save the index: when there is none yet, and each time the log passes a
        multiple of REFRESH_PAGES (a reader indexes what a snapshot lacks: 500 cost ~80 ms)."""
        if pages < self.MIN_PAGES:
            return False
        passed = pages // self.REFRESH_PAGES > (pages - added) // self.REFRESH_PAGES
        return passed or not self.store.has_index_snapshot(scope)

    def save_soon(self, scope: Scope, lock: threading.Lock, index: LexicalIndex, page_log: PageLog) -> bool:
        """Save the index in the background, unless a save of this scope is under way; whether it
        was started."""
        with self._guard:
            running = self._saving.get(scope)
            if running is not None and running.is_alive():
                return False
            worker = threading.Thread(
                target=self.save, args=(scope, lock, index, page_log), name="index-snapshot", daemon=True
            )
            self._saving[scope] = worker
        worker.start()
        return True

    def wait(self) -> None:
        """Let saves under way finish (a process that exits kills a daemon thread mid-write)."""
        with self._guard:
            running = list(self._saving.values())
            self._saving.clear()
        for worker in running:
            worker.join()

    def save(self, scope: Scope, lock: threading.Lock, index: LexicalIndex, page_log: PageLog) -> None:
        """Save the index now, on this thread: copied under `lock` (the scope's), encoded after,
        while searches go on (a restored index's saves at 100,000 generated exchanges held the lock
        101-134 ms, where decoding and encoding under it held it 648-1,074, the first 1,127-1,583)."""
        with lock:
            if len(index) > len(page_log.pages):  # grown from a newer read of the log: saved next time
                return
            copied = index.copy()
            digest = pages_digest(page_log.pages, len(copied))
        data = encode(copied.state(), len(copied), digest)
        try:
            if not self.store.write_index_snapshot(scope, data, page_log.generation):
                log.debug("word index of %s not saved: its log changed meanwhile", scope.describe())
        except StorageError as exc:
            log.warning("the word index of %s was not saved (%s); the next start builds it", scope.describe(), exc)
