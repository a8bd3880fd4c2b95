"""A word index built in one vectorised pass, for a fresh index given many pages at once (a
server's first retrieve for a user): 100k pages in seconds rather than the tens of seconds of
adding them one by one.

The postings hold the entries LexicalIndex.add would make, in document order (add appends a
page's entry for a term its thread's next page lends it only when that page comes), computed as
sparse matrices: with C the documents' own term counts and N the thread-neighbour matrix
(NEIGHBOUR_WEIGHT at the previous and the next page of the same thread), the weights are C + N·C.
Every weight is a multiple of one half, so the sums are exact in any order and the scores equal
those of `add`.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Sequence
from typing import Any

from memory_mcp.recall.bm25 import NEIGHBOUR_WEIGHT
from memory_mcp.recall.index_state import IndexState
from memory_mcp.recall.terms import index_terms

OWN_MARK = 2.0**40  # far above any weight: marks a document's own terms through the sums below


def built_state(documents: Sequence[tuple[str, str]]) -> IndexState:
    """The state of an index of these (text, thread) documents, as `add` would leave it."""
    import numpy as np
    from scipy import sparse

    size = len(documents)
    own, previous, vocabulary, last_by_thread = _counted_terms(documents)
    later = np.flatnonzero(previous >= 0)
    earlier = previous[later]
    # Row d of N lends page d the terms of the page before it and of the page after it.
    neighbours = sparse.csr_matrix(
        (
            np.full(2 * len(later), NEIGHBOUR_WEIGHT),
            (np.concatenate([later, earlier]), np.concatenate([earlier, later])),
        ),
        shape=(size, size),
    )
    # Own terms are marked by adding OWN_MARK, so that the flag follows each entry through the
    # sums and conversions below; it is taken off again at the end.
    by_document = (own + neighbours @ own + (own > 0) * OWN_MARK).tocsr()
    del own, neighbours
    own_flags = by_document.data >= OWN_MARK
    by_document.data[own_flags] -= OWN_MARK
    lengths = np.asarray(by_document.sum(axis=1), dtype=np.float64).ravel()
    by_document.data[own_flags] += OWN_MARK
    by_term = by_document.tocsc()
    del by_document
    by_term.sort_indices()

    starts, weights = by_term.indptr.astype(np.int64), by_term.data
    pairs = np.empty((len(weights), 2), dtype=np.float32)
    pairs[:, 0] = by_term.indices
    del by_term
    owned = weights >= OWN_MARK
    pairs[:, 1] = np.where(owned, weights - OWN_MARK, -weights)
    del weights, owned
    terms = list(vocabulary)
    slots = _newest_slots(pairs[:, 0], size, starts, terms, [d for d, _ in last_by_thread.values()])
    return IndexState(
        terms=terms,
        offsets=starts.tobytes(),
        entries=pairs.ravel().data,  # a view: the postings are not copied again
        lengths=lengths.tobytes(),
        total_length=float(lengths.sum()),
        newest_by_thread={thread: (d, counts, slots[d]) for thread, (d, counts) in last_by_thread.items()},
    )


def _newest_slots(
    documents: Any, size: int, starts: Any, terms: list[str], newest: list[int]
) -> dict[int, dict[str, int]]:
    """For each thread's newest page, the place of its entry in each of its terms' postings (each
    term's sorted by document), so that the next page added to the thread can lend it terms.
    `documents` are the postings' (float32), of `size` pages. All at once: one search per entry
    cost a 30,000-exchange build 0.3 s."""
    import numpy as np

    is_newest = np.zeros(size, dtype=bool)
    is_newest[newest] = True
    at = np.flatnonzero(is_newest[documents.astype(np.int32)])  # the entries of some thread's newest page
    term_of = np.searchsorted(starts, at, side="right") - 1
    page_of = documents[at].astype(np.int64)
    order = np.argsort(page_of, kind="stable")
    at, term_of, page_of = at[order], term_of[order], page_of[order]
    ends = np.flatnonzero(np.diff(page_of, append=-1)) + 1
    slots: dict[int, dict[str, int]] = {d: {} for d in newest}
    begin = 0
    for end in ends.tolist():
        page = int(page_of[begin])
        places = (at[begin:end] - starts[term_of[begin:end]]).tolist()
        slots[page] = dict(zip([terms[t] for t in term_of[begin:end].tolist()], places, strict=True))
        begin = end
    return slots


def _counted_terms(
    documents: Sequence[tuple[str, str]],
) -> tuple[Any, Any, dict[str, int], dict[str, tuple[int, Counter[str]]]]:
    """The documents' own term counts as a sparse matrix (a row a document, a column a term of the
    vocabulary, numbered in order of appearance), each document's previous one in its thread (-1
    for none), the vocabulary, and each thread's newest document with its counts."""
    import numpy as np
    from scipy import sparse

    size = len(documents)
    vocabulary: dict[str, int] = {}
    term_number = vocabulary.setdefault
    # Compact buffers, not lists: millions of Python ints would double the build's peak memory.
    columns, counted, row_ends = array("i"), array("i"), array("q", [0])
    previous = np.full(size, -1, dtype=np.int64)
    last_by_thread: dict[str, tuple[int, Counter[str]]] = {}
    for document, (text, thread) in enumerate(documents):
        counts = Counter(index_terms(text))
        columns.extend([term_number(term, len(vocabulary)) for term in counts])
        counted.extend(counts.values())
        row_ends.append(len(columns))
        last = last_by_thread.get(thread)
        if last is not None:
            previous[document] = last[0]
        last_by_thread[thread] = (document, counts)
    own = sparse.csr_matrix(
        (
            np.frombuffer(counted, dtype=np.int32).astype(np.float64),
            np.frombuffer(columns, dtype=np.int32),
            row_ends,
        ),
        shape=(size, len(vocabulary)),
    )
    return own, previous, vocabulary, last_by_thread
