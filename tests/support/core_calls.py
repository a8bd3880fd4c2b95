"""The core API called as the tools call it: requests built (and validated) from plain arguments."""

from __future__ import annotations

from typing import Any

from memory_mcp.models import AddMemoryRequest, AddMemoryResult, FlushRequest, FlushResult
from memory_mcp.service.memory_service import MemoryService


def add(service: MemoryService, user_input: str, agent_response: str = "ok", **fields: Any) -> AddMemoryResult:
    return service.add_memory(AddMemoryRequest.build(user_input=user_input, agent_response=agent_response, **fields))


def flush(service: MemoryService, **fields: Any) -> FlushResult:
    return service.flush_memory(FlushRequest.build(**fields))
