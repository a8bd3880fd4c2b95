"""Cline's hooks as memory reads them: its event JSON, its `contextModification` answer to
UserPromptSubmit, and the task TaskComplete finishes, paired with the prompt UserPromptSubmit kept.

Facts of Cline's hooks (its hooks documentation and source; Cline cannot run here, so these are
the documented shapes): a hook is an executable named after its event; stdin has `clineVersion`,
`hookName`, `taskId`, `timestamp`, `workspaceRoots` and one key for the event (`userPromptSubmit`
with `prompt`; `taskComplete` with `taskMetadata.result`, the task's final answer, and
`initialTask`); stdout is `{"cancel": bool, "contextModification": str, "errorMessage": str}`.
Cline 3 gives the model a UserPromptSubmit's contextModification; Cline 4 uses it for tool hooks
only, so in Cline 4 recall is through the MCP tools and these hooks only store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ConfigDict, Field

from memory_mcp.base.model import Model
from memory_mcp.hosts.events import HookEvent, HostEvent, one_exchange
from memory_mcp.models import Page

# Cline cuts a contextModification at 50 KB; blocks are built to the 10,000 characters Claude Code
# keeps, so a prompt carries no more memory in one host than in another.
MAX_CONTEXT_CHARS = 10_000


class TaskMetadata(Model):
    model_config = ConfigDict(extra="ignore")

    result: str | None = None
    initialTask: str | None = None  # noqa: N815 (Cline's name)


class HookInput(Model):
    """What Cline sends a hook on stdin (the fields used here; others are ignored)."""

    model_config = ConfigDict(extra="ignore")

    taskId: str = ""  # noqa: N815 (Cline's names)
    timestamp: str | None = None
    workspaceRoots: list[str] = Field(default_factory=list)  # noqa: N815
    userPromptSubmit: dict[str, Any] = Field(default_factory=dict)  # noqa: N815
    taskComplete: dict[str, Any] = Field(default_factory=dict)  # noqa: N815


class Cline:
    """Cline: what is relevant to each prompt as its contextModification; the prompt kept until
    TaskComplete stores it with the task's result."""

    name = "cline"
    max_context_chars = MAX_CONTEXT_CHARS
    injects: frozenset[HookEvent] = frozenset({"prompt"})
    keeps_prompts = True

    def recognises(self, payload: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
        return "clineVersion" in payload or "hookName" in payload

    def read(self, event: HookEvent, payload: Mapping[str, Any]) -> HostEvent:
        sent = HookInput.model_validate(payload)
        prompt = sent.userPromptSubmit.get("prompt")
        metadata = TaskMetadata.model_validate(sent.taskComplete.get("taskMetadata") or {})
        return HostEvent(
            session_id=sent.taskId,
            cwd=sent.workspaceRoots[0] if sent.workspaceRoots else None,
            # The task's first prompt stands in when no prompt was kept (hooks enabled mid-task).
            prompt=prompt if isinstance(prompt, str) else metadata.initialTask or None,
            reply=metadata.result or None,
            # One payload per event, shared by the global and the workspace hook: stored once.
            turn_id=sent.timestamp,
        )

    def answer(self, event: HookEvent, context: str) -> str:
        """Cline reads every hook's stdout as its JSON answer: one is always given."""
        return json.dumps({"cancel": False, "contextModification": context, "errorMessage": ""}, ensure_ascii=False)

    def exchanges(self, event: HostEvent) -> list[Page]:
        return one_exchange(self.name, event)
