"""Conversations from a Claude.ai data export (`conversations.json`).

Each conversation lists its `chat_messages`, the person's ("human") and Claude's ("assistant").
Where a message was edited or a reply asked for again, the messages name their parent
(`parent_message_uuid`) and form branches: the one read is the branch that ends in the last
message, as Claude.ai showed it; without parents the list is the conversation, in order.
"""

from __future__ import annotations

from typing import Any

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import InvalidInput
from memory_mcp.models import Page
from memory_mcp.portability.exchanges import Conversation, Message, paired, when

KIND = "claude-ai"


def is_claude_ai(conversations: list[Any]) -> bool:
    return bool(conversations) and all(isinstance(c, dict) and "chat_messages" in c for c in conversations[:5])


def claude_ai_conversations(conversations: list[Any], where: str) -> list[Conversation]:
    """Every conversation of the export, along the branch that ends in its last message;
    InvalidInput naming the conversation that is not one."""
    read = []
    for number, data in enumerate(conversations):
        if not isinstance(data, dict) or not isinstance(data.get("chat_messages"), list):
            raise InvalidInput(f"{where}: conversation {number} has no chat_messages: it is not a Claude.ai export")
        conversation_id = str(data.get("uuid") or "")
        if not conversation_id:
            raise InvalidInput(f"{where}: conversation {number} has no uuid")
        messages = [m for m in data["chat_messages"] if isinstance(m, dict)]
        read.append(Conversation(KIND, conversation_id, _exchanges(data, conversation_id, _branch(messages))))
    return read


def _exchanges(data: dict[str, Any], conversation_id: str, messages: list[dict[str, Any]]) -> list[Page]:
    started = when(data.get("created_at"), utc_now())
    roles = {"human": "user", "assistant": "assistant"}
    said = [
        Message(
            roles.get(str(m.get("sender")), ""),
            str(m.get("uuid") or f"#{n}"),
            _text(m),
            when(m.get("created_at"), started),
        )
        for n, m in enumerate(messages)
    ]
    return paired(KIND, conversation_id, said, str(data.get("name") or ""))


def _branch(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages from the first to the last one, following parents where they are given."""
    if not messages or not any(m.get("parent_message_uuid") for m in messages):
        return messages
    by_id = {str(m.get("uuid")): m for m in messages if m.get("uuid")}
    path: list[dict[str, Any]] = []
    message: dict[str, Any] | None = messages[-1]
    seen: set[str] = set()
    while message is not None and str(message.get("uuid")) not in seen:
        seen.add(str(message.get("uuid")))
        path.append(message)
        message = by_id.get(str(message.get("parent_message_uuid")))
    return path[::-1]


def _text(message: dict[str, Any]) -> str:
    """The message's text: its text blocks where it has content blocks, else its `text`."""
    content = message.get("content")
    if isinstance(content, list):
        blocks = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        joined = "\n\n".join(t.strip() for t in blocks if isinstance(t, str) and t.strip())
        if joined:
            return joined
    text = message.get("text")
    return text.strip() if isinstance(text, str) else ""
