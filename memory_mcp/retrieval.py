"""Lexical ranking without an LLM: BM25 over an inverted index that grows one page at a time.

BM25 is TF-IDF with saturation of repeated terms and document-length normalisation. Unlike a
fitted TF-IDF vectoriser it needs no refit when pages arrive: term statistics are kept as
counts, so an add costs O(words in the page) and a query O(postings of its terms).
"""

from __future__ import annotations

import math
import re
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence

# Chinese, Japanese kana, Korean: scripts written without spaces between words.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7a3"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_CJK_RUN = re.compile(rf"[{_CJK}]+")


def tokenize(text: str) -> list[str]:
    """Lower-cased words; runs of CJK characters become overlapping character bigrams.

    Bigrams are how search engines index CJK text without a dictionary: a two-character word
    in the query matches the same two characters wherever they stand in a page.
    """
    tokens: list[str] = []
    for match in _TOKEN.finditer(text.casefold()):
        run = match.group()
        if _CJK_RUN.fullmatch(run) and len(run) > 1:
            tokens.extend(run[i : i + 2] for i in range(len(run) - 1))
        else:
            tokens.append(run)
    return tokens


class LexicalIndex:
    """BM25 (Okapi, k1=1.2, b=0.75) over documents numbered 0, 1, 2... in the order added.

    Not thread-safe: the caller serialises `add` and `search` (search exports the posting
    buffers to numpy, and an array cannot grow while exported).
    """

    K1 = 1.2
    B = 0.75

    def __init__(self) -> None:
        self._postings: dict[str, tuple[array[int], array[int]]] = {}
        self._lengths: array[int] = array("I")
        self._total_length = 0

    def __len__(self) -> int:
        return len(self._lengths)

    def add(self, text: str) -> None:
        counts = Counter(tokenize(text))
        document = len(self._lengths)
        for term, frequency in counts.items():
            postings = self._postings.get(term)
            if postings is None:
                postings = self._postings[term] = (array("I"), array("I"))
            postings[0].append(document)
            postings[1].append(frequency)
        length = sum(counts.values())
        self._lengths.append(length)
        self._total_length += length

    def extend(self, texts: Iterable[str]) -> None:
        for text in texts:
            self.add(text)

    def search(self, query: str, limit: int, among_first: int | None = None) -> list[tuple[int, float]]:
        """Best `limit` documents for `query` as (number, score), best first; zero scores omitted.

        `among_first` restricts the answer to documents numbered below it.
        """
        # numpy is imported here, not at module load: the server must answer its handshake
        # before any heavy import, and the first search is the first moment it is needed.
        import numpy as np

        count = len(self._lengths)
        candidates = count if among_first is None else min(among_first, count)
        terms = [term for term in dict.fromkeys(tokenize(query)) if term in self._postings]
        if candidates <= 0 or not terms or limit <= 0:
            return []
        lengths = np.frombuffer(self._lengths, dtype=np.uint32).astype(np.float64)
        length_norm = self.K1 * (1 - self.B + self.B * lengths / (self._total_length / count))
        scores = np.zeros(count)
        for term in terms:
            documents_array, frequencies_array = self._postings[term]
            documents = np.frombuffer(documents_array, dtype=np.uint32)
            frequencies = np.frombuffer(frequencies_array, dtype=np.uint32).astype(np.float64)
            frequency_in_corpus = len(documents)
            idf = math.log(1 + (count - frequency_in_corpus + 0.5) / (frequency_in_corpus + 0.5))
            # Each document appears once per term's postings, so fancy-index += is exact here.
            scores[documents] += idf * frequencies * (self.K1 + 1) / (frequencies + length_norm[documents])
            del documents, frequencies  # release the buffer exports before the arrays may grow again
        scores = scores[:candidates]
        top = min(limit, candidates)
        # Keep every document scoring at least the top-th best, so that ties at the cut are all
        # seen by the sort below, which hands them to the more recent exchange.
        threshold = np.partition(scores, candidates - top)[candidates - top] if top < candidates else 0.0
        best = np.flatnonzero((scores >= threshold) & (scores > 0))
        ranked = sorted(((int(i), float(scores[i])) for i in best), key=lambda hit: (-hit[1], -hit[0]))
        return ranked[:top]


def rank_by_similarity_and_confidence(
    contents: Sequence[str],
    confidences: Sequence[float],
    query: str,
    similarity_weight: float,
    confidence_weight: float,
) -> list[tuple[int, float]]:
    """Every entry as (number, score), best first, where score = similarity_weight * TF-IDF cosine
    similarity to `query` + confidence_weight * confidence. With no query: by confidence alone.

    For the handful of facts a user has, a TF-IDF vectoriser fitted per query is cheap and
    scores short statements better than BM25's length normalisation does.
    """
    similarities = _tfidf_similarities(contents, query) if query.strip() else None
    if similarities is None:
        scored = [(i, confidence) for i, confidence in enumerate(confidences)]
    else:
        scored = [
            (i, similarity_weight * similarity + confidence_weight * confidences[i])
            for i, similarity in enumerate(similarities)
        ]
    return sorted(scored, key=lambda hit: (-hit[1], -hit[0]))


def _tfidf_similarities(contents: Sequence[str], query: str) -> list[float] | None:
    """Cosine similarity of each text to the query, or None when the texts hold no words at all.

    The vocabulary is fitted on the texts alone: query words no text contains would otherwise
    take the highest weights and shrink every similarity towards zero.
    """
    if not contents:
        return []
    # scikit-learn is imported on first use: it is far too heavy to load before the handshake.
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(analyzer=tokenize)
    try:
        matrix = vectorizer.fit_transform(contents)
    except ValueError:  # not one word in any of them
        return None
    # Rows are L2-normalised, so the dot product is the cosine similarity.
    return (matrix @ vectorizer.transform([query]).T).toarray().ravel().tolist()
