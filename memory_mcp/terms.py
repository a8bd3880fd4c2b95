"""Turning text into index terms: words, CJK bigrams, minus function words, reduced to stems.

Measured on LoCoMo conversations, each step raises recall of the right exchange: dropping
function words keeps "what did she do" from matching every page, and stemming lets "hiking"
find "hiked".
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from typing import Any

# Chinese, Japanese kana, Korean: scripts written without spaces between words.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7a3"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_CJK_RUN = re.compile(rf"[{_CJK}]+")
_ASCII_TOKEN = re.compile(r"[a-z0-9]+")  # _TOKEN on case-folded ASCII text

# English function words: pronouns, auxiliaries, determiners, prepositions, conjunctions and
# the question words of "what/when/who did ..." queries. Content words are never listed.
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are aren as at be because been before being
    below between both but by can couldn d did didn do does doesn doing don down during each few for
    from further had hadn has hasn have haven having he her here hers herself him himself his how i if
    in into is isn it its itself just ll m ma me mightn more most mustn my myself needn no nor not now
    o of off on once only or other our ours ourselves out over own re s same shan she should shouldn
    so some such t than that the their theirs them themselves then there these they this those through
    to too under until up ve very was wasn we were weren what when where which while who whom why will
    with won wouldn y you your yours yourself yourselves
    """.split()
)


def tokenize(text: str) -> list[str]:
    """Lower-cased words; runs of CJK characters become overlapping character bigrams.

    Bigrams are how search engines index CJK text without a dictionary: a two-character word
    in the query matches the same two characters wherever they stand in a page.
    """
    folded = text.casefold()
    if folded.isascii():
        return _ASCII_TOKEN.findall(folded)  # the common case, with the quickest pattern
    if not _CJK_RUN.search(folded):
        return _TOKEN.findall(folded)  # no Python step per word either
    tokens: list[str] = []
    for match in _TOKEN.finditer(folded):
        run = match.group()
        if _CJK_RUN.fullmatch(run) and len(run) > 1:
            tokens.extend(run[i : i + 2] for i in range(len(run) - 1))
        else:
            tokens.append(run)
    return tokens


def index_terms(text: str) -> list[str]:
    """Index terms of `text`: tokens without English function words, stemmed."""
    return [_stem(token) for token in tokenize(text) if token not in STOPWORDS]


@lru_cache(maxsize=200_000)
def _stem(token: str) -> str:
    """Snowball English stem of a Latin-script word; other tokens (CJK, digits) pass unchanged.
    Memoised: a conversation repeats its words, and stemming costs tens of microseconds."""
    if not token.isascii() or not token.isalpha():
        return token
    return _english_stemmer().stemWord(token)


_per_thread = threading.local()


def _english_stemmer() -> Any:
    """This thread's stemmer: a Snowball stemmer keeps state while it works, so threads must not
    share one (retrievals run on several threads at once)."""
    stemmer = getattr(_per_thread, "stemmer", None)
    if stemmer is None:
        import snowballstemmer

        stemmer = _per_thread.stemmer = snowballstemmer.stemmer("english")
    return stemmer
