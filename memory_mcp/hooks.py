"""Claude Code hooks: memory on every prompt and after every reply, whether or not the model
calls a memory tool.

`UserPromptSubmit` gets the <memory> block for the prompt, as context Claude reads; `Stop`
stores the session's exchanges that are not stored yet. Both run as short-lived processes with
the hook's JSON on stdin; neither may ever hold up or block the prompt, so every failure is
reported as one line on stderr and the hook exits 0 with nothing on stdout.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from memory_mcp.clock import utc_now
from memory_mcp.config import Settings
from memory_mcp.hook_helper import run_detached
from memory_mcp.models import (
    ExportDocument,
    FlushRequest,
    ImportRequest,
    ImportResult,
    MemoryDocument,
    RetrieveMemoryRequest,
)
from memory_mcp.models.requests import MAX_QUERY_CHARS
from memory_mcp.portability.claude_code import session_exchanges
from memory_mcp.service import MemoryService

# Claude Code keeps at most this much of a hook's context inline; more becomes a file reference.
MAX_HOOK_OUTPUT_CHARS = 10_000
CLIPPED = " […]"
PROJECT_AGENT_CHARS = 40


class HookInput(BaseModel):
    """What Claude Code sends a command hook on stdin (the fields used here; others are ignored)."""

    model_config = ConfigDict(extra="ignore")

    session_id: str = ""
    transcript_path: str | None = None
    cwd: str | None = None
    hook_event_name: str | None = None
    prompt: str | None = None
    stop_hook_active: bool = False
    last_assistant_message: str | None = None


def read_hook_input(text: str) -> HookInput:
    return HookInput.model_validate(json.loads(text))


def project_agent(cwd: str) -> str:
    """The agent name that keeps a repository's memory apart: the folder's name, made a valid
    identifier, and a short hash of the whole path, so two checkouts named alike stay apart."""
    path = str(Path(cwd).resolve())
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", Path(path).name).strip("-")[:PROJECT_AGENT_CHARS] or "project"
    return f"{name}-{hashlib.sha256(path.encode()).hexdigest()[:6]}"


def prompt_context(
    service: MemoryService, event: HookInput, user_id: str | None, agent_name: str | None, max_tokens: int | None
) -> str:
    """The hook's stdout for a prompt: the <memory> block as additional context, or nothing when
    there is no prompt or nothing is remembered for the scope yet."""
    if not event.prompt or not event.prompt.strip():
        return ""
    request = RetrieveMemoryRequest.build(
        query=event.prompt[:MAX_QUERY_CHARS], user_id=user_id, agent_name=agent_name, max_tokens=max_tokens
    )
    if not service.is_stored(request.user_id, request.agent_name):
        return ""
    context = service.retrieve_memory(request).context
    while len(context) > MAX_HOOK_OUTPUT_CHARS:  # dense text: a smaller budget, never a cut block
        request = request.model_copy(update={"max_tokens": request.max_tokens * 3 // 4})
        context = service.retrieve_memory(request).context
    if not context:
        return ""
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": context}},
        ensure_ascii=False,
    )


def remember_session(
    service: MemoryService, event: HookInput, user_id: str | None, agent_name: str | None
) -> tuple[ImportResult, str] | None:
    """Store the session's finished exchanges not stored yet, and say which is the newest.

    A stored exchange is never rewritten, so the newest turn waits until its final reply is
    certain: the hook's `last_assistant_message`, on a Stop that no other hook turned into a
    continuation (`stop_hook_active`). Until then a later Stop stores it; every earlier turn is
    finished. Text beyond max_text_chars is cut with a marker, so one huge paste cannot keep the
    rest of the session out."""
    if not event.transcript_path or not event.session_id:
        return None
    final = None if event.stop_hook_active else event.last_assistant_message
    pages = session_exchanges(Path(event.transcript_path), event.session_id, final)
    if not pages:
        return None
    limit = service.settings.max_text_chars
    pages = [
        page.model_copy(
            update={
                "user_input": _clipped(page.user_input, limit),
                "agent_response": _clipped(page.agent_response, limit),
            }
        )
        for page in pages
    ]
    scope = service.resolve_scope(user_id, agent_name)
    document = ExportDocument(
        exported_at=utc_now(), user_id=scope.user_id, agent_name=scope.agent_name, memory=MemoryDocument(), pages=pages
    )
    result = service.import_memory(ImportRequest.build(data=document.model_dump(mode="json"), mode="merge"))
    return result, pages[-1].page_id


def _clipped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(CLIPPED)] + CLIPPED


def update_when_quiet(settings: Settings, user_id: str, agent_name: str | None, newest_page: str) -> None:
    """Leave behind a detached process that runs the structured-memory update of what the hook
    stored once the quiet time has passed, unless a later exchange arrived meanwhile (whose own
    hook then leaves the update to its own process). Forked after the caller closed its service."""

    def update() -> None:
        time.sleep(settings.memory.debounce_seconds)
        service = MemoryService(settings)
        try:
            latest = service.latest_pages(user_id, agent_name, 1)
            if latest and latest[-1].page_id == newest_page:
                service.flush_memory(FlushRequest.build(user_id=user_id, agent_name=agent_name))
        finally:
            service.close()

    run_detached(update)
