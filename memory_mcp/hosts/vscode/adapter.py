"""VS Code's agent hooks as memory reads them: its event JSON, its `hookSpecificOutput` answer at a
session's start, and the session's exchanges read from its transcript at Stop.

Facts of VS Code's agent hooks (code.visualstudio.com, agent hooks reference; VS Code cannot run
here, so these are the documented shapes): stdin has `hookEventName`, `sessionId`, `cwd`,
`timestamp` and `transcript_path`; SessionStart may answer with
`hookSpecificOutput.additionalContext`; UserPromptSubmit answers with the common fields only (no
context); Stop has `stop_hook_active` but no reply. The transcript's format is not a stable API:
it is read as the Copilot session log VS Code's agent writes, or else as a Claude Code transcript.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memory_mcp.hosts.copilot.adapter import Copilot, log_exchanges
from memory_mcp.hosts.events import HookEvent, HostEvent, additional_context
from memory_mcp.models import Page
from memory_mcp.portability.claude_code_transcript import session_exchanges

EVENT_NAMES: dict[HookEvent, str] = {"session-start": "SessionStart", "prompt": "UserPromptSubmit", "stop": "Stop"}


class VSCode(Copilot):
    """VS Code: the session's digest at its start; at Stop, the exchanges of its transcript not
    stored yet. Its agent is Copilot's: the payload is read, and the log kept, the same way."""

    name = "vscode"

    def recognises(self, payload: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
        return "hookEventName" in payload  # VS Code's camelCase; the other hosts say hook_event_name

    def answer(self, event: HookEvent, context: str) -> str:
        return additional_context(EVENT_NAMES[event], context)

    def exchanges(self, event: HostEvent) -> list[Page]:
        pages = log_exchanges(self.name, event)
        if pages or not event.transcript_path or not event.session_id:
            return pages
        # Not a Copilot log: read as a Claude Code transcript; the newest turn waits for the next Stop.
        return session_exchanges(Path(event.transcript_path), event.session_id)
