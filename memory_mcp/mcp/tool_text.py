"""What a model reads of each tool's result: compact text within a stated token bound.

A tool result carries its structured content (the whole result, for programs) and text for the
model. The text is never the JSON dump of the result: it says what the call found or did in a
few lines, an empty section once, and where a list is longer than the bound, how many more
there are and where they are. Every bound below is held by a test (tests/test_tool_text.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from memory_mcp.base.phrases import extraction_said, plural, waiting_said
from memory_mcp.base.projects import project_name
from memory_mcp.models import (
    HISTORY_SECTION_NAMES,
    USER_SECTION_NAMES,
    AddMemoryResult,
    ExportDocument,
    Fact,
    FactChangeResult,
    FactsResult,
    FlushResult,
    ForgetExchangeResult,
    ForgetResult,
    ImportResult,
    RetrieveMemoryResult,
    StatusResult,
    UserProfileResult,
)
from memory_mcp.recall.memory_block import SECTION_LABELS, escape
from memory_mcp.recall.token_count import TokenCounter

# Token bounds of each tool's text (cl100k); retrieve_memory's is its block's budget and this.
SHORT_TEXT_TOKENS = 300
FLUSH_TEXT_TOKENS = 600
LIST_TEXT_TOKENS = 2000
RETRIEVE_EXTRA_TOKENS = 400  # the ids line and what did not fit, after the block
FACT_SHOWN_CHARS = 300  # a fact's words in a confirmation: the model knows what it sent
IDS_SHOWN = 20
STRUCTURED = "the result's structured content"


def retrieve_text(result: RetrieveMemoryResult, shown_pages: Sequence[str]) -> str:
    """The <memory> block (within the request's budget), then one line of the exchanges it shows
    and what did not fit, if anything."""
    lines = [result.context or "Nothing is remembered that matches this query."]
    if shown_pages:
        ids = " ".join(shown_pages[:IDS_SHOWN])
        more = f" (+{len(shown_pages) - IDS_SHOWN})" if len(shown_pages) > IDS_SHOWN else ""
        lines.append(f"Exchanges shown: {ids}{more}")
    lines += [note for note in result.notes if note.startswith(CALL_NOTES)]
    return "\n".join(lines)


# The notes that belong to one retrieve (the standing ones are in the server's instructions).
CALL_NOTES = ("To fit max_tokens", "Embeddings unavailable", "Context injection is off")


def add_memory_text(result: AddMemoryResult) -> str:
    where = f" in thread {result.thread_id}" if result.thread_id else ""
    text = f"Remembered as {result.page_id}{where}."
    structured = result.structured
    if structured is not None:
        skipped = ", ".join(f"#{fact.index} {fact.reason}" for fact in structured.facts_skipped[:10])
        text += (
            f" Facts: {len(structured.facts_added)} added"
            + (f", skipped {skipped}" if skipped else "")
            + (f", {len(structured.facts_superseded)} superseded" if structured.facts_superseded else "")
            + "."
        )
        if structured.sections_updated:
            text += f" Profile updated: {', '.join(structured.sections_updated)}."
    return text


def profile_text(result: UserProfileResult, counter: TokenCounter) -> str:
    whose = _whose(result.user_id, result.agent_name)
    lines = []
    for group, names in (("user", USER_SECTION_NAMES), ("history", HISTORY_SECTION_NAMES)):
        for name in names:
            section = getattr(getattr(result, group), name)
            if section.summary.strip():
                lines.append(f"- {SECTION_LABELS[name]}: {escape(section.summary)}")  # type: ignore[index]
    head = [f"Profile of {whose}:" if lines else f"Profile of {whose}: no section written yet."]
    facts = [_fact_line(fact) for fact in result.facts or []]
    if result.facts is not None:
        head_facts = [f"Facts ({len(facts)}):" if facts else "Facts: none yet."]
    else:
        head_facts = []
    knowledge = [f"- {escape(entry.content)}" for entry in result.assistant_knowledge or []]
    body = head + lines + head_facts + facts
    if result.assistant_knowledge is not None:
        body += [f"Assistant knowledge ({len(knowledge)}):" if knowledge else "Assistant knowledge: none."] + knowledge
    body += [note for note in result.notes]
    return _bounded(body, counter, LIST_TEXT_TOKENS, "lines")


def facts_text(result: FactsResult, counter: TokenCounter) -> str:
    whose = _whose(result.user_id, result.agent_name)
    if not result.facts:
        return f"No fact of {whose} matches." if result.total == 0 else f"{result.total} facts match; none listed."
    shown = f"{len(result.facts)} of {result.total}" if result.total > len(result.facts) else str(result.total)
    return _bounded(
        [f"Facts of {whose} ({shown}):", *map(_fact_line, result.facts)], counter, LIST_TEXT_TOKENS, "facts"
    )


def fact_change_text(result: FactChangeResult) -> str:
    return f"{result.message} {_fact_line(result.fact)[2:]}"


def flush_text(result: FlushResult) -> str:
    parts = [
        f"{_sentence(extraction_said(result.extraction))}: {plural(result.pages_analysed, 'exchange')} analysed in "
        f"{plural(result.llm_calls, 'LLM call')}; {plural(len(result.facts_added), 'fact')} added, "
        f"{len(result.facts_removed)} retired"
        + (f"; sections updated: {', '.join(result.sections_updated)}" if result.sections_updated else "")
        + (
            f". Pending: {result.pending_pages}; set aside: {result.set_aside_pages}."
            if result.extraction == "server"
            else f". {_sentence(waiting_said(result.pending_pages, result.extraction))}."
            if result.pending_pages
            else "."
        )
    ]
    parts += [f"Error: {_clip(error, 200)}" for error in result.errors[:3]]
    parts += result.notes
    return "\n".join(parts)


def status_text(result: StatusResult, counter: TokenCounter) -> str:
    storage = "storage ok" if result.storage_ok else "storage NOT writable"
    extraction = extraction_said(result.extraction, result.llm_model)
    if result.extraction == "server":
        extraction += f"; {plural(result.queued_updates, 'update')} queued"
    where = f"data in {result.data_dir}; " if result.data_dir else ""
    head = f"memory-mcp {result.version}; {where}{storage}; {extraction}; {plural(len(result.users), 'user')}:"
    users = []
    for user in result.users:
        if user.problem:
            users.append(f"- {user.user_id}: DAMAGED ({_clip(user.problem, 200)})")
            continue
        agents = f", agents {', '.join(user.agents)}" if user.agents else ""
        waiting = f", {waiting_said(user.pending_pages, result.extraction)}" if user.pending_pages else ""
        aside = f", {user.set_aside_pages} set aside" if user.set_aside_pages else ""
        users.append(
            f"- {user.user_id}: {plural(user.pages, 'exchange')}, {plural(user.facts, 'fact')}{waiting}{aside}{agents}"
        )
    tail = [f"Last update errors: {'; '.join(_clip(e, 150) for e in result.last_update_errors[:3])}"]
    lines = [head, *users, *(tail if result.last_update_errors else []), *result.notes]
    return _bounded(lines, counter, LIST_TEXT_TOKENS, "lines")


def message_text(result: ForgetResult | ForgetExchangeResult | ImportResult) -> str:
    """A change said in one sentence: its result's message."""
    return result.message


def export_text(result: ExportDocument) -> str:
    """What the document holds and its size: the document itself is the structured content."""
    size = len(result.model_dump_json().encode())
    facts = sum(1 for fact in result.memory.facts if fact.validTo is None)
    agents = f" and {plural(len(result.agents), 'agent')} ({', '.join(sorted(result.agents))})" if result.agents else ""
    return (
        f"Export of {_whose(result.user_id, result.agent_name)}: {plural(len(result.pages), 'exchange')}, "
        f"{plural(facts, 'fact')} that hold{agents}; {_size(size)} of JSON. The document is {STRUCTURED}: "
        "import_memory takes it as it is."
    )


def _fact_line(fact: Fact) -> str:
    marks = [fact.category, f"{fact.confidence:.2f}"]
    if fact.pinned:
        marks.append("pinned")
    if fact.project:
        marks.append(f"project {project_name(fact.project)}")
    if fact.expiresAt:
        marks.append(f"until {fact.expiresAt[:10]}")
    if fact.validTo:
        marks.append(f"retired {fact.validTo[:10]}")
    return f"- {fact.id} [{' | '.join(marks)}] {escape(_clip(fact.content, FACT_SHOWN_CHARS))}"


def _bounded(lines: list[str], counter: TokenCounter, budget: int, what: str) -> str:
    """The lines, as many as fit in `budget` tokens with a last line saying how many more there are."""
    kept: list[str] = []
    used = 0
    for number, line in enumerate(lines):
        cost = counter.count(line + "\n")
        if used + cost > budget - 30:  # room for the closing line
            left = len(lines) - number
            kept.append(f"… {left} more {what}: see {STRUCTURED}.")
            break
        kept.append(line)
        used += cost
    return "\n".join(kept)


def _sentence(text: str) -> str:
    """`text` starting a sentence (str.capitalize would lower every other letter)."""
    return text[:1].upper() + text[1:]


def _whose(user_id: str, agent_name: str | None) -> str:
    return user_id if agent_name is None else f"{user_id}/{agent_name}"


def _clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1].rstrip() + "…"


def _size(size: int) -> str:
    return (
        f"{size} bytes" if size < 10_000 else f"{size / 1000:,.0f} kB" if size < 10_000_000 else f"{size / 1e6:,.0f} MB"
    )


TEXTS: dict[str, Callable[[Any, TokenCounter], str]] = {
    "add_memory": lambda result, _: add_memory_text(result),
    "get_user_profile": profile_text,
    "search_facts": facts_text,
    "flush_memory": lambda result, _: flush_text(result),
    "add_fact": lambda result, _: fact_change_text(result),
    "update_fact": lambda result, _: fact_change_text(result),
    "delete_fact": lambda result, _: fact_change_text(result),
    "forget": lambda result, _: message_text(result),
    "forget_exchange": lambda result, _: message_text(result),
    "export_memory": lambda result, _: export_text(result),
    "import_memory": lambda result, _: message_text(result),
    "memory_status": status_text,
}


TEXT_BOUNDS = {
    "add_memory": SHORT_TEXT_TOKENS,
    "get_user_profile": LIST_TEXT_TOKENS,
    "search_facts": LIST_TEXT_TOKENS,
    "flush_memory": FLUSH_TEXT_TOKENS,
    "add_fact": SHORT_TEXT_TOKENS,
    "update_fact": SHORT_TEXT_TOKENS,
    "delete_fact": SHORT_TEXT_TOKENS,
    "forget": SHORT_TEXT_TOKENS,
    "forget_exchange": SHORT_TEXT_TOKENS,
    "export_memory": SHORT_TEXT_TOKENS,
    "import_memory": SHORT_TEXT_TOKENS,
    "memory_status": LIST_TEXT_TOKENS,
}


def text_of(name: str, result: BaseModel, counter: TokenCounter) -> str:
    """The text a model reads of tool `name`'s result."""
    if isinstance(result, RetrieveMemoryResult):
        return retrieve_text(result, result.shown_pages)
    return TEXTS[name](result, counter)
