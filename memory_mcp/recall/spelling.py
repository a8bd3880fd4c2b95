"""Misspelt query words: read as the word the pages hold, for the word index and for the query's vector.

A query word no page holds, one letter (deleted, added, changed or swapped) from words pages do
hold, is a typo when the token encoding spells it with more than one token (words in common use
are one token each, typos are not: "buisiness" finds "business", "state" never finds "stage").
The word index reads it as the commonest of those terms; the query's vector is computed from
the query with the word respelled, so that a model that never saw the typo reads the word meant.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from memory_mcp.recall.terms import index_terms
from memory_mcp.recall.token_count import looks_misspelt

TYPO_MIN_LETTERS = 5  # a shorter term has too many neighbours one letter away to guess among
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def known_term(word: str, term: str, pages_holding: Callable[[str], int]) -> str:
    """The term a query `word` (indexed as `term`) is read as: itself, unless it is a typo of
    terms pages hold (`pages_holding(term)` > 0), then the one most pages hold."""
    if pages_holding(term) or len(term) < TYPO_MIN_LETTERS or not term.isalpha():
        return term
    near = [known for known in one_letter_away(term) if pages_holding(known)]
    if near and looks_misspelt(word):
        return max(near, key=pages_holding)
    return term


def respelled(query: str, typos: dict[str, str]) -> str:
    """`query` with each word of `typos` (a word as the index reads it, to the term it was read
    as) written as a word one letter from it that gives that term and is a word of its own,
    capitalised where the typo was; a typo with no such spelling stays as it was."""
    for word, term in typos.items():
        spelling = next((near for near in sorted(one_letter_away(word)) if _spells(near, term)), None)
        if spelling is not None:
            query = re.sub(rf"(?<!\w){re.escape(word)}(?!\w)", _written_as(spelling), query, flags=re.IGNORECASE)
    return query


def one_letter_away(word: str) -> set[str]:
    """Every word one deletion, insertion, substitution or swap of neighbours from `word`."""
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    deleted = {left + right[1:] for left, right in splits if right}
    swapped = {left + right[1] + right[0] + right[2:] for left, right in splits if len(right) > 1}
    replaced = {left + letter + right[1:] for left, right in splits if right for letter in _LETTERS}
    inserted = {left + letter + right for left, right in splits for letter in _LETTERS}
    return (deleted | swapped | replaced | inserted) - {word}


def _written_as(spelling: str) -> Callable[[re.Match[str]], str]:
    """What a typo is replaced with: `spelling`, capitalised where the typo was."""
    return lambda typo: spelling.capitalize() if typo[0][0].isupper() else spelling


def _spells(word: str, term: str) -> bool:
    return index_terms(word) == [term] and not looks_misspelt(word)
