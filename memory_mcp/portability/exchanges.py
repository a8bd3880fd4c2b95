"""A past conversation as memory keeps it, whichever tool it was held in: a thread of exchanges,
each dated when it was said, with an id made from the source's own ids, so reading the same
source again yields the same pages and importing it twice stores nothing twice."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memory_mcp.base.clock import format_timestamp, normalise_timestamp
from memory_mcp.models import Page

MAX_THREAD_CHARS = 256  # as add_memory allows a thread id
MAX_TITLE_CHARS = 200


@dataclass
class Conversation:
    """One past conversation: its source kind ("chatgpt", "claude-ai", "claude-code", "codex"),
    its id there, and its exchanges in the order they were said."""

    kind: str
    conversation_id: str
    pages: list[Page]


def stable_id(kind: str, *parts: str) -> str:
    """A page id from the source kind and the source's own ids."""
    digest = hashlib.sha256("\0".join((kind, *parts)).encode("utf-8", "surrogatepass")).hexdigest()
    return f"page_{digest[:16]}"


def thread_of(kind: str, conversation_id: str) -> str:
    """The conversation's id as a thread id, or one made from it when it cannot be one."""
    if 0 < len(conversation_id) <= MAX_THREAD_CHARS and conversation_id.isprintable():
        return conversation_id
    return stable_id(kind, "thread", conversation_id).replace("page_", "thread_")


def storable(text: str) -> str:
    """`text` as it can be stored: no NUL (PostgreSQL refuses it), no unpaired surrogate (not
    UTF-8), so one odd message cannot make the rest of an import fail."""
    text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def exchange(
    kind: str,
    conversation_id: str,
    message_id: str,
    said: tuple[str, str],
    timestamp: str,
    title: str = "",
    project: str | None = None,
) -> Page:
    """One exchange (what the person said, what the assistant answered) of a conversation."""
    meta: dict[str, Any] = {"imported_from": kind}
    if title.strip():
        meta["title"] = storable(title.strip()[:MAX_TITLE_CHARS])
    return Page(
        page_id=stable_id(kind, conversation_id, message_id),
        user_input=storable(said[0]),
        agent_response=storable(said[1]),
        timestamp=timestamp,
        meta_data=meta,
        thread_id=thread_of(kind, conversation_id),
        project=project,
    )


def when(value: Any, fallback: str) -> str:
    """The stored form of a time given as seconds since 1970 or as ISO 8601; `fallback` for
    none, or for one that is not a time."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return format_timestamp(datetime.fromtimestamp(value, UTC))
        except (ValueError, OverflowError, OSError):
            return fallback
    if isinstance(value, str) and value.strip():
        try:
            return normalise_timestamp(value)
        except ValueError:
            return fallback
    return fallback


@dataclass
class Message:
    """One message as an export shows it: who said it ("user" or "assistant"), its id, its text."""

    role: str
    message_id: str
    text: str
    timestamp: str


def paired(kind: str, conversation_id: str, messages: list[Message], title: str = "") -> list[Page]:
    """The conversation's exchanges: each prompt with the assistant's messages after it joined as
    its reply. Two prompts with no answer between are one prompt said in two messages; a prompt
    never answered is left out."""
    pages: list[Page] = []
    prompt: Message | None = None
    replies: list[str] = []
    for message in messages:
        if not message.text:
            continue
        if message.role == "user":
            if prompt is not None and not replies:
                prompt = Message("user", prompt.message_id, f"{prompt.text}\n\n{message.text}", prompt.timestamp)
                continue
            if prompt is not None:
                pages.append(_joined(kind, conversation_id, prompt, replies, title))
            prompt, replies = message, []
        elif message.role == "assistant" and prompt is not None:
            replies.append(message.text)
    if prompt is not None and replies:
        pages.append(_joined(kind, conversation_id, prompt, replies, title))
    return pages


def _joined(kind: str, conversation_id: str, prompt: Message, replies: list[str], title: str) -> Page:
    said = (prompt.text, "\n\n".join(replies))
    return exchange(kind, conversation_id, prompt.message_id, said, prompt.timestamp, title)
