"""Claude Code's hooks as memory reads them: its event JSON, its `hookSpecificOutput` answer, and
a session's exchanges read from its transcript."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ConfigDict

from memory_mcp.base.model import Model
from memory_mcp.hosts.events import CONTEXT_EVENTS, HookEvent, HostEvent, additional_context
from memory_mcp.models import Page
from memory_mcp.portability.claude_code_transcript import session_exchanges

# Claude Code keeps at most this many characters of a hook's context inline (more becomes a file
# reference the model never reads): every block is built to fit it.
MAX_HOOK_OUTPUT_CHARS = 10_000
EVENT_NAMES: dict[HookEvent, str] = {"session-start": "SessionStart", "prompt": "UserPromptSubmit", "stop": "Stop"}


class HookInput(Model):
    """What Claude Code sends a command hook on stdin (the fields used here; others are ignored)."""

    model_config = ConfigDict(extra="ignore")

    session_id: str = ""
    transcript_path: str | None = None
    cwd: str | None = None
    hook_event_name: str | None = None
    prompt: str | None = None
    source: str | None = None  # SessionStart: startup, resume, clear or compact
    stop_hook_active: bool = False
    last_assistant_message: str | None = None


class ClaudeCode:
    """Claude Code: context as `hookSpecificOutput.additionalContext`; a Stop stores every turn
    of the session's transcript not stored yet."""

    name = "claude-code"
    max_context_chars = MAX_HOOK_OUTPUT_CHARS
    injects = CONTEXT_EVENTS
    keeps_prompts = False

    def recognises(self, payload: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
        return True  # the host hooks were first written for: what is not another host is this one

    def read(self, event: HookEvent, payload: Mapping[str, Any]) -> HostEvent:
        sent = HookInput.model_validate(payload)
        return HostEvent(
            session_id=sent.session_id,
            cwd=sent.cwd,
            prompt=sent.prompt,
            reply=sent.last_assistant_message,
            transcript_path=sent.transcript_path,
            source=sent.source,
            stop_hook_active=sent.stop_hook_active,
        )

    def answer(self, event: HookEvent, context: str) -> str:
        return additional_context(EVENT_NAMES[event], context)

    def exchanges(self, event: HostEvent) -> list[Page]:
        """The session's finished turns. A stored exchange is never rewritten, so the newest turn
        waits until its final reply is certain: the hook's `last_assistant_message`, on a Stop no
        other hook turned into a continuation (`stop_hook_active`); until then a later Stop
        stores it, and every earlier turn is finished."""
        if not event.transcript_path or not event.session_id:
            return []
        final = None if event.stop_hook_active else event.reply
        return session_exchanges(Path(event.transcript_path), event.session_id, final)
