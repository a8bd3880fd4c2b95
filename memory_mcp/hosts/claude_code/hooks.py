"""Claude Code hooks: memory for every session and prompt, and every reply remembered, whether or
not the model calls a memory tool.

`SessionStart` gets the session's digest (and again after a compaction or /clear);
`UserPromptSubmit` gets what memory holds that is relevant to the prompt and not given to the
session before (injection.py); `Stop` stores the session's exchanges that are not stored yet,
each with the project it was said in. All run as short-lived processes with the hook's JSON on
stdin; none may ever hold up or block the prompt, so every failure is reported as one line on
stderr and the hook exits 0 with nothing on stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from memory_mcp.base.clock import utc_now
from memory_mcp.base.ids import validate_identifier
from memory_mcp.base.projects import project_of
from memory_mcp.base.settings import Settings
from memory_mcp.hosts.claude_code.transcript import session_exchanges
from memory_mcp.hosts.helper import spawn_detached
from memory_mcp.hosts.injection import HostSession, prompt_block, session_digest
from memory_mcp.models import ExportDocument, ImportRequest, ImportResult, MemoryDocument
from memory_mcp.service.memory_service import MemoryService

# Claude Code keeps at most this many characters of a hook's context inline (more becomes a file
# reference the model never reads): every block is built to fit it.
MAX_HOOK_OUTPUT_CHARS = 10_000
CLIPPED = " […]"
# SessionStart's sources after which the model no longer holds what was given before.
STARTS_OVER = {"startup", "clear", "compact"}


class HookInput(BaseModel):
    """What Claude Code sends a command hook on stdin (the fields used here; others are ignored)."""

    model_config = ConfigDict(extra="ignore")

    session_id: str = ""
    transcript_path: str | None = None
    cwd: str | None = None
    hook_event_name: str | None = None
    prompt: str | None = None
    source: str | None = None  # SessionStart: startup, resume, clear or compact
    stop_hook_active: bool = False
    last_assistant_message: str | None = None


def read_hook_input(text: str) -> HookInput:
    return HookInput.model_validate(json.loads(text))


def host_session(event: HookInput, user_id: str | None, agent_name: str | None, folder: str) -> HostSession:
    """The session a hook serves, in the project of `folder` (where Claude Code works); the ids
    its command line names are checked (InvalidInput names the rule)."""
    for field, value in (("user_id", user_id), ("agent_name", agent_name)):
        if value:
            validate_identifier(field, value)
    return HostSession(user_id, agent_name, event.session_id, project_of(folder))


def prompt_context(service: MemoryService, event: HookInput, session: HostSession, max_tokens: int | None) -> str:
    """The hook's stdout for a prompt: what is relevant to it as additional context, or nothing."""
    context = prompt_block(service, session, event.prompt or "", max_tokens, MAX_HOOK_OUTPUT_CHARS)
    return _additional_context("UserPromptSubmit", context)


def start_context(service: MemoryService, event: HookInput, session: HostSession) -> str:
    """The hook's stdout at a session's start: its digest as additional context, or nothing. A
    resumed session keeps what it was given (its conversation is there again)."""
    fresh = event.source in STARTS_OVER or event.source is None
    return _additional_context("SessionStart", session_digest(service, session, MAX_HOOK_OUTPUT_CHARS, fresh))


def _additional_context(event: str, context: str) -> str:
    if not context:
        return ""
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": event, "additionalContext": context}}, ensure_ascii=False
    )


def remember_session(service: MemoryService, event: HookInput, session: HostSession) -> tuple[ImportResult, str] | None:
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
                "project": session.project,
            }
        )
        for page in pages
    ]
    scope = service.resolve_scope(session.user_id, session.agent_name)
    document = ExportDocument(
        exported_at=utc_now(), user_id=scope.user_id, agent_name=scope.agent_name, memory=MemoryDocument(), pages=pages
    )
    result = service.import_memory(ImportRequest.build(data=document.model_dump(mode="json"), mode="merge"))
    return result, pages[-1].page_id


def _clipped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(CLIPPED)] + CLIPPED


def update_when_quiet(settings: Settings, user_id: str, agent_name: str | None, newest_page: str, cwd: str) -> None:
    """Leave behind a process that runs the structured-memory update of what the hook stored
    once the quiet time has passed, unless a later exchange arrived meanwhile (whose own hook
    then leaves the update to its own process). A new process, not a fork of the hook."""
    told = {"settings": settings.model_dump(mode="json"), "user_id": user_id, "agent_name": agent_name}
    spawn_detached([sys.executable, "-m", "memory_mcp.hosts.quiet_update", newest_page], told, cwd, None)
