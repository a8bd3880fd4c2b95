"""Cursor's agent hooks as memory reads them: its event JSON, its `additional_context` answer at a
session's start, and the turn its afterAgentResponse finishes, paired with the prompt kept at
beforeSubmitPrompt.

Facts of Cursor's hooks (cursor.com/docs/agent/hooks; Cursor cannot run here, so these are the
documented shapes): every event's stdin has `conversation_id`, `generation_id`, `hook_event_name`,
`cursor_version` and `workspace_roots`; sessionStart answers with `additional_context`;
beforeSubmitPrompt carries `prompt` but may only allow or block it (no context); afterAgentResponse
carries the reply as `text`, without the prompt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ConfigDict, Field

from memory_mcp.base.model import Model
from memory_mcp.hosts.events import HookEvent, HostEvent, one_exchange
from memory_mcp.models import Page

# Cursor documents no cap on a hook's context: blocks are built to the 10,000 characters Claude
# Code keeps, so a session carries no more memory in one host than in another.
MAX_CONTEXT_CHARS = 10_000
# Cursor's names for its agent events, as `hook_event_name` gives them.
EVENTS = {"sessionStart", "beforeSubmitPrompt", "afterAgentResponse", "stop", "sessionEnd"}


class HookInput(Model):
    """What Cursor sends a command hook on stdin (the fields used here; others are ignored)."""

    model_config = ConfigDict(extra="ignore")

    conversation_id: str = ""
    session_id: str = ""  # sessionStart's own id for the conversation
    generation_id: str | None = None
    workspace_roots: list[str] = Field(default_factory=list)
    prompt: str | None = None  # beforeSubmitPrompt
    text: str | None = None  # afterAgentResponse: the agent's final text


class Cursor:
    """Cursor: the session's digest at its start; each prompt kept until afterAgentResponse stores
    it with its reply."""

    name = "cursor"
    max_context_chars = MAX_CONTEXT_CHARS
    injects: frozenset[HookEvent] = frozenset({"session-start"})
    keeps_prompts = True

    def recognises(self, payload: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
        return "cursor_version" in payload or payload.get("hook_event_name") in EVENTS

    def read(self, event: HookEvent, payload: Mapping[str, Any]) -> HostEvent:
        sent = HookInput.model_validate(payload)
        return HostEvent(
            # The conversation's id is in every event's common fields; a session's ledger and its
            # waiting prompt are keyed by it.
            session_id=sent.conversation_id or sent.session_id,
            cwd=sent.workspace_roots[0] if sent.workspace_roots else None,
            prompt=sent.prompt,
            reply=sent.text,
            turn_id=sent.generation_id,
        )

    def answer(self, event: HookEvent, context: str) -> str:
        return json.dumps({"additional_context": context}, ensure_ascii=False) if context else ""

    def exchanges(self, event: HostEvent) -> list[Page]:
        return one_exchange(self.name, event)
