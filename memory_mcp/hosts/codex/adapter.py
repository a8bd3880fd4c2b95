"""Codex CLI's hooks as memory reads them: its event JSON, its `hookSpecificOutput` answer, and
the turn a Stop finishes, stored as one exchange.

Codex's Stop carries the turn's reply (`last_assistant_message`) and its `turn_id`, but not the
prompt. The prompt is read from the session's rollout file (`transcript_path`), where Codex has
written the turn's user message before its Stop hooks run: no state kept between hooks.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ConfigDict

from memory_mcp.base.json_lines import json_lines
from memory_mcp.base.model import Model
from memory_mcp.hosts.events import CONTEXT_EVENTS, HookEvent, HostEvent, additional_context, one_exchange
from memory_mcp.models import Page

# Codex keeps 2,500 approximate tokens of a hook's context inline and cuts the rest to a head and
# tail preview; it counts a token per 4 bytes of UTF-8, so the cap is ~10,000 bytes. 9,000
# characters leave 1,000 bytes for the multi-byte characters a block holds (its "·" and "…"
# labels, accented words) before an English-language block would be cut.
MAX_HOOK_OUTPUT_CHARS = 9_000
EVENT_NAMES: dict[HookEvent, str] = {"session-start": "SessionStart", "prompt": "UserPromptSubmit", "stop": "Stop"}
ROLLOUT_PREFIX = "rollout-"  # $CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<session id>.jsonl


class HookInput(Model):
    """What Codex sends a command hook on stdin (the fields used here; others are ignored)."""

    model_config = ConfigDict(extra="ignore")

    session_id: str = ""
    turn_id: str | None = None  # UserPromptSubmit and Stop
    transcript_path: str | None = None
    cwd: str | None = None
    prompt: str | None = None
    source: str | None = None  # SessionStart: startup, resume, clear, compact or fork
    stop_hook_active: bool = False
    last_assistant_message: str | None = None


class Codex:
    """Codex CLI: context as `hookSpecificOutput.additionalContext`; a Stop stores its turn."""

    name = "codex"
    max_context_chars = MAX_HOOK_OUTPUT_CHARS
    injects = CONTEXT_EVENTS
    keeps_prompts = False

    def recognises(self, payload: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
        """A `turn_id` (Codex's prompt and stop events; Claude Code sends none), or a transcript
        that is a Codex rollout file (Codex's session start; Claude Code's are <session>.jsonl)."""
        if "turn_id" in payload:
            return True
        transcript = payload.get("transcript_path")
        return isinstance(transcript, str) and Path(transcript).name.startswith(ROLLOUT_PREFIX)

    def read(self, event: HookEvent, payload: Mapping[str, Any]) -> HostEvent:
        sent = HookInput.model_validate(payload)
        prompt = sent.prompt
        if event == "stop" and prompt is None and sent.transcript_path and sent.turn_id:
            prompt = turn_prompt(Path(sent.transcript_path), sent.turn_id)
        return HostEvent(
            session_id=sent.session_id,
            cwd=sent.cwd,
            prompt=prompt,
            reply=sent.last_assistant_message,
            transcript_path=sent.transcript_path,
            source=sent.source,
            stop_hook_active=sent.stop_hook_active,
            turn_id=sent.turn_id,
        )

    def answer(self, event: HookEvent, context: str) -> str:
        return additional_context(EVENT_NAMES[event], context)

    def exchanges(self, event: HostEvent) -> list[Page]:
        """The turn the Stop finishes: its id is Codex's turn id, so a Stop run again (or a
        second Stop hook) stores nothing new."""
        return one_exchange(self.name, event)


def turn_prompt(rollout: Path, turn_id: str) -> str | None:
    """What the person typed in turn `turn_id`: its user message as the rollout file records it
    (an `item_completed` event of a `UserMessage`), or None when the file holds none."""
    try:
        records = list(json_lines(rollout))
    except OSError:
        return None  # no rollout to read: the turn is not stored rather than stored without its prompt
    for record in records:
        payload = record.get("payload")
        if record.get("type") != "event_msg" or not isinstance(payload, dict):
            continue
        item = payload.get("item")
        if payload.get("type") == "item_completed" and payload.get("turn_id") == turn_id and isinstance(item, dict):
            if item.get("type") == "UserMessage" and isinstance(item.get("content"), list):
                parts = [part.get("text") for part in item["content"] if isinstance(part, dict)]
                text = "\n".join(part for part in parts if isinstance(part, str))
                return text or None
    return None
