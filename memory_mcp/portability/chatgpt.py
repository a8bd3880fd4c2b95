"""Conversations from a ChatGPT data export (`conversations.json`).

Each conversation is a tree: `mapping` holds every message by node id, with its `parent` and
`children`, because editing a message or asking again starts a new branch beside the old one.
What the person saw last is the branch that ends at `current_node`: that one is read, from the
root down, and the abandoned branches are left out. System, tool and hidden messages (custom
instructions, browsing, code runs) are not part of what was said, and neither are an assistant's
calls to its tools; an assistant's text messages after a prompt are joined into one reply.
"""

from __future__ import annotations

from typing import Any

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import InvalidInput
from memory_mcp.models import Page
from memory_mcp.portability.exchanges import Conversation, Message, paired, when

KIND = "chatgpt"
TEXT_CONTENT = {"text", "multimodal_text"}


def is_chatgpt(conversations: list[Any]) -> bool:
    return bool(conversations) and all(isinstance(c, dict) and "mapping" in c for c in conversations[:5])


def chatgpt_conversations(conversations: list[Any], where: str) -> list[Conversation]:
    """Every conversation of the export, its exchanges along the branch it ended on; InvalidInput
    naming the conversation that is not one."""
    read = []
    for number, data in enumerate(conversations):
        if not isinstance(data, dict) or not isinstance(data.get("mapping"), dict):
            raise InvalidInput(f"{where}: conversation {number} has no mapping: it is not a ChatGPT export")
        conversation_id = str(data.get("conversation_id") or data.get("id") or "")
        if not conversation_id:
            raise InvalidInput(f"{where}: conversation {number} has no id (conversation_id or id)")
        read.append(Conversation(KIND, conversation_id, _exchanges(data, conversation_id)))
    return read


def _exchanges(data: dict[str, Any], conversation_id: str) -> list[Page]:
    started = when(data.get("create_time"), utc_now())
    messages = []
    for number, message in enumerate(_branch(data["mapping"], data.get("current_node"))):
        role, text = _said(message)
        if text is not None:
            said_at = when(message.get("create_time"), started)
            messages.append(Message(role, str(message.get("id") or f"#{number}"), text, said_at))
    return paired(KIND, conversation_id, messages, str(data.get("title") or ""))


def _branch(mapping: dict[str, Any], current: Any) -> list[dict[str, Any]]:
    """The messages from the root to `current_node` (or, without one, to the newest leaf)."""
    node_id = current if isinstance(current, str) and current in mapping else _newest_leaf(mapping)
    path: list[dict[str, Any]] = []
    seen: set[str] = set()
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        node = mapping[node_id]
        if not isinstance(node, dict):
            break
        if isinstance(node.get("message"), dict):
            path.append(node["message"])
        node_id = node.get("parent")
    return path[::-1]


def _newest_leaf(mapping: dict[str, Any]) -> str | None:
    leaves = [
        (float(node["message"].get("create_time") or 0), node_id)
        for node_id, node in mapping.items()
        if isinstance(node, dict) and not node.get("children") and isinstance(node.get("message"), dict)
    ]
    return max(leaves)[1] if leaves else None


def _said(message: dict[str, Any]) -> tuple[str, str | None]:
    """The author's role and the message's text as the person saw it; None for a message that
    is not part of the conversation shown (system, tool, hidden, a tool call, no text)."""
    author = message.get("author")
    role = author.get("role") if isinstance(author, dict) else None
    metadata = _mapping(message.get("metadata"))
    content = _mapping(message.get("content"))
    if role not in ("user", "assistant") or metadata.get("is_visually_hidden_from_conversation"):
        return str(role), None
    if role == "assistant" and message.get("recipient", "all") != "all":
        return role, None  # a call to a tool (browsing, code), not said to the person
    if content.get("content_type") not in TEXT_CONTENT:
        return role, None
    parts = [part for part in content.get("parts") or [] if isinstance(part, str) and part.strip()]
    return role, "\n\n".join(part.strip() for part in parts) or None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
