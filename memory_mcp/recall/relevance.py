"""What is worth a model's tokens: the floor an item must clear to be put before the model.

Ranking orders everything; a block for the model should carry only what answers the prompt. A
prompt with nothing to recall ("ok", "continue", "yes do it") gets nothing, and an exchange or
fact gets in only when it scores above a floor on a scale that does not depend on how many pages
there are or how the others scored (a fixed top-N would always fill up):

- an exchange's `words`: the share of the prompt's word weight its own words answer (BM25 of its
  own words, not those its thread's neighbours lend it for ranking, over
  LexicalIndex.query_weight: ~1 when it holds every term of the prompt once);
- its `meaning`, with vectors on: its similarity to the prompt by meaning;
- a fact's similarity to the prompt (TF-IDF cosine over the whole prompt, or its relevance by
  meaning).

The floors were chosen on LoCoMo's dev split, leaving one conversation out in turn
(bench/injection_floor.py): each question's evidence is what should clear them, and the same
questions asked of another conversation's memory, where nothing is relevant, show what should
not. Each maximises F-beta (beta 3: a missed memory costs nine needless lines), and every fold
chose the same: on the conversations left out, the exchange floor keeps 0.81 of the evidence the
top ten hold, shows 4.4 exchanges a question instead of 10, and leaves 92% of the other memory's
questions with nothing (without a floor: 6%); the fact floor keeps 0.44 of the evidence facts,
showing 2.8 facts a question instead of 251. With local vectors, the meaning floor beside the word
floor (every fold chose 0.20) keeps 0.86 of the evidence, 92% of the other memory's questions
still given nothing. Another project's exchange must clear a higher floor (OTHER_PROJECT_FACTOR
times), as it is only worth showing when clearly relevant.
"""

from __future__ import annotations

from memory_mcp.recall.terms import index_terms

# Index terms (stemmed, as index_terms gives them) of what people type to keep an agent going or
# to acknowledge it: a prompt made of these alone recalls nothing.
_FILLER_WORDS = """
    ok okay k yes yeah yep yup sure fine good great nice cool perfect thanks thank thx ty please
    continue go ahead proceed next keep going carry on try again retry do it that this works lgtm
    sounds right correct done agreed agree alright right exactly indeed hmm hm wait stop no nope
    let lets let's move now more same also too well so hi hello hey
""".split()
FILLER_TERMS = frozenset(term for word in _FILLER_WORDS for term in index_terms(word))

WORD_FLOOR = 0.35
MEANING_FLOOR = 0.20
FACT_FLOOR = 0.25
OTHER_PROJECT_FACTOR = 1.6


def worth_recalling(prompt: str) -> bool:
    """Whether the prompt says anything memory could answer: a term beyond acknowledgements."""
    return any(term not in FILLER_TERMS for term in index_terms(prompt))


def exchange_clears(words: float, meaning: float | None, other_project: bool = False) -> bool:
    """Whether an exchange found for a prompt is relevant enough to show."""
    factor = OTHER_PROJECT_FACTOR if other_project else 1.0
    if words >= WORD_FLOOR * factor:
        return True
    return meaning is not None and meaning >= MEANING_FLOOR * factor


def fact_clears(similarity: float, other_project: bool = False) -> bool:
    """Whether a fact is relevant enough to the prompt to show with it."""
    return similarity >= FACT_FLOOR * (OTHER_PROJECT_FACTOR if other_project else 1.0)
