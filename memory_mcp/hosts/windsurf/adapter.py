"""Windsurf's Cascade hooks as memory reads them: store-only, since Cascade's hooks cannot give the
model context (they answer by exit code alone); recall in Windsurf is through the MCP tools.

Facts of Cascade's hooks (docs.windsurf.com/windsurf/cascade/hooks; Windsurf cannot run here, so
these are the documented shapes): every event's stdin has `agent_action_name`, `trajectory_id`
(the conversation), `execution_id` (the turn) and `tool_info`; pre_user_prompt's `tool_info` has
`user_prompt`, post_cascade_response's has `response`, the turn's answer as markdown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ConfigDict, Field

from memory_mcp.base.model import Model
from memory_mcp.hosts.events import HookEvent, HostEvent, one_exchange
from memory_mcp.models import Page


class HookInput(Model):
    """What Cascade sends a command hook on stdin (the fields used here; others are ignored)."""

    model_config = ConfigDict(extra="ignore")

    agent_action_name: str = ""
    trajectory_id: str = ""
    execution_id: str | None = None
    tool_info: dict[str, Any] = Field(default_factory=dict)


def _text(info: Mapping[str, Any], key: str) -> str | None:
    value = info.get(key)
    return value if isinstance(value, str) else None


class Windsurf:
    """Windsurf: each prompt kept at pre_user_prompt until post_cascade_response stores it with
    Cascade's response."""

    name = "windsurf"
    max_context_chars = 0  # nothing a hook prints reaches the model
    injects: frozenset[HookEvent] = frozenset()
    keeps_prompts = True

    def recognises(self, payload: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
        return "agent_action_name" in payload and "trajectory_id" in payload

    def read(self, event: HookEvent, payload: Mapping[str, Any]) -> HostEvent:
        sent = HookInput.model_validate(payload)
        return HostEvent(
            session_id=sent.trajectory_id,
            prompt=_text(sent.tool_info, "user_prompt"),
            reply=_text(sent.tool_info, "response"),
            turn_id=sent.execution_id,
        )

    def answer(self, event: HookEvent, context: str) -> str:
        return ""

    def exchanges(self, event: HostEvent) -> list[Page]:
        return one_exchange(self.name, event)
