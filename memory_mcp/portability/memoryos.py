"""Bringing memory over from MemoryOS, so its users can move without losing anything.

MemoryOS keeps, under its data directory:
    users/{user_id}/short_term.json          recent QA pairs
    users/{user_id}/mid_term.json            {"sessions": {id: {"summary", "details": [pages]}}}
    users/{user_id}/long_term_user.json      {"user_profiles", "knowledge_base", "assistant_knowledge"}
    assistants/{assistant_id}/long_term_assistant.json
Each becomes an export document that import_memory then merges or replaces like any other.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from memory_mcp.base.clock import normalise_timestamp, utc_now
from memory_mcp.base.errors import InvalidInput
from memory_mcp.base.ids import validate_identifier
from memory_mcp.memory.facts import new_fact_id, new_knowledge_id, normalise
from memory_mcp.models import AnalysisProgress, ExportDocument, Fact, KnowledgeEntry, MemoryDocument, Page, Section

IMPORTED_CONFIDENCE = 0.9


def from_memoryos(
    root: Path, source_user: str | None = None, assistant_id: str | None = None, rename_to: str | None = None
) -> list[ExportDocument]:
    """One export document per MemoryOS user under `root` (or just `source_user`), each under its
    MemoryOS id, or under `rename_to` when a single user is imported."""
    users_dir = root / "users"
    if not users_dir.is_dir():
        raise InvalidInput(f"{root} has no users/ folder: it is not a MemoryOS data directory")
    names = [_plain_name(source_user)] if source_user else sorted(e.name for e in users_dir.iterdir() if e.is_dir())
    if rename_to is not None and len(names) != 1:
        raise InvalidInput(f"--user renames one user, and {root} holds {len(names)}: choose one with --memoryos-user")
    assistant_knowledge = _assistant_knowledge(root, assistant_id)
    documents = []
    for name in names:
        user_dir = users_dir / name
        if not user_dir.is_dir():
            raise InvalidInput(f"MemoryOS has no user {name!r} under {users_dir}")
        target = rename_to or name
        try:
            validate_identifier("user_id", target)
        except ValueError as exc:
            raise InvalidInput(
                f"MemoryOS user {name!r}: {exc}; "
                f"import it alone under a new id with --memoryos-user {name} --user NEW_ID"
            ) from None
        documents.append(_user_document(user_dir, name, target, assistant_knowledge))
    return documents


def _user_document(
    user_dir: Path, memoryos_id: str, user_id: str, assistant_knowledge: list[dict[str, Any]]
) -> ExportDocument:
    pages, analysed_prefix = _pages(user_dir)
    long_term = _read_json(user_dir / "long_term_user.json", {})
    profile = (long_term.get("user_profiles") or {}).get(memoryos_id, {})
    profile_text = profile.get("data") if isinstance(profile, dict) else None
    memory = MemoryDocument(
        facts=_facts(long_term.get("knowledge_base") or []),
        assistantKnowledge=_knowledge([*(long_term.get("assistant_knowledge") or []), *assistant_knowledge]),
        # Exchanges MemoryOS already analysed are not sent to the LLM again; the rest are.
        analysis=AnalysisProgress(allBefore=analysed_prefix),
    )
    if isinstance(profile_text, str) and profile_text.strip() and profile_text.strip().lower() != "none":
        updated = _timestamp(profile.get("last_updated"))
        memory.user.personalContext = Section(summary=profile_text.strip(), updatedAt=updated)
    return ExportDocument(exported_at=utc_now(), user_id=user_id, memory=memory, pages=pages)


def _pages(user_dir: Path) -> tuple[list[Page], int]:
    """Every exchange from mid-term sessions and short-term memory, oldest first, once each;
    and how many of the oldest were already analysed by MemoryOS."""
    entries: list[tuple[dict[str, Any], str | None]] = []
    mid_term = _read_json(user_dir / "mid_term.json", {})
    for session_id, session in (mid_term.get("sessions") or {}).items():
        for detail in session.get("details") or []:
            entries.append((detail, str(session_id)))
    entries += [(qa, None) for qa in _read_json(user_dir / "short_term.json", [])]
    pages: list[tuple[Page, bool]] = []
    seen: set[tuple[str, str, str]] = set()
    for entry, session_id in entries:
        if not isinstance(entry, dict):
            continue
        user_input, agent_response = str(entry.get("user_input") or ""), str(entry.get("agent_response") or "")
        timestamp = _timestamp(entry.get("timestamp"))
        page = Page(
            page_id=_page_id(entry.get("page_id"), user_input, agent_response, timestamp),
            user_input=user_input,
            agent_response=agent_response,
            timestamp=timestamp,
            meta_data=entry.get("meta_data") if isinstance(entry.get("meta_data"), dict) else None,
            thread_id=session_id,
        )
        key = (normalise(page.user_input), normalise(page.agent_response), page.timestamp)
        if key in seen or not (page.user_input or page.agent_response):
            continue
        seen.add(key)
        pages.append((page, bool(entry.get("analyzed"))))
    pages.sort(key=lambda item: item[0].timestamp)
    prefix = 0
    while prefix < len(pages) and pages[prefix][1]:
        prefix += 1
    return [page for page, _ in pages], prefix


def _facts(entries: list[Any]) -> list[Fact]:
    return [
        Fact(
            id=new_fact_id(),
            content=text,
            category="context",
            confidence=IMPORTED_CONFIDENCE,
            createdAt=created,
            source="memoryos",
        )
        for text, created in _knowledge_texts(entries)
    ]


def _knowledge(entries: list[Any]) -> list[KnowledgeEntry]:
    return [
        KnowledgeEntry(id=new_knowledge_id(), content=text, createdAt=created, source="memoryos")
        for text, created in _knowledge_texts(entries)
    ]


def _knowledge_texts(entries: list[Any]) -> list[tuple[str, str]]:
    """(text, when) of each MemoryOS knowledge entry ({"knowledge", "timestamp"} or a bare
    string), blanks and repeats left out."""
    texts, seen = [], set()
    for entry in entries:
        text = entry.get("knowledge") if isinstance(entry, dict) else entry
        if not isinstance(text, str) or not text.strip() or normalise(text) in seen:
            continue
        seen.add(normalise(text))
        created = _timestamp(entry.get("timestamp")) if isinstance(entry, dict) else utc_now()
        texts.append((text.strip(), created))
    return texts


def _assistant_knowledge(root: Path, assistant_id: str | None) -> list[dict[str, Any]]:
    assistants = root / "assistants"
    if not assistants.is_dir():
        return []
    names = [_plain_name(assistant_id)] if assistant_id else sorted(e.name for e in assistants.iterdir() if e.is_dir())
    entries: list[dict[str, Any]] = []
    for name in names:
        data = _read_json(assistants / name / "long_term_assistant.json", {})
        entries += [entry for entry in data.get("assistant_knowledge") or [] if isinstance(entry, dict)]
    return entries


def _plain_name(name: str) -> str:
    """A MemoryOS id names one folder: no path separators, no '.' or '..'."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise InvalidInput(f"{name!r} is not a MemoryOS id (a single folder name)")
    return name


def _page_id(value: Any, user_input: str, agent_response: str, timestamp: str) -> str:
    """Keep MemoryOS's page id when it is a safe string; otherwise derive one from the exchange,
    so importing the same directory again recognises it instead of adding it twice."""
    if isinstance(value, str) and 0 < len(value) <= 64 and value.isprintable():
        return value
    digest = hashlib.sha256(f"{timestamp}\0{user_input}\0{agent_response}".encode()).hexdigest()
    return f"page_{digest[:16]}"


def _timestamp(value: Any) -> str:
    if isinstance(value, str):
        try:
            return normalise_timestamp(value)
        except ValueError:
            pass
    return utc_now()


def _read_json(path: Path, empty: Any) -> Any:
    if not path.exists():
        return empty
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{path} could not be read as JSON ({exc}); nothing was imported") from None
    return value if isinstance(value, type(empty)) else empty
