"""Word and vector scores of the same pages made one ranking: each scaled over the eligible pages,
then weighted by a share that leans on the vectors for a short query."""

from __future__ import annotations

from typing import Any

from memory_mcp.recall.terms import index_terms

# A query of few words ("What does Jon's dance make him?") leaves its words little to go on: the
# vectors weigh more there, and the words more in a longer one (see lexical_share). At the default
# lexical_weight 0.5 this is 0.4 up to SHORT_QUERY_TERMS index terms and 0.6 above: on LoCoMo with
# vectors, recall@5 / @10 0.770 / 0.843 without, 0.782 / 0.850 with (chosen with the vectors'
# CENTRING and SIDE_SHARE leaving one conversation out, by recall@10: 5 and 1.5 in all five folds).
SHORT_QUERY_TERMS = 5
QUERY_LENGTH_ODDS = 1.5


def lexical_share(lexical_weight: float, query: str) -> float:
    """The words' share in the fused score for this query: `lexical_weight` for the odds of words
    against vectors moved by QUERY_LENGTH_ODDS, towards the vectors for a query of few words and
    towards the words for a longer one (0 and 1 stay as they are)."""
    odds = QUERY_LENGTH_ODDS if len(index_terms(query)) > SHORT_QUERY_TERMS else 1 / QUERY_LENGTH_ODDS
    return lexical_weight * odds / (lexical_weight * odds + 1 - lexical_weight)


def fused(
    lexical: Any,
    similarities: Any,
    has_vector: Any,
    eligible: Any,
    lexical_weight: float,
    period: Any = None,
    period_lift: float = 0.0,
) -> Any:
    """Word and vector scores of the same pages, each scaled to 0-1 over the eligible pages (words
    by their best score, vectors min-max over the pages that have one), then weighted. A page
    without a vector keeps its word share alone: it is ranked, never dropped. Min-max linear
    fusion beat reciprocal rank fusion on the LoCoMo dev split (bench/locomo_recall.py), and
    min-max beat scaling from a quantile or from the mean, and raising to a power.

    A page of the `period` the query names (a mask like `eligible`) gains in its vector share
    what it gained among the word scores (`period_lift`, scaled as they are): the time named
    lifts it in the whole ranking, however little the words weigh, as it does without vectors."""
    import numpy as np

    best_words = lexical.max() if len(lexical) else 0.0
    words = lexical / best_words if best_words > 0 else np.zeros_like(lexical)
    vectors = np.zeros(len(lexical))
    scored = has_vector & eligible
    if scored.any():
        low, high = similarities[scored].min(), similarities[scored].max()
        vectors[scored] = (similarities[scored] - low) / (high - low) if high > low else 1.0
    if period is not None and period_lift > 0 and best_words > 0:
        vectors[scored & period] += period_lift / best_words
    return np.where(eligible, lexical_weight * words + (1 - lexical_weight) * vectors, 0.0)


def best_of(scores: Any, limit: int) -> list[tuple[int, float]]:
    """The `limit` best positive entries of a numpy array as (number, score), best first; ties go
    to the higher number (the more recent exchange)."""
    import numpy as np

    candidates = len(scores)
    top = min(limit, candidates)
    if top <= 0:
        return []
    # Keep every entry scoring at least the top-th best, so that ties at the cut are all seen by
    # the sort below.
    threshold = np.partition(scores, candidates - top)[candidates - top] if top < candidates else 0.0
    best = np.flatnonzero((scores >= threshold) & (scores > 0))
    ranked = sorted(((int(i), float(scores[i])) for i in best), key=lambda hit: (-hit[1], -hit[0]))
    return ranked[:top]
