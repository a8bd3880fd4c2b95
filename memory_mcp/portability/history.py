"""Past conversations brought in on day one: which source a file or folder is (a ChatGPT or
Claude.ai data export, Claude Code transcripts, Codex session files), its conversations read
whole before anything is stored, and handed out in batches to import one after the other.

Everything is read and checked first, so a bad file stores nothing. Each batch is an ordinary
merging import, and page ids come from the source's own ids: an import stopped part-way (Ctrl-C,
a crash) and run again skips what was stored and ends as one uninterrupted import would.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import InvalidInput
from memory_mcp.models import ExportDocument, ImportRequest, MemoryDocument, Page
from memory_mcp.portability.chatgpt import chatgpt_conversations, is_chatgpt
from memory_mcp.portability.claude_ai import claude_ai_conversations, is_claude_ai
from memory_mcp.portability.exchanges import Conversation
from memory_mcp.portability.host_sessions import CLAUDE_CODE, CODEX, file_kind, host_sessions, session_files

KINDS = {
    "chatgpt": "ChatGPT export",
    "claude-ai": "Claude.ai export",
    CLAUDE_CODE: "Claude Code sessions",
    CODEX: "Codex sessions",
}
FOLDER_KINDS = (CLAUDE_CODE, CODEX)
BATCH_EXCHANGES = 300
CLIPPED = " […]"
EXPORT_MEMBER = re.compile(r"conversations(-\d+)?\.json")


@dataclass
class History:
    """A source's conversations (those with at least one exchange), each exchange once."""

    kind: str
    source: Path
    conversations: list[Conversation]

    @property
    def exchanges(self) -> int:
        return sum(len(conversation.pages) for conversation in self.conversations)


@dataclass
class Batch:
    pages: list[Page]
    conversations_done: int  # conversations whose every exchange is in this batch or an earlier one


def read_history(source: Path, kind: str | None = None) -> History | None:
    """The past conversations `source` holds, as `kind` says or as its content shows; None when it
    is a JSON object (an export of memory-mcp's own, a DeerFlow memory.json) and no kind was asked
    for. InvalidInput, naming the file and what is wrong, for anything else."""
    if kind is not None and kind not in KINDS:
        raise InvalidInput(f"unknown format {kind!r}: one of {', '.join(KINDS)}")
    if source.is_dir():
        kind = kind or _folder_kind(source)
        if kind not in FOLDER_KINDS:
            raise InvalidInput(f"{source} is a folder: a {KINDS[kind]} is conversations.json or the export's .zip")
        conversations = host_sessions(session_files(source, kind), kind)
    elif source.suffix == ".jsonl":
        found = _jsonl_kind(source)
        if kind is not None and kind != found:
            raise InvalidInput(f"{source} is not one of the {KINDS[kind]}: it holds none of their lines")
        conversations = host_sessions([source], found)
        kind = found
    else:
        data = _read_export(source)
        if isinstance(data, dict) and kind is None:
            return None
        kind, conversations = _export_conversations(source, data, kind)
    return History(kind, source, _once_each(conversations))


def batches(history: History, max_text_chars: int, size: int = BATCH_EXCHANGES) -> Iterator[Batch]:
    """The exchanges in batches of whole conversations, about `size` exchanges each (a longer
    conversation is one batch of its own), their text cut to `max_text_chars` as the hooks cut it."""
    pending: list[Page] = []
    for done, conversation in enumerate(history.conversations, start=1):
        pending += [_clipped(page, max_text_chars) for page in conversation.pages]
        if len(pending) >= size or done == len(history.conversations):
            yield Batch(pending, done)
            pending = []


def merging_imports(history: History, user_id: str, max_text_chars: int) -> Iterator[tuple[Batch, ImportRequest]]:
    """Each batch as the ordinary merging import into `user_id`'s memory that stores it (or that
    `preview_import` checks and counts): no facts, the batch's exchanges as pages."""
    for batch in batches(history, max_text_chars):
        document = ExportDocument(exported_at=utc_now(), user_id=user_id, memory=MemoryDocument(), pages=batch.pages)
        yield batch, ImportRequest.build(data=document.model_dump(mode="json"), mode="merge")


def _export_conversations(source: Path, data: Any, kind: str | None) -> tuple[str, list[Conversation]]:
    if kind in FOLDER_KINDS:
        raise InvalidInput(f"{source}: {KINDS[kind]} are a folder of .jsonl files (or one of them)")
    if not isinstance(data, list):
        raise InvalidInput(f"{source} holds no list of conversations: it is not a ChatGPT or Claude.ai export")
    if kind is None:
        if is_chatgpt(data):
            kind = "chatgpt"
        elif is_claude_ai(data):
            kind = "claude-ai"
        else:
            raise InvalidInput(
                f"{source} holds a list, but not of ChatGPT conversations (with mapping) or Claude.ai ones "
                "(with chat_messages); an export of memory or a DeerFlow memory.json is an object"
            )
    if kind == "chatgpt":
        return kind, chatgpt_conversations(data, str(source))
    return kind, claude_ai_conversations(data, str(source))


def _folder_kind(folder: Path) -> str:
    if next(folder.rglob("rollout-*.jsonl"), None) is not None:
        return CODEX
    if any(file_kind(path) == CLAUDE_CODE for path in session_files(folder, CLAUDE_CODE)[:20]):
        return CLAUDE_CODE
    raise InvalidInput(f"{folder} holds no Claude Code transcripts or Codex session files; nothing was imported")


def _jsonl_kind(path: Path) -> str:
    found = file_kind(path)
    if found is None:
        raise InvalidInput(f"{path} is neither a Claude Code transcript nor a Codex session file")
    return found


def _read_export(source: Path) -> Any:
    """The JSON of a file, or of the conversations file(s) of an export's .zip."""
    try:
        if not zipfile.is_zipfile(source):
            return json.loads(source.read_text(encoding="utf-8"))
        with zipfile.ZipFile(source) as archive:
            members = sorted(m for m in archive.namelist() if EXPORT_MEMBER.fullmatch(PurePosixPath(m).name))
            if not members:
                raise InvalidInput(f"{source} holds no conversations.json: it is not a ChatGPT or Claude.ai export")
            parts = [json.loads(archive.read(member).decode("utf-8")) for member in members]
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        reason = " ".join(str(getattr(exc, "strerror", None) or exc).split())
        raise InvalidInput(f"{source} could not be read as JSON ({reason}); nothing was imported") from None
    if len(parts) == 1 or not all(isinstance(part, list) for part in parts):
        return parts[0]
    return [conversation for part in parts for conversation in part]


def _once_each(conversations: list[Conversation]) -> list[Conversation]:
    """Each exchange once, in the first conversation that holds it (a resumed Claude Code session
    copies the lines of the one it resumes), and only conversations left with exchanges."""
    seen: set[str] = set()
    kept = []
    for conversation in conversations:
        pages = [page for page in conversation.pages if page.page_id not in seen]
        seen.update(page.page_id for page in pages)
        if pages:
            kept.append(Conversation(conversation.kind, conversation.conversation_id, pages))
    return kept


def _clipped(page: Page, limit: int) -> Page:
    def cut(text: str) -> str:
        return text if len(text) <= limit else text[: limit - len(CLIPPED)] + CLIPPED

    if len(page.user_input) <= limit and len(page.agent_response) <= limit:
        return page
    return page.model_copy(update={"user_input": cut(page.user_input), "agent_response": cut(page.agent_response)})
