"""Lexical ranking without an LLM: BM25 over an inverted index that grows one page at a time.

BM25 is TF-IDF with saturation of repeated terms and document-length normalisation. Unlike a
fitted TF-IDF vectoriser it needs no refit when pages arrive: term statistics are kept as
weights, so an add costs O(words in the page) and a query O(postings of its terms).

Each page is indexed together with half the weight of the pages before and after it in the same
thread: an answer ("In May, at the lake") often names its topic only in the question before it.
On LoCoMo this neighbour text lifts recall@10 by about six points. A page tied to the query only
through its neighbours scores nothing while other pages hold query terms themselves: otherwise
a Korean query could return the Hebrew exchange that followed a Korean one (on LoCoMo this rule
changes no recall figure by more than half a point, and lifts none down).

Word pairs of the query ("coconut milk", "ice cream") lift the best pages that hold them next to
each other within a clause, a little: a page that says "ice cream" is more surely about the
question than one that says "ice" and, later, "cream". Only the best PHRASE_POOL pages are read
again for this, so it costs a query a few pages' worth of tokenising and the index stays as it is
(a posting per word pair would grow with every page and double the index). On LoCoMo, words
alone (bench/locomo_recall.py), PHRASE_WEIGHT 0.1 lifts recall@5 from 0.737 to 0.741 (recall@10
stays 0.811), and no category is lower at either cut. Leaving one conversation out
chooses 0.3 (four folds of five; 0.743 / 0.811 on the conversations left out, 0.743 / 0.813 on
all), but 0.3 costs open-domain questions one answer of 85 at recall@5 (0.305 to 0.294) and
multi-hop a hair: the smaller weight keeps every kind of question at least where it was. With
vectors it changes little.

A fresh index given many pages at once (a server's first retrieve for a user) is built in one
vectorised pass instead (bulk_index), to the same entries (in document order, where `add` appends a
page's entry for a term its thread's next page lends it when that page comes).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from memory_mcp.recall.fusion import best_of
from memory_mcp.recall.index_state import IndexCopy, IndexState, NewestPage, NewestPages, PostingsCopy
from memory_mcp.recall.posting_codec import CompactPostings
from memory_mcp.recall.spelling import known_term
from memory_mcp.recall.terms import index_terms, phrase_pairs, worded_terms

NEIGHBOUR_WEIGHT = 0.5
# A page from the time a query names counts as holding one more of its terms, this heavily: see
# bench/relative_dates.py for the measure.
PERIOD_WEIGHT = 0.5
# How much the query's word pairs a page holds count, against its words (see with_phrases), and
# among how many of the best pages they are looked for.
PHRASE_WEIGHT = 0.1
PHRASE_POOL = 15
# Below this many pages one at a time is quick, and needs no sparse-matrix machinery loaded.
BULK_BUILD_MIN_DOCUMENTS = 2000
MAX_DOCUMENTS = 2**24  # documents are numbered exactly in float32 up to here (16.7 million exchanges)


@dataclass(slots=True)
class _LastPage:
    """The newest page of a thread, which its next page will still add to."""

    document: int
    counts: Counter[str]
    slots: dict[str, int]  # term -> index of this document's entry in the term's postings


# A term's postings as read: an array of its own, or a view into an index's one buffer (_Postings).
_Pairs: TypeAlias = "array[float] | memoryview[Any]"


def _new_postings() -> array[float]:
    """A term's postings: one float32 array of (document, weight) pairs, in the order they were
    made (a page's entry for a term lent by its thread's next page comes after later pages of
    other threads), the weight negative where the document holds the term only through a
    neighbour. One array per term, not three, and four bytes a number: an index of a hundred
    exchanges holds some 1,500 terms, and the objects around small postings cost more than the
    postings themselves (0.66 MB per such user with three arrays). Both numbers are exact in
    float32: weights are multiples of one half, and documents stay below MAX_DOCUMENTS."""
    return array("f")


class _Postings:
    """Each term's postings (see _new_postings). Those of an index built in one pass stay where
    they are, in one buffer of all terms' pairs; those of a restored index stay compact and a
    term's are decoded when first read. Only when a page adds to a term's are they copied into an
    array of its own. An array per term up front cost a restart ~0.1 s at 24,000 real exchanges
    (51,000 terms), most of a first retrieve with a saved index."""

    def __init__(
        self,
        terms: Sequence[str] = (),
        offsets: Any = b"\0" * 8,
        entries: Any = b"",
        compact: CompactPostings | None = None,
    ) -> None:
        """`terms[i]`'s pairs are pairs offsets[i]..offsets[i+1] (int64) of `entries` (float32), or
        what `compact` gives for term i."""
        self._numbers = dict(zip(terms, range(len(terms))))
        self._ends = memoryview(offsets).cast("B").cast("q")
        self._pairs = memoryview(entries).cast("B").cast("f")
        self._compact = compact
        self._grown: dict[str, array[float]] = {}

    def copy(self) -> PostingsCopy:
        """The postings as they are now, for flat data made from them later while these change:
        only the grown ones are copied (the given ones are never written to)."""
        grown = {term: memoryview(bytes(pairs)).cast("f") for term, pairs in self._grown.items()}
        return PostingsCopy(list(self), self._numbers, self._ends, self._pairs, self._compact, grown)

    def get(self, term: str) -> _Pairs | None:
        grown = self._grown.get(term)
        return grown if grown is not None else self._as_given(term)

    def __getitem__(self, term: str) -> _Pairs:
        postings = self.get(term)
        if postings is None:
            raise KeyError(term)
        return postings

    def __contains__(self, term: object) -> bool:
        return term in self._grown or term in self._numbers

    def __iter__(self) -> Iterator[str]:
        yield from self._numbers
        yield from (term for term in self._grown if term not in self._numbers)

    def growable(self, term: str) -> array[float]:
        """The term's postings as an array that may grow or change (a copy the first time)."""
        grown = self._grown.get(term)
        if grown is None:
            grown = self._grown[term] = _new_postings()
            given = self._as_given(term, keep=False)
            if given is not None:
                grown.frombytes(given.cast("B"))
        return grown

    def _as_given(self, term: str, keep: bool = True) -> memoryview[Any] | None:
        number = self._numbers.get(term)
        if number is None:
            return None
        if self._compact is not None:
            return self._compact(number, keep)
        return self._pairs[2 * self._ends[number] : 2 * self._ends[number + 1]]


class LexicalIndex:
    """BM25 (Okapi, k1=1.2, b=0.75) over documents numbered 0, 1, 2... in the order added.

    Not thread-safe: the caller serialises `add` and `search` (search exports the posting
    buffers to numpy, and an array cannot grow while exported).
    """

    K1 = 1.2
    B = 0.75

    def __init__(self) -> None:
        self._postings = _Postings()
        self._lengths: array[float] = array("d")
        self._total_length = 0.0
        self._last_by_thread: dict[str, _LastPage] = {}
        # A restored index's newest page per thread, as saved: read for a thread when it grows.
        self._saved_last: Mapping[str, NewestPage] = {}
        # The last query's reading, keyed by the query and the index's size (see _read_terms).
        self._reading: tuple[tuple[str, int], list[tuple[str, str, str]]] | None = None

    def __len__(self) -> int:
        return len(self._lengths)

    def add(self, text: str, thread: str = "") -> None:
        """Index the next document; `thread` names whose neighbour it is."""
        document = len(self._lengths)
        if document >= MAX_DOCUMENTS:  # before the thread's previous page is lent anything
            raise ValueError(f"an index holds at most {MAX_DOCUMENTS} exchanges")
        counts = Counter(index_terms(text))
        previous = self._last_by_thread.get(thread) or self._restored_last(thread)
        weights: dict[str, float] = dict(counts)
        if previous is not None:
            for term, frequency in previous.counts.items():
                weights[term] = weights.get(term, 0.0) + NEIGHBOUR_WEIGHT * frequency
            self._lend_to_previous(previous, counts)
        slots = {term: self._post(term, document, weight, term in counts) for term, weight in weights.items()}
        length = sum(weights.values())
        self._lengths.append(length)
        self._total_length += length
        self._last_by_thread[thread] = _LastPage(document, counts, slots)

    def extend(self, documents: Sequence[tuple[str, str]]) -> None:
        """Index (text, thread) documents in order, as `add` would one by one."""
        if len(self._lengths) == 0 and len(documents) >= BULK_BUILD_MIN_DOCUMENTS:
            self._build(documents)
            return
        for text, thread in documents:
            self.add(text, thread)

    def _build(self, documents: Sequence[tuple[str, str]]) -> None:
        """All at once, in one vectorised pass (see bulk_index), to the postings `add` makes."""
        from memory_mcp.recall.bulk_index import built_state

        self._adopt(built_state(documents))

    def state(self) -> IndexState:
        """Everything the index holds, as flat buffers (copies): what a snapshot saves."""
        return self.copy().state()

    def copy(self) -> IndexCopy:
        """The index as it is now, for its `state` to be made later. A restored index stays
        compact: each save decodes what was not grown since, off the caller's lock."""
        return IndexCopy(
            self._postings.copy(),
            self._lengths.tobytes(),
            self._total_length,
            NewestPages(
                {
                    thread: (last.document, dict(last.counts), dict(last.slots))
                    for thread, last in self._last_by_thread.items()
                },
                self._saved_last,
            ),
        )

    @classmethod
    def from_state(cls, state: IndexState) -> LexicalIndex:
        """The index `state` was taken from, able to grow as it could."""
        index = cls()
        index._adopt(state)
        return index

    def _adopt(self, state: IndexState) -> None:
        """Hold what `state` holds (an empty index only): its postings where they are, no copy."""
        self._postings = _Postings(state.terms, state.offsets, state.entries, state.compact)
        self._lengths.frombytes(state.lengths)
        self._total_length = state.total_length
        self._saved_last = state.newest_by_thread

    def _restored_last(self, thread: str) -> _LastPage | None:
        saved = self._saved_last.get(thread)
        return None if saved is None else _LastPage(saved[0], Counter(saved[1]), dict(saved[2]))

    def _lend_to_previous(self, previous: _LastPage, counts: Counter[str]) -> None:
        """Half of the new page's terms join the thread's previous page."""
        for term, frequency in counts.items():
            weight = NEIGHBOUR_WEIGHT * frequency
            slot = previous.slots.get(term)
            if slot is None:
                previous.slots[term] = self._post(term, previous.document, weight, own=False)
            else:
                postings = self._postings.growable(term)
                postings[2 * slot + 1] += weight if postings[2 * slot + 1] > 0 else -weight
        added = NEIGHBOUR_WEIGHT * sum(counts.values())
        self._lengths[previous.document] += added
        self._total_length += added

    def _post(self, term: str, document: int, weight: float, own: bool) -> int:
        postings = self._postings.growable(term)
        postings.append(document)
        postings.append(weight if own else -weight)
        return len(postings) // 2 - 1

    def search(
        self,
        query: str,
        limit: int,
        among_first: int | None = None,
        allowed: Any = None,
        period: Any = None,
    ) -> list[tuple[int, float]]:
        """Best `limit` documents for `query` as (number, score), best first; zero scores omitted.

        `among_first` restricts the answer to documents numbered below it; `allowed`, a boolean
        numpy array over the first documents, to those marked True.
        `period`, a boolean array like `allowed`, marks the documents from a time the query names:
        they score as if they held one more query term, whose rarity is that of the period.
        """
        if limit <= 0:
            return []
        return best_of(self.scores(query, among_first, allowed, period), limit)

    def with_phrases(self, scores: Any, query: str, texts_of: Callable[[list[int]], list[str]]) -> Any:
        """`scores` (as `scores` gives them), the best PHRASE_POOL documents lifted by the query's
        word pairs they hold in their `texts_of(documents)` (asked for at once): BM25 over the
        pairs, each as rare as its two words on average, PHRASE_WEIGHT times. Other documents keep
        their score."""
        wanted = set(phrase_pairs(query))
        best = best_of(scores, PHRASE_POOL) if wanted else []
        if not best:
            return scores
        average_length = self._total_length / len(self._lengths)
        rarity = {pair: (self._idf(pair[0]) + self._idf(pair[1])) / 2 for pair in wanted}
        lifted = scores.copy()
        documents = [document for document, _ in best]
        for document, text in zip(documents, texts_of(documents), strict=True):
            held = Counter(pair for pair in phrase_pairs(text) if pair in wanted)
            length_norm = self.K1 * (1 - self.B + self.B * self._lengths[document] / average_length)
            lifted[document] += PHRASE_WEIGHT * sum(
                rarity[pair] * frequency * (self.K1 + 1) / (frequency + length_norm) for pair, frequency in held.items()
            )
        return lifted

    def own_scores(self, query: str, documents: Sequence[int]) -> list[float]:
        """BM25 of `query` over these documents' own words alone: what each page itself says of
        the query, without the terms its thread's neighbours lend it for ranking (a floor on
        relevance must not show a page for words it does not hold)."""
        import numpy as np

        count = len(self._lengths)
        if not count:
            return [0.0] * len(documents)
        average = self._total_length / count
        asked = np.asarray(documents, dtype=np.float32)  # exact: documents stay below MAX_DOCUMENTS
        scores = [0.0] * len(documents)
        for term in self.query_terms(query):
            postings = self._postings.get(term)
            if postings is None:
                continue
            # Not searched by document: a page lent a term by its thread's next page gets its entry
            # after later pages of other threads (the postings are in the order entries were made).
            pairs = np.frombuffer(postings, dtype=np.float32).reshape(-1, 2)
            held = pairs[np.isin(pairs[:, 0], asked) & (pairs[:, 1] > 0)]
            del pairs  # release the buffer export before the array may grow again
            own = dict(zip(held[:, 0].astype(int).tolist(), held[:, 1].tolist(), strict=True))
            idf = self._idf(term)
            for slot, document in enumerate(documents):
                weight = own.get(document)
                if weight is not None:
                    norm = self.K1 * (1 - self.B + self.B * self._lengths[document] / average)
                    scores[slot] += idf * weight * (self.K1 + 1) / (weight + norm)
        return scores

    def query_weight(self, query: str) -> float:
        """What a page holding each of the query's terms once, at the average length, would score:
        the sum of the terms' rarities, a term no page holds counting as the rarest. A score over
        this is how much of the query a page answers, on a scale that does not grow with the
        number of pages (see relevance.py)."""
        unseen = math.log(1 + (len(self._lengths) + 0.5) / 0.5)
        return sum(self._idf(term) if term in self._postings else unseen for term in self.query_terms(query))

    def query_terms(self, query: str) -> list[str]:
        """The query's terms, each once, a misspelt word read as the term pages hold (spelling.py)."""
        return list(dict.fromkeys(read for _, _, read in self._read_terms(query)))

    def typos(self, query: str) -> dict[str, str]:
        """The query's misspelt words, each with the term pages hold that it is read as."""
        return {word: read for word, own, read in self._read_terms(query) if read != own}

    def _read_terms(self, query: str) -> list[tuple[str, str, str]]:
        """(word, its term, the term it is read as) for each of the query's words: read once per
        query and index size, as one search asks several times (every page added grows the size)."""
        key = (query, len(self._lengths))
        reading = self._reading
        if reading is None or reading[0] != key:
            holding = self._pages_holding
            reading = self._reading = key, [(w, term, known_term(w, term, holding)) for w, term in worded_terms(query)]
        return reading[1]

    def _pages_holding(self, term: str) -> int:
        postings = self._postings.get(term)
        return 0 if postings is None else len(postings) // 2

    def period_lift(self, within: int) -> float:
        """What each of the `within` documents from the period a query names gains in its score:
        one more query term, as rare as they are."""
        count = len(self._lengths)
        return PERIOD_WEIGHT * math.log(1 + (count - within + 0.5) / (within + 0.5)) if within else 0.0

    def _idf(self, term: str) -> float:
        frequency_in_corpus = self._pages_holding(term)
        return math.log(1 + (len(self._lengths) - frequency_in_corpus + 0.5) / (frequency_in_corpus + 0.5))

    def scores(
        self,
        query: str,
        among_first: int | None = None,
        allowed: Any = None,
        period: Any = None,
    ) -> Any:
        """Every candidate document's score for `query` (as `search` has it), as a numpy array."""
        # numpy is imported here, not at module load: the server must answer its handshake
        # before any heavy import, and the first search is the first moment it is needed.
        import numpy as np

        count = len(self._lengths)
        candidates = max(0, count if among_first is None else min(among_first, count))
        terms = [term for term in self.query_terms(query) if term in self._postings]
        in_period = np.zeros(0, dtype=np.intp) if period is None else np.flatnonzero(period[:count])
        if candidates <= 0 or not (terms or len(in_period)):
            return np.zeros(candidates)
        lengths = np.frombuffer(self._lengths, dtype=np.float64)
        length_norm = self.K1 * (1 - self.B + self.B * lengths / (self._total_length / count))
        scores = np.zeros(count)
        holds_a_term = np.zeros(count, dtype=bool)
        for term in terms:
            pairs = np.frombuffer(self._postings[term], dtype=np.float32).reshape(-1, 2)
            documents = pairs[:, 0].astype(np.intp)
            signed = pairs[:, 1].astype(np.float64)
            del pairs  # release the buffer export before the array may grow again
            weights = np.abs(signed)
            idf = self._idf(term)
            # Each document appears once per term's postings, so fancy-index += is exact here.
            scores[documents] += idf * weights * (self.K1 + 1) / (weights + length_norm[documents])
            holds_a_term[documents[signed > 0]] = True
        del lengths
        if len(in_period):
            scores[in_period] += self.period_lift(len(in_period))
            holds_a_term[in_period] = True
        scores, holds_a_term = scores[:candidates], holds_a_term[:candidates]
        if allowed is not None:
            covered = min(len(allowed), candidates)
            scores[:covered][~allowed[:covered]] = 0.0
            holds_a_term[:covered] &= allowed[:covered]
        if holds_a_term.any():  # pages that hold query terms themselves: only they may score
            scores[~holds_a_term] = 0.0
        return scores
