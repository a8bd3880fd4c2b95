"""What each hook does, whichever host runs it: memory for every session and prompt, and every
reply remembered, whether or not the model calls a memory tool.

`session-start` gets the session's digest (and again after a compaction or /clear); `prompt`
gets what memory holds that is relevant to the prompt and not given to the session before
(injection.py); `stop` stores the session's exchanges that are not stored yet, each with the
project it was said in. All run as short-lived processes with the host's JSON on stdin; none may
ever hold up or block the prompt, so every failure is reported as one line on stderr and the hook
exits 0 with nothing on stdout. What differs between hosts is in their adapters (events.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from memory_mcp.base.clock import utc_now
from memory_mcp.base.ids import validate_identifier
from memory_mcp.base.projects import project_of
from memory_mcp.base.settings import Settings
from memory_mcp.hosts.events import HostAdapter, HostEvent, clipped
from memory_mcp.hosts.helper import spawn_detached
from memory_mcp.hosts.injection import HostSession, prompt_block, session_digest
from memory_mcp.memory.redaction import redact
from memory_mcp.models import ExportDocument, ImportRequest, ImportResult, MemoryDocument, Page
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.service.session_ledger import WaitingPrompt, claim_start, keep_waiting_prompt, take_waiting_prompt
from memory_mcp.store import Scope

ScopeResolver = Callable[[str | None, str | None], Scope]


def host_session(event: HostEvent, user_id: str | None, agent_name: str | None, folder: str) -> HostSession:
    """The session a hook serves, in the project of `folder` (where the host works); the ids its
    command line names are checked (InvalidInput names the rule)."""
    for field, value in (("user_id", user_id), ("agent_name", agent_name)):
        if value:
            validate_identifier(field, value)
    return HostSession(user_id, agent_name, event.session_id, project_of(folder))


def prompt_context(
    service: MemoryService, host: HostAdapter, event: HostEvent, session: HostSession, max_tokens: int | None
) -> str:
    """The hook's stdout for a prompt: what is relevant to it as additional context, or nothing.
    For a host whose stop lacks the prompt, the prompt (secrets redacted) is kept for the stop."""
    keep_prompt(host, event, session, service.settings.data_storage_path, service.resolve_scope)
    if "prompt" not in host.injects:
        return host.answer("prompt", "")
    return host.answer("prompt", prompt_block(service, session, event.prompt or "", max_tokens, host.max_context_chars))


def keep_prompt(
    host: HostAdapter, event: HostEvent, session: HostSession, data_folder: Path, resolve: ScopeResolver
) -> None:
    """For a host whose stop lacks the prompt: keep it (secrets redacted) for the stop to pair."""
    if host.keeps_prompts and event.prompt and event.prompt.strip():
        scope = resolve(session.user_id, session.agent_name)
        waiting = WaitingPrompt(redact(event.prompt), event.turn_id)
        keep_waiting_prompt(data_folder, scope, session.session_id, waiting)


def start_context(service: MemoryService, host: HostAdapter, event: HostEvent, session: HostSession) -> str:
    """The hook's stdout at a session's start: its digest as additional context, or nothing. A
    resumed session keeps what it was given (its conversation is there again)."""
    if "session-start" not in host.injects:
        return host.answer("session-start", "")
    if not answers_start(service.settings.data_storage_path, event, session, service.resolve_scope):
        return host.answer("session-start", "")  # another copy of this hook answers this start
    digest = session_digest(service, session, host.max_context_chars, event.starts_over)
    return host.answer("session-start", digest)


def answers_start(data_folder: Path, event: HostEvent, session: HostSession, resolve: ScopeResolver) -> bool:
    """Whether this hook answers its session's start: of the copies a host runs for one start
    (VS Code with Claude Code's hook and its own), the first to claim its stamp, in `data_folder`."""
    if event.stamp is None:
        return True
    return claim_start(data_folder, resolve(session.user_id, session.agent_name), session.session_id, event.stamp)


def remember_session(
    service: MemoryService, host: HostAdapter, event: HostEvent, session: HostSession
) -> tuple[ImportResult, str] | None:
    """Store the session's finished exchanges not stored yet, and say which is the newest."""
    pages = finished_exchanges(host, event, session, service.settings.data_storage_path, service.resolve_scope)
    if not pages:
        return None
    return store_exchanges(service, pages, session), pages[-1].page_id


def finished_exchanges(
    host: HostAdapter, event: HostEvent, session: HostSession, data_folder: Path, resolve: ScopeResolver
) -> list[Page]:
    """The exchanges a stop event finishes: for a host whose stop lacks the prompt, paired with the
    prompt its prompt hook kept (in `data_folder`, for the scope `resolve` names)."""
    if host.keeps_prompts and not event.stop_hook_active:
        scope = resolve(session.user_id, session.agent_name)
        waiting = take_waiting_prompt(data_folder, scope, session.session_id)
        if waiting is not None:
            event = event.model_copy(update={"prompt": waiting.prompt, "turn_id": event.turn_id or waiting.turn_id})
    return host.exchanges(event)


def store_exchanges(service: MemoryService, pages: list[Page], session: HostSession) -> ImportResult:
    """Store `pages` (those not stored yet) in the session's scope, each with its project. Text
    beyond max_text_chars is cut with a marker, so one huge paste cannot keep the rest out."""
    limit = service.settings.max_text_chars
    pages = [within_limit(page, limit).model_copy(update={"project": session.project}) for page in pages]
    scope = service.resolve_scope(session.user_id, session.agent_name)
    document = ExportDocument(
        exported_at=utc_now(), user_id=scope.user_id, agent_name=scope.agent_name, memory=MemoryDocument(), pages=pages
    )
    return service.import_memory(ImportRequest.build(data=document.model_dump(mode="json"), mode="merge"))


def within_limit(page: Page, limit: int) -> Page:
    """`page` with each side cut to `limit` characters, a marker where it was cut."""
    return page.model_copy(
        update={"user_input": clipped(page.user_input, limit), "agent_response": clipped(page.agent_response, limit)}
    )


def update_when_quiet(settings: Settings, user_id: str, agent_name: str | None, newest_page: str, cwd: str) -> None:
    """Leave behind a process that runs the structured-memory update of what the hook stored
    once the quiet time has passed, unless a later exchange arrived meanwhile (whose own hook
    then leaves the update to its own process). A new process, not a fork of the hook."""
    _leave_behind("memory_mcp.hosts.quiet_update", [newest_page], settings, user_id, agent_name, cwd)


def index_when_due(settings: Settings, user_id: str, agent_name: str | None, cwd: str) -> None:
    """Leave behind a process that builds and saves the word index of the memory the hook stored
    to (see MemoryService.index_due)."""
    _leave_behind("memory_mcp.hosts.index_build", [], settings, user_id, agent_name, cwd)


def _leave_behind(
    module: str, argv: list[str], settings: Settings, user_id: str, agent_name: str | None, cwd: str
) -> None:
    told = {"settings": settings.model_dump(mode="json"), "user_id": user_id, "agent_name": agent_name}
    spawn_detached([sys.executable, "-m", module, *argv], told, cwd, None)
