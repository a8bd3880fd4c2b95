"""Vectors for exchanges and facts, so that recall finds them by meaning as well as by words.

Words stay primary. Vectors are computed in the background after an add, never on its path: of
the exchange, of what was said and of what was answered (SIDE_SHARE); stored per scope as int8
components with a per-page scale (no measurable loss in ranking); and fused with the word scores
at retrieval, compared with the query less part of the scope's mean vector (CENTRING). A page
without a vector yet is ranked by its words; a query whose vector cannot be had in time is ranked
by words alone, with a note. Each vector carries its model's id and layout: vectors of another
model or layout are never compared, and are computed anew.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from memory_mcp.models import Page
from memory_mcp.store import MemoryStore, PageVector, Scope
from memory_mcp.store.page_sequence import columns_of

# Vectors of a model like e5 share one large common direction: any page is quite similar to any
# query, and a page that resembles all the others ("Thanks, see you!") resembles every query. This
# share of the scope's mean exchange vector is taken off the query, so that a part p scores
# p·q - CENTRING·p·mean: what the query asks beyond what every page says. Measured on LoCoMo: see
# VectorTable.
CENTRING = 0.75
# A page is embedded three times: the whole exchange, what was said, and what was answered. A
# question usually asks after one side, which a vector of the whole exchange blurs with the other:
# the better side's similarity, SIDE_SHARE of it, joins the exchange's. The three are stored as
# one vector of PARTS times the model's dimensions: three times the storage (1,152 bytes a page
# at 384 dimensions) and about twice the embedding work. Measured on LoCoMo: see VectorTable.
PARTS = 3
SIDE_SHARE = 0.3
# What a page is about often shows in the exchange before or after it ("Which one?" - "The blue
# one"): a page's similarity, for ranking, takes NEIGHBOUR_SHARE of its more similar neighbour's in
# the same thread, as the word index lends each page half of its neighbours' words. Measured on
# LoCoMo: see VectorTable.
NEIGHBOUR_SHARE = 0.3
# Rows multiplied at a time: the int8 rows are converted block by block, in cache.
PRODUCT_BLOCK = 2048
# A fact found by meaning alone must stand out from the user's other facts by this many standard
# deviations of similarity to the query. Similarities cluster differently for every model (0.7-0.9
# for e5, 0.1-0.6 for others), their spread much less. Measured with the local model on fifteen
# facts: a query about one of them ("dog", "weather") put it at z 3.1-3.3; queries about none
# ("hello", "thanks", "what's up", "tell me something") put their best at 1.1-1.8.
FACT_MATCH_Z = 2.0
FACT_FULL_Z = 3.0  # a fact this far above the others counts as fully similar
# Fewer facts give no spread worth the name (of n values, none can be more than sqrt(n - 1)
# standard deviations above their mean): words alone.
MIN_FACTS_COMPARED = 8


def embedded_texts(page: Page) -> list[str]:
    """What a page's PARTS vectors are computed from: the exchange, what was said, what was
    answered (a side left empty stands in for by the other)."""
    exchange = f"{page.user_input}\n{page.agent_response}"
    said = page.user_input or exchange
    return [exchange, said, page.agent_response or said]


def fact_vector_id(content: str) -> str:
    """The id a fact's vector is stored under: from its words, which never change under a fact's
    id (new words make a new fact), so equal facts share one vector."""
    return "fact-" + hashlib.sha256(content.encode("utf-8")).hexdigest()[:24]


def fact_vector_model(model: str) -> str:
    """The model id facts' vectors are stored under: their own, so that no page id can ever be
    taken for a fact's (imported pages keep any id they came with)."""
    return f"{model}#fact"


def quantised(ids: Sequence[str], vectors: Sequence[Any], model: str) -> list[PageVector]:
    """Each vector as int8 components and the scale that brings them back (largest magnitude / 127)."""
    import numpy as np

    stored = []
    for vector_id, vector in zip(ids, vectors, strict=True):
        scale = max(float(np.abs(vector).max()), 1e-12) / 127.0
        stored.append(PageVector(vector_id, model, scale, np.rint(vector / scale).astype(np.int8).tobytes()))
    return stored


def fact_relevance(similarities: Any, has_vector: Any) -> Any:
    """How far each fact's similarity to the query stands out from the others', 0-1: 0 up to one
    standard deviation above their mean, 1 at FACT_FULL_Z; 0 for facts without a vector."""
    import numpy as np

    relevance = np.zeros(len(similarities))
    compared = similarities[has_vector]
    if len(compared) < MIN_FACTS_COMPARED or compared.std() <= 0:
        return relevance
    z = (similarities - compared.mean()) / compared.std()
    relevance[has_vector] = np.clip((z[has_vector] - 1.0) / (FACT_FULL_Z - 1.0), 0.0, 1.0)
    return relevance


FACT_MATCH_RELEVANCE = (FACT_MATCH_Z - 1.0) / (FACT_FULL_Z - 1.0)


class VectorTable:
    """A scope's page vectors of one model in memory, as int8 rows aligned with page positions
    (a row of zeros, scale 0, for a page without one), read on from where it stopped; and the sum
    of those vectors, for their mean.

    On the LoCoMo dev split (bench/locomo_recall.py; fused with words at lexical_weight 0.5, query
    length and word pairs as in retrieval.py), recall@5 / @10: one vector of the exchange 0.775 /
    0.839; centred (CENTRING 0.75) 0.777 / 0.845; with the sides (SIDE_SHARE 0.3) too 0.782 /
    0.850. Both chosen leaving one conversation out by recall@5 + recall@10: 0.75 and 0.3 in all
    five folds, 0.782 / 0.850 held out (by recall@10 alone SIDE_SHARE 0.5: 0.775 / 0.854); with the
    word pairs at their final, smaller weight, 0.781 / 0.849; with the better neighbour's similarity
    (NEIGHBOUR_SHARE 0.3, chosen from 0.15 / 0.3 / 0.5, the neighbours' mean or the better one, in
    all five folds) 0.788 / 0.854 held out. The
    cosine of centred vectors, taking off the top principal directions too, or the sides alone
    (their mean standing for the exchange) did no better; the date in the embedded text, or the
    query embedded as a passage, did worse.
    """

    def __init__(self, model: str) -> None:
        import numpy as np

        self.model = model
        self._fact_model = fact_vector_model(model)
        self._mark = 0
        self._position: dict[str, int] = {}
        self._rows = np.zeros((0, 0), dtype=np.int8)
        self._scales = np.zeros(0, dtype=np.float32)
        self._waiting: dict[str, PageVector] = {}  # read before its page was: placed once it is
        self._facts: dict[str, PageVector] = {}  # by fact_vector_id: one part each
        self._sum = np.zeros(0, dtype=np.float64)
        self._counted = 0
        # Each page's previous and next page in its thread (-1: none), and each thread's newest.
        self._previous = np.zeros(0, dtype=np.int32)
        self._next = np.zeros(0, dtype=np.int32)
        self._newest_in_thread: dict[str, int] = {}

    def catch_up(self, store: MemoryStore, scope: Scope, pages: Sequence[Page]) -> None:
        """Take in the pages and vectors stored since the last call (same page log generation)."""
        import numpy as np

        columns = columns_of(pages)
        if len(self._scales) < len(pages):
            grown = max(len(pages), 2 * len(self._scales))
            added = grown - len(self._scales)
            self._scales = np.concatenate([self._scales, np.zeros(added, dtype=np.float32)])
            self._rows = np.concatenate([self._rows, np.zeros((added, self._rows.shape[1]), np.int8)])
            self._previous = np.concatenate([self._previous, np.full(added, -1, dtype=np.int32)])
            self._next = np.concatenate([self._next, np.full(added, -1, dtype=np.int32)])
        start, stop = len(self._position), len(pages)
        self._position.update(zip(columns.ids[start:stop], range(start, stop)))
        previous, newest = [], self._newest_in_thread
        for position, thread in enumerate(columns.threads[start:stop], start):
            previous.append(newest.get(thread, -1))
            newest[thread] = position
        self._link(start, np.array(previous, dtype=np.int32))
        vectors, self._mark = store.read_vectors(scope, self._mark)
        for vector in vectors:
            if vector.model == self.model:
                self._waiting[vector.page_id] = vector
            elif vector.model == self._fact_model:
                self._facts[vector.page_id] = vector
        for page_id in [page_id for page_id in self._waiting if page_id in self._position]:
            vector = self._waiting.pop(page_id)
            components = np.frombuffer(vector.components, dtype=np.int8)
            if self._rows.shape[1] != len(components):
                if self._rows.shape[1]:
                    continue  # not this model's size: a damaged record, computed again later
                self._rows = np.zeros((len(self._scales), len(components)), dtype=np.int8)
                self._sum = np.zeros(len(components), dtype=np.float64)
            position = self._position[page_id]
            if self._scales[position] > 0:  # a vector computed again: the old one leaves the sum
                self._sum -= self._rows[position] * float(self._scales[position])
                self._counted -= 1
            self._rows[position] = components
            self._scales[position] = vector.scale
            self._sum += components * float(vector.scale)
            self._counted += 1

    def _link(self, start: int, previous: Any) -> None:
        """Record the previous page in its thread of each page from `start` on, and those pages as
        their previous pages' next: in whole arrays, not page by page (100,000 pages at a start)."""
        import numpy as np

        self._previous[start : start + len(previous)] = previous
        linked = np.flatnonzero(previous >= 0)
        self._next[previous[linked]] = start + linked

    def similarities(self, query_vector: Any, count: int) -> tuple[Any, Any]:
        """Similarity of the first `count` pages to the query (a unit vector): of each part, its
        cosine less CENTRING times its similarity to the mean exchange vector; of the page, its
        exchange's and SIDE_SHARE of its better side's. And which of them have a vector at all."""
        import numpy as np

        has = self._scales[:count] > 0
        dimensions = len(query_vector)
        if not self._rows.shape[1] or self._rows.shape[1] != PARTS * dimensions:
            return np.zeros(count, dtype=np.float32), np.zeros(count, dtype=bool)
        # p·q - c·p·mean = p·(q - c·mean): one product with the rows, as without centring.
        mean = self._sum[:dimensions] / max(self._counted, 1)
        centred = (query_vector - CENTRING * mean).astype(np.float32)
        parts = self._rows[:count].reshape(count * PARTS, dimensions)
        products = np.empty(len(parts), dtype=np.float32)
        for start in range(0, len(parts), PRODUCT_BLOCK):
            products[start : start + PRODUCT_BLOCK] = parts[start : start + PRODUCT_BLOCK] @ centred
        by_page = products.reshape(count, PARTS)
        page = (1 - SIDE_SHARE) * by_page[:, 0] + SIDE_SHARE * by_page[:, 1:].max(axis=1)
        return page * self._scales[:count], has

    def with_neighbours(self, similarities: Any, has_vector: Any) -> Any:
        """Each page's similarity (from `similarities`) plus NEIGHBOUR_SHARE of its more similar
        neighbour's in its thread, among those with a vector: for ranking only, as what is said
        around a page is no evidence of its own relevance."""
        import numpy as np

        count = len(similarities)
        best = np.full(count, -np.inf, dtype=np.float32)
        for neighbour in (self._previous[:count], self._next[:count]):
            present = (neighbour >= 0) & (neighbour < count)
            present[present] = has_vector[neighbour[present]]
            best[present] = np.maximum(best[present], similarities[neighbour[present]])
        return np.where(np.isfinite(best), similarities + NEIGHBOUR_SHARE * best, similarities)

    def fact_similarities(self, query_vector: Any, contents: Sequence[str]) -> tuple[Any, Any]:
        """Cosine similarity of each fact to the query, and which facts have a vector at all."""
        import numpy as np

        similarities = np.zeros(len(contents), dtype=np.float32)
        has = np.zeros(len(contents), dtype=bool)
        for number, content in enumerate(contents):
            vector = self._facts.get(fact_vector_id(content))
            if vector is not None and len(vector.components) == len(query_vector):
                components = np.frombuffer(vector.components, dtype=np.int8).astype(np.float32)
                similarities[number] = float(components @ query_vector) * vector.scale
                has[number] = True
        return similarities, has
