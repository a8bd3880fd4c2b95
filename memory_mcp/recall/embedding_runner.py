"""The background work that gives every page and fact its vector: after adds pause, in batches,
retrying later when the embedder fails; never on an add's path."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from memory_mcp.base.errors import MemoryGone
from memory_mcp.models import Page
from memory_mcp.recall.embedders import Embedder, EmbeddingUnavailable, stored_model
from memory_mcp.recall.vectors import embedded_texts, fact_vector_id, fact_vector_model, quantised
from memory_mcp.store import MemoryStore, Scope

log = logging.getLogger(__name__)

BATCH_SIZE = 32
RETRY_AFTER_SECONDS = 60.0  # after an endpoint failed, before the background work tries again
# Vectors are computed once adds have paused this long: a burst of adds never shares the CPU
# with them (measured: add p50 1.7 times slower at 10k exchanges when each add woke the work).
QUIET_SECONDS = 1.0


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
