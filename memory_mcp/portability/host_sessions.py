"""Past sessions of the coding agents, read from the files they keep: Claude Code's transcripts
(`~/.claude/projects/<project>/<session>.jsonl`) and Codex's rollouts
(`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`). Each session is one thread, its project the
folder it ran in.

Ids are the ones the hooks give the same exchanges (the prompt line's for Claude Code, the session
and turn for Codex), so a session the hooks already stored is recognised, not stored twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import InvalidInput
from memory_mcp.base.json_lines import json_lines
from memory_mcp.base.projects import project_of
from memory_mcp.portability.claude_code_transcript import WRAPPED_CONTEXT, session_exchanges
from memory_mcp.portability.exchanges import Conversation, exchange, storable, when

CLAUDE_CODE, CODEX = "claude-code", "codex"
ROLLOUT_GLOB = "rollout-*.jsonl"
# What Codex writes as a user message but the person did not type: instructions, the environment.
CODEX_CONTEXT = ("# AGENTS.md instructions", "<environment_context>", "<user_instructions>", "<INSTRUCTIONS>")
WRAPPED_WHOLE = re.compile(r"\s*<([A-Za-z_:-]+)[^>]*>.*</\1>\s*", re.DOTALL)


def default_folder(kind: str) -> Path:
    """Where the host keeps its sessions on this machine."""
    return Path.home() / (".claude/projects" if kind == CLAUDE_CODE else ".codex/sessions")


def session_files(folder: Path, kind: str) -> list[Path]:
    """The host's session files under `folder`, oldest first (sub-agents' own transcripts left out)."""
    if kind == CODEX:
        return sorted(folder.rglob(ROLLOUT_GLOB))
    found = [p for p in folder.rglob("*.jsonl") if "subagents" not in p.parts and not p.name.startswith("agent-")]
    return sorted(found, key=lambda path: (_modified(path), str(path)))


def file_kind(path: Path) -> str | None:
    """CODEX for a rollout file, CLAUDE_CODE for a transcript, None for neither (its first lines)."""
    try:
        for number, line in enumerate(json_lines(path)):
            if line.get("type") == "session_meta":
                return CODEX
            if line.get("sessionId") and line.get("type") in ("user", "assistant", "summary", "system"):
                return CLAUDE_CODE
            if number >= 20:
                break
    except OSError as exc:
        raise InvalidInput(f"{path} could not be read ({exc.strerror or exc}); nothing was imported") from None
    return None


def host_sessions(paths: list[Path], kind: str) -> list[Conversation]:
    """One conversation per session file; InvalidInput naming a file that cannot be read."""
    read = []
    for path in paths:
        try:
            read.append(_codex_session(path) if kind == CODEX else _claude_code_session(path))
        except OSError as exc:
            raise InvalidInput(f"{path} could not be read ({exc.strerror or exc}); nothing was imported") from None
    return read


def _claude_code_session(path: Path) -> Conversation:
    session_id, cwd = path.stem, None
    for line in json_lines(path):
        if isinstance(line.get("sessionId"), str) and isinstance(line.get("cwd"), str):
            session_id, cwd = line["sessionId"], line["cwd"]
            break
    project = project_of(cwd)
    pages = [
        page.model_copy(
            update={
                "user_input": storable(page.user_input),
                "agent_response": storable(page.agent_response),
                "project": project,
                "meta_data": {"imported_from": CLAUDE_CODE},
            }
        )
        for page in session_exchanges(path, session_id, complete=True)
    ]
    return Conversation(CLAUDE_CODE, session_id, pages)


@dataclass
class _Turn:
    turn_id: str | None
    prompt: str
    timestamp: str
    reply: str = ""


def _codex_session(path: Path) -> Conversation:
    """A rollout's turns. Codex writes what was said twice, as a response item and as an event; one
    of each is read (the events for prompts, the response items for replies, where the file has
    them), and a turn's reply is its last assistant message, or the one its completion names."""
    records = [r for r in json_lines(path) if isinstance(r.get("payload"), dict)]
    meta: dict[str, Any] = next((r["payload"] for r in records if r.get("type") == "session_meta"), {})
    session_id = str(meta.get("id") or path.stem.removeprefix("rollout-"))
    prompts_from_events = any(_event_prompt(r) is not None for r in records)
    replies_from_items = any(_item_reply(r) is not None for r in records)
    turns: list[_Turn] = []
    turn_id: str | None = None
    for record in records:
        payload = record["payload"]
        if isinstance(payload.get("turn_id"), str):
            turn_id = payload["turn_id"]
        prompt = _event_prompt(record) if prompts_from_events else _item_prompt(record)
        if prompt is not None:
            if not (turns and turns[-1].prompt == prompt and not turns[-1].reply):  # the same message twice
                turns.append(_Turn(turn_id, prompt, when(record.get("timestamp"), utc_now())))
            continue
        reply = _item_reply(record) if replies_from_items else _event_reply(record)
        if payload.get("type") == "task_complete" and isinstance(payload.get("last_agent_message"), str):
            reply = payload["last_agent_message"].strip() or None
        if reply and turns:
            turns[-1].reply = reply
    project = project_of(meta.get("cwd") if isinstance(meta.get("cwd"), str) else None)
    pages = [
        exchange(CODEX, session_id, turn.turn_id or f"#{n}", (turn.prompt, turn.reply), turn.timestamp, "", project)
        for n, turn in enumerate(turns)
        if turn.reply
    ]
    return Conversation(CODEX, session_id, pages)


def _event_prompt(record: dict[str, Any]) -> str | None:
    """What the person typed, as an event: `user_message`, or an `item_completed` UserMessage."""
    payload = record["payload"]
    if record.get("type") != "event_msg":
        return None
    if payload.get("type") == "user_message" and payload.get("kind") in (None, "plain"):
        text = payload.get("message")
        return text.strip() or None if isinstance(text, str) else None
    item = payload.get("item")
    if payload.get("type") == "item_completed" and isinstance(item, dict) and item.get("type") == "UserMessage":
        return _joined(item.get("content")) or None
    return None


def _item_prompt(record: dict[str, Any]) -> str | None:
    """What the person typed, as a response item (older rollouts): instructions, the environment
    and context wrapped whole in a tag left out."""
    payload = record["payload"]
    if record.get("type") != "response_item" or payload.get("type") != "message" or payload.get("role") != "user":
        return None
    text = _joined(payload.get("content"))
    if not text or text.startswith(CODEX_CONTEXT) or _wrapped_whole(text):
        return None
    return text


def _item_reply(record: dict[str, Any]) -> str | None:
    payload = record["payload"]
    if record.get("type") != "response_item" or payload.get("type") != "message":
        return None
    return _joined(payload.get("content")) or None if payload.get("role") == "assistant" else None


def _event_reply(record: dict[str, Any]) -> str | None:
    payload = record["payload"]
    if record.get("type") == "event_msg" and payload.get("type") == "agent_message":
        text = payload.get("message")
        return text.strip() or None if isinstance(text, str) else None
    return None


def _joined(content: Any) -> str:
    """The text parts of a Codex message's content (input_text, output_text, text)."""
    if not isinstance(content, list):
        return ""
    texts = [part.get("text") for part in content if isinstance(part, dict) and "text" in str(part.get("type"))]
    return "\n\n".join(t.strip() for t in texts if isinstance(t, str) and t.strip())


def _wrapped_whole(text: str) -> bool:
    return WRAPPED_WHOLE.fullmatch(text) is not None or not WRAPPED_CONTEXT.sub("", text).strip()


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
