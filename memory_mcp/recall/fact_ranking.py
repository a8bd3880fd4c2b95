"""Facts and knowledge ranked against a query: TF-IDF cosine over a user's few hundred entries,
or their relevance by meaning where that is higher, then by confidence."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from memory_mcp.recall.terms import index_terms


def entry_similarities(
    contents: Sequence[str], query: str, relevance: Sequence[float] | None = None, whole_query: bool = False
) -> list[float] | None:
    """Each entry's similarity to `query` (0-1): TF-IDF cosine, or its `relevance` by meaning
    where that is higher; None with no query. `whole_query`: the query's words that no entry
    holds count too (as the rarest), so that a query the entries barely touch scores low on an
    absolute scale (what a floor needs); the order of the entries is the same either way."""
    if not query.strip():
        return None
    similarities = _tfidf_similarities(contents, query, whole_query)
    if relevance is not None:
        similarities = [
            max(float(by_meaning), by_words)
            for by_meaning, by_words in zip(relevance, similarities or [0.0] * len(contents), strict=True)
        ]
    return similarities


def rank_by_similarity_and_confidence(
    contents: Sequence[str],
    confidences: Sequence[float],
    query: str,
    similarity_weight: float,
    confidence_weight: float,
    relevance: Sequence[float] | None = None,
) -> list[tuple[int, float]]:
    """Every entry as (number, score), best first, where score = similarity_weight * TF-IDF cosine
    similarity to `query` + confidence_weight * confidence. With no query: by confidence alone.
    `relevance` (0-1 per entry: how much it stands out by meaning) counts where it beats the
    words' similarity.

    For the handful of facts a user has, a TF-IDF vectoriser fitted per query is cheap and
    scores short statements better than BM25's length normalisation does.
    """
    similarities = entry_similarities(contents, query, relevance)
    if similarities is None:
        scored = [(i, confidence) for i, confidence in enumerate(confidences)]
    else:
        scored = [
            (i, similarity_weight * similarity + confidence_weight * confidences[i])
            for i, similarity in enumerate(similarities)
        ]
    return sorted(scored, key=lambda hit: (-hit[1], -hit[0]))


def _tfidf_similarities(contents: Sequence[str], query: str, whole_query: bool = False) -> list[float] | None:
    """Cosine similarity of each text to the query, or None when the texts hold no words at all.

    The vocabulary is fitted on the texts alone: query words no text contains would otherwise
    take the highest weights and shrink every similarity towards zero.
    """
    if not contents:
        return []
    fitted = _fitted_tfidf(tuple(contents))
    return None if fitted is None else fitted.similarities(query, whole_query)


@dataclass(frozen=True)
class _Tfidf:
    """TF-IDF vectors of a few texts, as scikit-learn's TfidfVectorizer makes them by default:
    raw counts times the smoothed idf ln((1 + n) / (1 + df)) + 1, each vector L2-normalised.

    Written out rather than imported: scikit-learn (with SciPy) took ~1 s and ~60 MB to load on
    the first retrieve of every process, for a user's few hundred facts at most."""

    idf: dict[str, float]
    postings: dict[str, list[tuple[int, float]]]  # term -> (text, its normalised weight there)
    texts: int

    def similarities(self, query: str, whole_query: bool = False) -> list[float]:
        """Each text's cosine similarity to `query` (the query weighted with the texts' idf);
        `whole_query`: shrunk by the share of the query's weight that the texts' words hold."""
        counts = Counter(index_terms(query))
        asked = _unit_tfidf(counts, self.idf)
        similarities = [0.0] * self.texts
        for term in sorted(asked):
            for text, weight in self.postings[term]:
                similarities[text] += weight * asked[term]
        if whole_query and asked:
            rarest = math.log(1 + self.texts) + 1
            known = sum((n * self.idf[term]) ** 2 for term, n in counts.items() if term in self.idf)
            unknown = sum((n * rarest) ** 2 for term, n in counts.items() if term not in self.idf)
            share = math.sqrt(known / (known + unknown))
            similarities = [similarity * share for similarity in similarities]
        return similarities


def _unit_tfidf(counts: Counter[str], idf: dict[str, float]) -> dict[str, float]:
    """Term counts times their idf, L2-normalised; terms without an idf left out."""
    weights = {term: n * idf[term] for term, n in counts.items() if term in idf}
    norm = math.sqrt(sum(weight * weight for weight in weights.values()))
    return {term: weight / norm for term, weight in weights.items()}


@lru_cache(maxsize=64)
def _fitted_tfidf(contents: tuple[str, ...]) -> _Tfidf | None:
    """The texts' vectors, kept while the facts stay the same, so a query only weighs itself;
    None when not one of them holds a word."""
    counts = [Counter(index_terms(text)) for text in contents]
    frequency = Counter(term for text in counts for term in text)
    if not frequency:
        return None
    idf = {term: math.log((1 + len(contents)) / (1 + df)) + 1 for term, df in frequency.items()}
    postings: dict[str, list[tuple[int, float]]] = {}
    for number, text in enumerate(counts):
        for term, weight in _unit_tfidf(text, idf).items():
            postings.setdefault(term, []).append((number, weight))
    return _Tfidf(idf, postings, len(contents))
