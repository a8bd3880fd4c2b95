"""Past conversations imported from the dashboard: a ChatGPT or Claude.ai data export (its
conversations.json, or the export's .zip) uploaded on a memory's page, read and counted against
what is stored, then held here until the person confirms the import (or it is forgotten).

The file is read whole and checked before anything is stored, by the same functions as
`memory-mcp import` (portability/history.py), and imported in the same batches, each an ordinary
merging import: page ids come from the export's own ids, so what is stored already is skipped.
Nothing is stored by the preview. The upload is held in this process alone, for the memory it
was previewed for, for HOLD_SECONDS at most; a later preview of the same memory replaces it.
"""

from __future__ import annotations

import re
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import IO, TYPE_CHECKING

from memory_mcp.base.errors import InvalidInput
from memory_mcp.portability.history import KINDS, History, merging_imports, read_history
from memory_mcp.service.memory_service import MemoryService

if TYPE_CHECKING:
    from memory_mcp.dashboard.context import Memory

HOLD_SECONDS = 30 * 60
HELD_AT_MOST = 4  # previews held at once, across memories: each holds a whole export
TITLES_SHOWN = 10
ZIP_START = b"PK\x03\x04"
UPLOAD_NAME = "conversations.json"  # what an upload is called when it names no plain file name
PLAIN_NAME = re.compile(r"\w[\w .()-]{0,99}")


@dataclass(frozen=True)
class Listed:
    """One conversation as the preview lists it."""

    title: str
    exchanges: int
    first: str  # when its first exchange was said
    last: str  # and its last


@dataclass
class Preview:
    """What importing an export would do: its figures, and the export itself, held until imported."""

    history: History
    user_id: str
    added: int
    skipped: int
    first: str
    last: str
    listed: list[Listed] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return KINDS[self.history.kind]

    @property
    def conversations(self) -> int:
        return len(self.history.conversations)

    @property
    def exchanges(self) -> int:
        return self.history.exchanges


def is_past_conversations(head: bytes) -> bool:
    """Whether an upload beginning with `head` is an export of past conversations (a .zip, or a
    JSON list) rather than a document of memory-mcp's own (a JSON object)."""
    return head.startswith(ZIP_START) or head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")


def read_upload(upload: IO[bytes], filename: str | None) -> History:
    """The conversations of an uploaded export, read as `memory-mcp import` reads a file;
    InvalidInput, naming the file and what is wrong, when it is not one."""
    name = PurePath(filename or "").name
    if not PLAIN_NAME.fullmatch(name) or name.endswith(".jsonl"):
        name = UPLOAD_NAME  # the copy is named as the file was when that name is a plain one
    with tempfile.TemporaryDirectory(prefix="memory-mcp-upload-") as folder:
        path = Path(folder) / name
        with path.open("wb") as copy:
            shutil.copyfileobj(upload, copy)
        try:
            history = read_history(path)
        except InvalidInput as exc:  # said of the file as the person named it, not of the copy
            raise InvalidInput(str(exc).replace(f"{folder}/", "")) from None
    if history is None:
        raise InvalidInput(f"{name} holds no list of conversations: it is not a ChatGPT or Claude.ai export")
    if not history.conversations:
        raise InvalidInput(f"{name} holds no conversation with an answered message; nothing was imported")
    return history


def preview(service: MemoryService, user_id: str, history: History) -> Preview:
    """What importing `history` into `user_id`'s memory would add and skip, each batch checked as
    its import would be (InvalidInput for one that would be refused); stores nothing."""
    added = skipped = 0
    for _, request in merging_imports(history, user_id, service.settings.max_text_chars):
        result = service.preview_import(request)
        added, skipped = added + result.pages_added, skipped + result.pages_skipped
    said = sorted(page.timestamp for conversation in history.conversations for page in conversation.pages)
    listed = [
        Listed(
            title=str((conversation.pages[0].meta_data or {}).get("title") or ""),
            exchanges=len(conversation.pages),
            first=min(page.timestamp for page in conversation.pages),
            last=max(page.timestamp for page in conversation.pages),
        )
        for conversation in history.conversations[:TITLES_SHOWN]
    ]
    return Preview(history, user_id, added, skipped, said[0], said[-1], listed)


def store(service: MemoryService, preview: Preview) -> tuple[int, int]:
    """Import the previewed conversations batch by batch, as `memory-mcp import` does: how many
    exchanges were added and how many were stored already."""
    added = skipped = 0
    for _, request in merging_imports(preview.history, preview.user_id, service.settings.max_text_chars):
        result = service.import_memory(request)
        added, skipped = added + result.pages_added, skipped + result.pages_skipped
    return added, skipped


class Held:
    """Previews waiting for their Import, each under an id no one can guess and for one memory."""

    def __init__(self) -> None:
        self.previews: dict[str, tuple[Memory, float, Preview]] = {}
        self.lock = threading.Lock()

    def hold(self, memory: Memory, preview: Preview) -> str:
        """Keep `preview` for `memory` (in place of one held for it before); its id."""
        held_id = secrets.token_urlsafe(24)
        with self.lock:
            self._drop_stale()
            for old_id, (whose, _, _) in list(self.previews.items()):
                if whose == memory:
                    del self.previews[old_id]
            while len(self.previews) >= HELD_AT_MOST:
                del self.previews[next(iter(self.previews))]  # the oldest
            self.previews[held_id] = (memory, time.monotonic(), preview)
        return held_id

    def take(self, memory: Memory, held_id: str) -> Preview:
        """The preview held under `held_id` for `memory`, no longer held; InvalidInput when there is none."""
        with self.lock:
            self._drop_stale()
            found = self.previews.get(held_id)
            if found is None or found[0] != memory:
                raise InvalidInput(
                    f"this preview is no longer held (it is kept {HOLD_SECONDS // 60} minutes, until it is "
                    "imported or another file is previewed, and not across a restart): upload the file again"
                )
            del self.previews[held_id]
        return found[2]

    def _drop_stale(self) -> None:
        now = time.monotonic()
        for held_id, (_, since, _) in list(self.previews.items()):
            if now - since > HOLD_SECONDS:
                del self.previews[held_id]
