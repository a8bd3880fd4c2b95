"""Turning text into index terms: words, CJK bigrams and emoji, minus function words, reduced
to stems.

Measured on LoCoMo conversations, each step raises recall of the right exchange: dropping
function words keeps "what did she do" from matching every page, and stemming lets "hiking"
find "hiked". Accents on Latin letters are folded away, as people often leave them out when
they type ("Zurich creme brulee" finds "Zürich crème brûlée"). Neighbouring terms within a clause
make the word pairs that recall looks for in the best pages (bm25.LexicalIndex.with_phrases).
"""

from __future__ import annotations

import re
import threading
import unicodedata
from functools import lru_cache
from itertools import pairwise
from typing import Any

# Chinese, Japanese kana, Korean: scripts written without spaces between words.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7a3"
# Pictographs, dingbats, arrows and the like: each one a term of its own ("🎸" finds the guitar).
_EMOJI = "\u2190-\u21ff\u2300-\u23ff\u2600-\u27bf\u2b00-\u2bff\U0001f000-\U0001f3fa\U0001f400-\U0001faff"
_TOKEN = re.compile(rf"[{_CJK}]+|[{_EMOJI}]|[^\W_{_CJK}]+")
_CJK_RUN = re.compile(rf"[{_CJK}]+")
_ASCII_TOKEN = re.compile(r"[a-z0-9]+")  # _TOKEN on case-folded ASCII text
# Accents on Latin letters once decomposed (NFKD): dropped. Other scripts keep their marks.
_LATIN_ACCENTS = re.compile(r"(?<=[a-z\u00c0-\u024f])[\u0300-\u036f]+")
# Latin letters that carry their stroke or ligature in the letter itself, so NFKD leaves them be.
_LATIN_LETTERS = str.maketrans({"ø": "o", "đ": "d", "ħ": "h", "ł": "l", "ŧ": "t", "æ": "ae", "œ": "oe", "ı": "i"})
# A longer run of letters is no word anyone searches for (a hash, a base64 blob): it is indexed by
# its beginning, which bounds the cost of stemming it.
MAX_TERM_CHARS = 40

# English function words: pronouns, auxiliaries (modal ones too: "would she likely ..." asks
# about her, not about likelihood), determiners, prepositions, conjunctions and the question
# words of "what/when/who did ..." queries. Content words are never listed.
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are aren as at be because been before being
    below between both but by can couldn d did didn do does doesn doing don down during each few for
    from further had hadn has hasn have haven having he her here hers herself him himself his how i if
    in into is isn it its itself just ll m ma me mightn more most mustn my myself needn no nor not now
    o of off on once only or other our ours ourselves out over own re s same shan she should shouldn
    so some such t than that the their theirs them themselves then there these they this those through
    to too under until up ve very was wasn we were weren what when where which while who whom why will
    with won would wouldn could might likely y you your yours yourself yourselves
    """.split()
)


# Where a phrase ends: clause and sentence punctuation, Latin and CJK, and line breaks.
_CLAUSE_BREAK = re.compile(r"[.!?,;:()\[\]{}\"“”«»…\n\u3001\u3002\uff01\uff0c\uff1a\uff1b\uff1f]+")


def tokenize(text: str) -> list[str]:
    """Lower-cased words; runs of CJK characters become overlapping character bigrams.

    Bigrams are how search engines index CJK text without a dictionary: a two-character word
    in the query matches the same two characters wherever they stand in a page.
    """
    folded = text.casefold()
    if folded.isascii():
        return _ASCII_TOKEN.findall(folded)  # the common case, with the quickest pattern
    folded = fold_accents(folded)
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


def fold_accents(text: str) -> str:
    """Case-folded text with accents taken off Latin letters ("crème" -> "creme"); other scripts,
    Hangul and kana included, come back as they were (NFC)."""
    decomposed = unicodedata.normalize("NFKD", text.translate(_LATIN_LETTERS))
    return unicodedata.normalize("NFC", _LATIN_ACCENTS.sub("", decomposed))


def index_terms(text: str) -> list[str]:
    """Index terms of `text`: tokens without English function words, stemmed."""
    return [_stem(token[:MAX_TERM_CHARS]) for token in tokenize(text) if token not in STOPWORDS]


def worded_terms(text: str) -> list[tuple[str, str]]:
    """`index_terms`, each with the word it was made from: a query's words are checked as words."""
    return [(token, _stem(token[:MAX_TERM_CHARS])) for token in tokenize(text) if token not in STOPWORDS]


def phrase_pairs(text: str) -> list[tuple[str, str]]:
    """Index terms standing next to each other within a clause, function words aside ("coconut
    milk", "milk ice"): words of scripts written with spaces only, since CJK terms are character
    pairs already and an emoji is no phrase."""
    pairs: list[tuple[str, str]] = []
    for clause in _CLAUSE_BREAK.split(text):
        terms = index_terms(clause)
        pairs.extend((a, b) for a, b in pairwise(terms) if _spaced_word(a) and _spaced_word(b))
    return pairs


def _spaced_word(term: str) -> bool:
    return term.isalnum() and not _CJK_RUN.search(term)


@lru_cache(maxsize=200_000)
def _stem(token: str) -> str:
    """Snowball English stem of a Latin-script word; other tokens (CJK, digits) pass unchanged.
    Memoised: a conversation repeats its words, and stemming costs tens of microseconds."""
    if not token.isascii() or not token.isalpha():
        return token
    stem: str = _english_stemmer().stemWord(token)
    return stem


_per_thread = threading.local()


def _english_stemmer() -> Any:
    """This thread's stemmer: a Snowball stemmer keeps state while it works, so threads must not
    share one (retrievals run on several threads at once)."""
    stemmer = getattr(_per_thread, "stemmer", None)
    if stemmer is None:
        import snowballstemmer

        stemmer = _per_thread.stemmer = snowballstemmer.stemmer("english")
    return stemmer
