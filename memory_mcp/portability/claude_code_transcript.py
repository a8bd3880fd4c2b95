"""Exchanges from a Claude Code session transcript, for the Stop hook to remember.

Claude Code writes each session as JSON lines (`transcript_path` in every hook's input). A line
of type "user" is either something the person typed or the result of a tool the assistant ran;
lines of type "assistant" carry text, thinking and tool calls. An exchange here is one prompt the
person typed and the assistant's final text in reply: tool chatter, thinking, sub-agents
(sidechains), meta lines and the harness's own command output are left out.

The format is Claude Code's internal one and has changed over time, so reading is forgiving:
unknown line types and unreadable lines are skipped, never fatal.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory_mcp.base.clock import normalise_timestamp, utc_now
from memory_mcp.base.json_lines import json_lines
from memory_mcp.models import Page

# Text Claude Code itself puts in "user" lines: slash commands, their output, shell escapes, notices.
HARNESS_MARKERS = (
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
    "Caveat: The messages below were generated",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "<task-notification>",
    "<user-memory-input>",
    "[Request interrupted by user",
    "This session is being continued from a previous conversation",
)
# Context the IDE or the harness wraps around a prompt: not what the person said.
WRAPPED_CONTEXT = re.compile(r"<(system-reminder|ide_opened_file|ide_selection)>.*?</\1>", re.DOTALL)


@dataclass
class _Turn:
    """A prompt and what the assistant has answered to it so far."""

    page_id: str
    prompt: str
    timestamp: str
    reply_parts: list[str]
    reply_message: str | None = None  # the assistant message the reply parts belong to


def session_exchanges(
    path: Path, session_id: str, final_reply: str | None = None, *, complete: bool = False
) -> list[Page]:
    """The session's finished exchanges in order, as pages whose ids come from the prompts' own
    lines, so that reading the transcript again (or a resumed copy of it) yields the same pages.

    Every turn but the newest is finished. The newest is included only with `final_reply`, the
    reply it ended with (the Stop hook's `last_assistant_message`): until then the transcript may
    hold only a reply given on the way, or none yet. A `complete` session (a past one, imported)
    is over: its newest turn keeps the last reply the transcript holds."""
    turns: list[_Turn] = []
    current: _Turn | None = None  # the turn assistant text now belongs to
    for line in json_lines(path):
        if line.get("isSidechain") or line.get("isMeta") or line.get("isCompactSummary"):
            continue
        message = line.get("message")
        if not isinstance(message, dict):
            continue
        if line.get("type") == "user":
            content = message.get("content")
            prompt = _typed_prompt(content)
            if prompt is not None:
                current = _Turn(_page_id(session_id, line.get("uuid"), len(turns)), prompt, _when(line), [])
                turns.append(current)
            elif not _is_tool_result(content):
                current = None  # the harness spoke (a command, a notice): what follows answers it
        elif line.get("type") == "assistant" and current is not None:
            _add_reply(current, message)
    if turns:
        if final_reply and final_reply.strip():
            turns[-1].reply_parts = [final_reply.strip()]
        elif not complete:
            turns.pop()
    return [
        Page(
            page_id=turn.page_id,
            user_input=turn.prompt,
            agent_response="\n\n".join(turn.reply_parts),
            timestamp=turn.timestamp,
            thread_id=session_id,
        )
        for turn in turns
        if turn.reply_parts
    ]


def _is_tool_result(content: Any) -> bool:
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    )


def _texts(content: Any) -> list[str] | None:
    """The text of a message's content (a string, or text blocks); None for no text content."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return None


def _typed_prompt(content: Any) -> str | None:
    """What the person typed, or None for a tool result or text the harness wrote."""
    texts = None if _is_tool_result(content) else _texts(content)
    if texts is None:
        return None
    text = WRAPPED_CONTEXT.sub("", "\n".join(texts)).strip()
    if not text or text.startswith(HARNESS_MARKERS):
        return None
    return text


def _add_reply(turn: _Turn, message: dict[str, Any]) -> None:
    """Keep the text of the assistant's latest message: an earlier one ("Let me look.") was
    said on the way to the final answer, between tool calls."""
    texts = [text.strip() for text in _texts(message.get("content")) or [] if text.strip()]
    if not texts:
        return
    message_id = message.get("id")
    if message_id is None or message_id != turn.reply_message:
        turn.reply_parts = []  # a new message: what came before it was not the final answer
        turn.reply_message = message_id
    turn.reply_parts.extend(texts)


def _when(line: dict[str, Any]) -> str:
    try:
        return normalise_timestamp(str(line["timestamp"]))
    except (KeyError, ValueError):
        return utc_now()


def _page_id(session_id: str, line_id: Any, position: int) -> str:
    """From the prompt line's own id when it has one (a resumed session copies lines, ids and
    all), else from the session and the prompt's position in it."""
    source = f"line\0{line_id}" if line_id else f"session\0{session_id}\0{position}"
    digest = hashlib.sha256(("claude-code\0" + source).encode()).hexdigest()
    return f"page_{digest[:16]}"
