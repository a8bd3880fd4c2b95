"""Vectors computed behind the calls: soon after a change, or all that a memory lacks on demand."""

from __future__ import annotations

import functools
from collections.abc import Callable

from memory_mcp.base.errors import InvalidInput
from memory_mcp.recall.embedding_runner import EmbeddingRunner
from memory_mcp.service.scopes import require_stored, with_agents
from memory_mcp.store import MemoryStore, Scope


def vector_notifier(embedding: EmbeddingRunner | None) -> Callable[[Scope], None]:
    """What has a scope's missing vectors (its pages' and facts') computed in the background once
    it changed: nothing with embeddings off, or in a process too short-lived to compute them."""
    return _no_vectors if embedding is None else embedding.notify


def embed_all_missing(
    store: MemoryStore,
    embedding: EmbeddingRunner | None,
    scope: Scope,
    progress: Callable[[Scope, int, int], None] | None,
) -> int:
    """Compute now the vectors the scope's exchanges lack (for a user's own scope, their agents'
    too); return how many were stored. Stopped part-way, it resumes where it stopped."""
    if embedding is None:
        raise InvalidInput("embeddings are off: set embeddings.backend to 'local' or 'openai' in the config")
    require_stored(store, scope)
    stored = 0
    for each in with_agents(store, scope):
        told = None if progress is None else functools.partial(progress, each)
        stored += embedding.embed_scope(each, told)
    return stored


def _no_vectors(scope: Scope) -> None:
    """Embeddings off: no vector to compute."""
