"""The export document: everything stored for a user, as one JSON document.

What export_memory returns is exactly what import_memory accepts.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import ConfigDict, Field, field_validator

from memory_mcp.base.ids import validate_identifier
from memory_mcp.base.model import Model
from memory_mcp.models.stored import MemoryDocument, Page

EXPORT_FORMAT: Final = "memory-mcp/export"
EXPORT_VERSION: Final = 1


class ScopeExport(Model):
    """The memory of one agent of the exported user."""

    model_config = ConfigDict(extra="forbid")

    memory: MemoryDocument
    pages: list[Page]


class ExportDocument(Model):
    """Everything stored for a user (or one agent of a user), as one JSON document.

    What export_memory returns is exactly what import_memory accepts.
    """

    model_config = ConfigDict(extra="forbid")

    format: Literal["memory-mcp/export"] = EXPORT_FORMAT
    version: Literal[1] = EXPORT_VERSION
    exported_at: str
    user_id: str
    agent_name: str | None = None
    memory: MemoryDocument
    pages: list[Page]
    agents: dict[str, ScopeExport] = Field(
        default_factory=dict, description="With a whole user's export: each of their agents' memory."
    )

    @field_validator("user_id")
    @classmethod
    def _check_user(cls, value: str) -> str:
        return validate_identifier("user_id", value)

    @field_validator("agent_name")
    @classmethod
    def _check_agent(cls, value: str | None) -> str | None:
        return None if value is None else validate_identifier("agent_name", value)

    @field_validator("agents")
    @classmethod
    def _check_agents(cls, value: dict[str, ScopeExport]) -> dict[str, ScopeExport]:
        for name in value:
            validate_identifier("agents key", name)
        return value
