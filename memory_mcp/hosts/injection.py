"""What a host's session is given from memory without a tool call.

Once per session (at its start, and again after a compaction or a /clear), a digest within a
small budget: the profile, corrections, pinned and high-confidence facts, and what the project
was about lately; and when the session comes to another project, that project's latest. Then, with each prompt, only what is specifically relevant to it (relevance.py's
floors) and not given to the session before (session_ledger.py): never the session's own
exchanges, which the model has, and nothing at all for a prompt with nothing to recall.

Host-neutral: a host's hooks (hooks.py for Claude Code) name the session, its project and the
host's cap on what it keeps, and print what comes back in the host's format.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory_mcp.base.projects import project_name
from memory_mcp.memory.facts import current
from memory_mcp.models import MemoryDocument, ProfileRequest, RetrieveMemoryRequest
from memory_mcp.models.requests import MAX_QUERY_CHARS
from memory_mcp.recall.memory_block import MemoryContext, build_context
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.service.session_ledger import SessionLedger, read_ledger, write_ledger

# The digest: what the project was about lately (at most this many exchanges, newest first as the
# budget allows, this long a side), and the facts it carries beside corrections and pinned ones.
DIGEST_EXCHANGES = 10
DIGEST_SIDE_CHARS = 200
DIGEST_MIN_CONFIDENCE = 0.9
# Exchanges ranked for a prompt before the floors choose among them.
PROMPT_CANDIDATES = 10


@dataclass(frozen=True)
class HostSession:
    """A host's conversation as memory sees it: whose memory, which session (its exchanges are
    stored in the thread of that name) and which project it works in."""

    user_id: str | None
    agent_name: str | None
    session_id: str
    project: str | None


def session_digest(
    service: MemoryService, session: HostSession, max_chars: int | None = None, fresh: bool = True
) -> str:
    """The block a session starts with; "" when nothing is remembered yet. `fresh`: its ledger
    starts over, as after a compaction the model holds nothing given before; else (a resumed
    session, whose conversation is there again) only what it was not given yet."""
    if not _gives(service, session):
        return ""
    scope = service.resolve_scope(session.user_id, session.agent_name)
    root = service.settings.data_storage_path
    ledger = SessionLedger() if fresh else read_ledger(root, scope, session.session_id)
    block = _digest(service, session, max_chars, ledger)
    write_ledger(root, scope, session.session_id, ledger)
    return _text(block)


def prompt_block(
    service: MemoryService, session: HostSession, prompt: str, max_tokens: int | None, max_chars: int | None = None
) -> str:
    """The block for one prompt: what is specifically relevant to it and was not given to the
    session before, within `max_tokens` (default memory.max_injection_tokens) and `max_chars`.
    Before it, the digest of the project the session has just come to (or of the session, for a
    host without a session-start event). "" when there is nothing worth its tokens."""
    if not prompt.strip() or not _gives(service, session):
        return ""
    scope = service.resolve_scope(session.user_id, session.agent_name)
    root = service.settings.data_storage_path
    ledger = read_ledger(root, scope, session.session_id)
    digest = ""
    if _project_key(session.project) not in ledger.projects:
        service.read_ahead(session.user_id, session.agent_name)  # for the search after the digest
        digest = _text(_digest(service, session, None if max_chars is None else max_chars // 2, ledger))
    request = RetrieveMemoryRequest.build(
        query=prompt[:MAX_QUERY_CHARS],
        user_id=session.user_id,
        agent_name=session.agent_name,
        max_results=PROMPT_CANDIDATES,
        thread_id=session.session_id,
        project=session.project,
    )
    found = service.find(request, for_injection=True, skip_pages=ledger.pages)
    block = build_context(
        MemoryDocument(),
        [fact for fact in found.facts_to_show() if fact.id not in ledger.facts],
        [],
        found.earlier_to_show(),
        max_tokens or service.settings.memory.max_injection_tokens,
        service.tokens,
        max_chars=None if max_chars is None else max_chars - len(digest) - 1,
        labels=found.labels(),
    )
    ledger.record(block.shown_pages, block.shown_facts)
    write_ledger(root, scope, session.session_id, ledger)
    return "\n".join(text for text in (digest, _text(block)) if text)


def _digest(
    service: MemoryService, session: HostSession, max_chars: int | None, ledger: SessionLedger
) -> MemoryContext:
    """What a session is given when it starts, or comes to a project, within memory.digest_tokens:
    the profile, corrections, pinned and high-confidence facts (what `ledger` says it had left
    out), and as many of the project's latest exchanges as fit. Recorded in `ledger`."""
    profile = service.get_user_profile(
        ProfileRequest.build(user_id=session.user_id, agent_name=session.agent_name, include_knowledge=True)
    )
    standing = [
        fact
        for fact in current(profile.facts or [])
        if (fact.category == "correction" or fact.pinned or fact.confidence >= DIGEST_MIN_CONFIDENCE)
        and fact.id not in ledger.facts
        and fact.project in (None, session.project)
    ]
    lately = service.latest_exchanges(
        session.user_id,
        session.agent_name,
        DIGEST_EXCHANGES,
        project=session.project,
        skip_thread=session.session_id,
    )
    name = project_name(session.project)
    block = build_context(
        MemoryDocument() if ledger.profile else MemoryDocument(user=profile.user, history=profile.history),
        standing,
        [page for page in lately if page.page_id not in ledger.pages],
        [],
        service.settings.memory.digest_tokens,
        service.tokens,
        max_chars=max_chars,
        side_chars=DIGEST_SIDE_CHARS,
        recent_heading=f"## Lately in {name}" if name else "## Lately",
    )
    ledger.profile = True
    ledger.projects.add(_project_key(session.project))
    ledger.record(block.shown_pages, block.shown_facts)
    return block


def _gives(service: MemoryService, session: HostSession) -> bool:
    """Whether there is anything to give: injection on (memory.injection_enabled) and memory stored."""
    return service.settings.memory.injection_enabled and service.is_stored(session.user_id, session.agent_name)


def _project_key(project: str | None) -> str:
    return project or ""


def _text(block: MemoryContext) -> str:
    """The block, or "" when it shows nothing but its frame."""
    shows_something = block.shown_pages or block.shown_facts or "\n## " in block.text
    return block.text if shows_something else ""
