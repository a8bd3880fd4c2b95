"""Building blocks of the updater tests: scripted LLM replies, and services that flush on demand."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memory_mcp.service.memory_service import MemoryService

# Flush-driven tests: a debounce that never fires, few and quick attempts, no wait at close.
TEST_MEMORY = {"debounce_seconds": 60, "llm_timeout_seconds": 5, "llm_max_attempts": 2, "shutdown_flush_seconds": 0}


def fact(content: str, category: str = "context", confidence: float = 0.9, **extra: Any) -> dict[str, Any]:
    return {"content": content, "category": category, "confidence": confidence, **extra}


def update(
    facts: list[Any] | None = None,
    remove: list[str] | None = None,
    user: dict[str, Any] | None = None,
    history: dict[str, Any] | None = None,
    knowledge: list[Any] | None = None,
) -> dict[str, Any]:
    """An update in the shape the prompt asks for."""
    return {
        "user": user or {},
        "history": history or {},
        "newFacts": facts or [],
        "factsToRemove": remove or [],
        "assistantKnowledge": knowledge or [],
    }


def section(summary: str, should_update: bool = True) -> dict[str, Any]:
    return {"summary": summary, "shouldUpdate": should_update}


ServiceFactory = Callable[..., MemoryService]
