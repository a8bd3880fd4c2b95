"""Whose memory a call means, and whether anything is stored for it."""

from __future__ import annotations

from memory_mcp.base.errors import NotFound
from memory_mcp.base.settings import Settings
from memory_mcp.store import MemoryStore, Scope


def resolve_scope(settings: Settings, user_id: str | None, agent_name: str | None) -> Scope:
    """Whose memory a call means: an id left out (or empty) is the configured default."""
    return Scope(user_id or settings.user_id, agent_name or settings.assistant_id)


def is_stored(store: MemoryStore, scope: Scope) -> bool:
    """Whether anything is stored for the scope (a user, or that agent of theirs)."""
    if scope.user_id not in store.list_users():
        return False
    return scope.agent_name is None or scope.agent_name in store.list_agents(scope.user_id)


def require_stored(store: MemoryStore, scope: Scope) -> None:
    """NotFound unless something is stored for the scope: a call about nobody creates nothing."""
    if not is_stored(store, scope):
        raise NotFound(f"nothing is stored for {scope.describe()}; memory_status lists the users")


def with_agents(store: MemoryStore, scope: Scope) -> list[Scope]:
    """The scope, and for a user's own scope every agent of theirs too."""
    agents = store.list_agents(scope.user_id) if scope.agent_name is None else []
    return [scope, *(Scope(scope.user_id, agent) for agent in agents)]
