"""GitHub Copilot CLI's hooks as memory reads them: its event JSON (in either of the two shapes
it sends), its top-level `additionalContext` answer at a session's start, and the session's
exchanges read from its log at agentStop.

Facts of Copilot CLI 1.0.102 this rests on (captured from it): hooks run with COPILOT_CLI=1 and
COPILOT_HOOK_DIR in their environment. Hooks named in camelCase (sessionStart, agentStop) get camelCase fields
(`sessionId`, `transcriptPath`); hooks named as VS Code names them (SessionStart, Stop) get
snake_case ones (`session_id`, `transcript_path`). A sessionStart's context is read only from a
top-level `additionalContext` (not from `hookSpecificOutput`). agentStop carries no reply: the
session's log (`events.jsonl`) has it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, ConfigDict, Field

from memory_mcp.base.model import Model
from memory_mcp.hosts.copilot.session_log import logged_exchanges
from memory_mcp.hosts.events import HookEvent, HostEvent
from memory_mcp.models import Page

# Copilot CLI documents no cap on a hook's context: blocks are built to the 10,000 characters
# Claude Code keeps, so a session carries no more memory in one host than in another.
MAX_CONTEXT_CHARS = 10_000


def either(name: str, camel: str) -> Any:
    """A field sent as `name` by one shape of the payload and as `camel` by the other."""
    return Field(default=None, validation_alias=AliasChoices(name, camel))


class HookInput(Model):
    """What Copilot CLI (or VS Code) sends a command hook on stdin, in either shape (the fields
    used here; others are ignored)."""

    model_config = ConfigDict(extra="ignore")

    session_id: str | None = either("session_id", "sessionId")
    transcript_path: str | None = either("transcript_path", "transcriptPath")
    cwd: str | None = None
    source: str | None = None  # session start: new, resume or startup
    stop_hook_active: bool = False
    timestamp: str | int | float | None = None


def read_event(payload: Mapping[str, Any]) -> HostEvent:
    sent = HookInput.model_validate(payload)
    return HostEvent(
        session_id=sent.session_id or "",
        cwd=sent.cwd,
        transcript_path=sent.transcript_path,
        # "new" is Copilot's "startup": a session that holds nothing given before.
        source="startup" if sent.source == "new" else sent.source,
        stop_hook_active=sent.stop_hook_active,
        stamp=None if sent.timestamp is None else str(sent.timestamp),
    )


def log_exchanges(host: str, event: HostEvent) -> list[Page]:
    """The session's exchanges from its log; none without one. When another hook turned this stop
    into a continuation, the newest reply is not final yet: a later stop stores that turn."""
    if not event.transcript_path:
        return []
    pages = logged_exchanges(Path(event.transcript_path), host, event.session_id)
    return pages[:-1] if event.stop_hook_active else pages


class Copilot:
    """Copilot CLI: the session's digest at its start; at agentStop, every exchange of its log not
    stored yet."""

    name = "copilot"
    max_context_chars = MAX_CONTEXT_CHARS
    injects: frozenset[HookEvent] = frozenset({"session-start"})
    keeps_prompts = False

    def recognises(self, payload: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
        """Copilot sets both in its hooks' environment; COPILOT_CLI alone is inherited by whatever
        its shell commands start (another host's hooks among them)."""
        return environ.get("COPILOT_CLI") == "1" and "COPILOT_HOOK_DIR" in environ

    def read(self, event: HookEvent, payload: Mapping[str, Any]) -> HostEvent:
        return read_event(payload)

    def answer(self, event: HookEvent, context: str) -> str:
        return json.dumps({"additionalContext": context}, ensure_ascii=False) if context else ""

    def exchanges(self, event: HostEvent) -> list[Page]:
        return log_exchanges(self.name, event)
