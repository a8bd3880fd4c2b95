"""Exchanges from a GitHub Copilot session log (`events.jsonl`), for the stop hook to remember.

Copilot CLI (and VS Code, whose agent runs the same way) writes each session as JSON lines of
events: `user.message` (what the person typed, `data.content`, with its `messageId`) and
`assistant.message` (the agent's messages: those between tool calls, and the final answer). An
exchange here is one prompt and the agent's last message with text before the next prompt. The
format is the host's internal one: reading is forgiving, unknown events are skipped.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from memory_mcp.base.clock import normalise_timestamp, utc_now
from memory_mcp.base.json_lines import json_lines
from memory_mcp.models import Page


@dataclass
class _Turn:
    prompt: str
    message_id: str
    timestamp: str
    reply: str = ""


def logged_exchanges(path: Path, host: str, session_id: str) -> list[Page]:
    """The log's exchanges that have a reply, as pages whose ids come from the host, the session
    and the prompt's own message id: reading the log again yields the same pages."""
    turns: list[_Turn] = []
    for event in json_lines(path):
        data = event.get("data")
        if not isinstance(data, dict):
            continue
        content = data.get("content")
        if event.get("type") == "user.message" and isinstance(content, str) and content.strip():
            message_id = str(data.get("messageId") or len(turns))
            turns.append(_Turn(content.strip(), message_id, _when(event.get("timestamp"))))
        elif event.get("type") == "assistant.message" and turns and isinstance(content, str) and content.strip():
            turns[-1].reply = content.strip()  # the latest text: what came before was said on the way
    return [
        Page(
            page_id=_page_id(host, session_id, turn.message_id),
            user_input=turn.prompt,
            agent_response=turn.reply,
            timestamp=turn.timestamp,
            thread_id=session_id or None,
        )
        for turn in turns
        if turn.reply
    ]


def _when(stamp: object) -> str:
    try:
        return normalise_timestamp(str(stamp)) if stamp else utc_now()
    except ValueError:
        return utc_now()


def _page_id(host: str, session_id: str, message_id: str) -> str:
    digest = hashlib.sha256(f"{host}\0{session_id}\0{message_id}".encode()).hexdigest()
    return f"page_{digest[:16]}"
