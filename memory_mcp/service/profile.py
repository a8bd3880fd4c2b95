"""A user's structured memory as get_user_profile returns it."""

from __future__ import annotations

from memory_mcp.base.settings import Settings
from memory_mcp.memory.facts import current
from memory_mcp.models import ProfileRequest, UserProfileResult
from memory_mcp.service.notes import profile_notes
from memory_mcp.store import MemoryStore, Scope


def user_profile(settings: Settings, store: MemoryStore, scope: Scope, request: ProfileRequest) -> UserProfileResult:
    """Profile sections, and the facts that hold (most confident first) or knowledge when asked."""
    document = store.read_document(scope)
    holding = current(document.facts)
    facts = sorted(holding, key=lambda fact: -fact.confidence) if request.include_knowledge else None
    knowledge = list(document.assistantKnowledge) if request.include_assistant_knowledge else None
    return UserProfileResult(
        user_id=scope.user_id,
        agent_name=scope.agent_name,
        user=document.user,
        history=document.history,
        facts=facts,
        assistant_knowledge=knowledge,
        lastUpdated=document.lastUpdated,
        notes=profile_notes(settings, document),
    )
