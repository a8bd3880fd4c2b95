"""How command results look to a person: tables on stdout, one line per error on stderr."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from memory_mcp.base.phrases import extraction_said, plural, waiting_said
from memory_mcp.base.projects import project_name
from memory_mcp.models import (
    Fact,
    FactChangeResult,
    FactsResult,
    FlushResult,
    ForgetExchangeResult,
    ForgetResult,
    ImportResult,
    MigrationReport,
    Page,
    ScoredPage,
    ScrubResult,
    StatusResult,
    UserProfileResult,
)
from memory_mcp.service.access import TokenRecord

SNIPPET_CHARS = 90

out = Console(highlight=False, soft_wrap=False)

# Notes are written for the host model, which calls tools; at the command line, the command.
COMMAND_FOR_TOOL = {
    "flush_memory(retry_failed=true)": "memory-mcp flush USER --retry-failed",
    "memory_status": "memory-mcp users",
    "search_facts": "memory-mcp show USER --facts",
}


def note_line(note: str) -> None:
    for tool, command in COMMAND_FOR_TOOL.items():
        note = note.replace(tool, f"`{command}`")
    out.print(f"[dim]{escape(note)}[/dim]", highlight=False)  # a note may hold brackets: text, not markup


def status(result: StatusResult) -> None:
    out.print(f"memory-mcp {result.version}  data: {result.data_dir or '(not shown)'}")
    out.print(f"{extraction_said(result.extraction, result.llm_model)}  token counter: {result.token_counter}")
    for note in result.notes:
        note_line(note)
    embedding = any(user.pages_without_vectors is not None for user in result.users)
    analysed_here = result.extraction == "server"  # otherwise nothing here will take the pending on
    columns = ["user", "agents", "exchanges", "facts"] + (["pending", "set aside"] if analysed_here else [])
    table = Table(*columns, *(["no vector"] if embedding else []), title=plural(len(result.users), "user"))
    for user in result.users:
        table.add_row(
            user.user_id,
            ", ".join(user.agents) or "-",
            str(user.pages),
            str(user.facts),
            *([str(user.pending_pages), str(user.set_aside_pages)] if analysed_here else []),
            *([str(user.pages_without_vectors or 0)] if embedding else []),
        )
    out.print(table)
    waiting = sum(user.pending_pages for user in result.users)
    if waiting and not analysed_here:
        note_line(waiting_said(waiting, result.extraction))
    for user in result.users:
        if user.problem:
            out.print(f"[bold]{user.user_id}[/bold]: damaged: {user.problem}")


def profile(result: UserProfileResult, pages: Sequence[Page]) -> None:
    who = result.user_id + (f"/{result.agent_name}" if result.agent_name else "")
    table = Table("section", "summary", title=f"profile of {who}")
    for group in (result.user, result.history):
        for name, section in group:
            if section.summary:
                table.add_row(name, section.summary)
    out.print(table if table.row_count else f"profile of {who}: empty")
    for note in result.notes:
        note_line(note)
    if result.facts is not None:
        facts_table(result.facts, plural(len(result.facts), "fact"))
    if pages:
        pages_table(pages, f"last {plural(len(pages), 'exchange')}")


def facts_table(facts: Sequence[Fact], title: str) -> None:
    table = Table(title=title)
    table.add_column("id", no_wrap=True, min_width=13)
    for name in ("category", "confidence", "fact", "source", "since"):
        table.add_column(name)
    for fact in facts:
        retired = f" [dim](until {fact.validTo[:10]})[/dim]" if fact.validTo else ""
        table.add_row(
            fact.id, fact.category, f"{fact.confidence:.2f}", fact.content + retired, fact.source, fact.createdAt[:10]
        )
    out.print(table)


def pages_table(pages: Sequence[Page], title: str, scored: bool = False) -> None:
    table = Table(title=title)
    if scored:
        table.add_column("score")
    table.add_column("when")
    table.add_column("page", no_wrap=True, min_width=21)
    table.add_column("project")
    table.add_column("user said")
    table.add_column("assistant answered")
    for page in pages:
        score = [f"{page.score:.2f}"] if isinstance(page, ScoredPage) else []
        table.add_row(
            *score,
            page.timestamp[:16].replace("T", " "),
            page.page_id,
            project_name(page.project) or "(no project)",
            _snippet(page.user_input),
            _snippet(page.agent_response),
        )
    out.print(table)


def search(query: str, pages: Sequence[ScoredPage], facts: FactsResult) -> None:
    if pages:
        pages_table(pages, f"exchanges matching {query!r}", scored=True)
    else:
        out.print(f"no exchange matches {query!r}")
    if facts.facts:
        facts_table(facts.facts, f"facts matching {query!r}")


def change(
    result: FactChangeResult | ForgetResult | ForgetExchangeResult | ImportResult | FlushResult | ScrubResult,
) -> None:
    message = getattr(result, "message", None)
    if message:
        out.print(message)
    if isinstance(result, FlushResult):
        out.print(
            f"{result.user_id}: extraction {result.extraction}; analysed {plural(result.pages_analysed, 'exchange')} "
            f"in {plural(result.llm_calls, 'LLM call')}; {plural(len(result.facts_added), 'fact')} added, "
            f"{len(result.facts_removed)} retired; {result.pending_pages} still pending, "
            f"{result.set_aside_pages} set aside"
        )
        for line in [*result.errors, *result.notes]:
            note_line(line)


def migration(report: MigrationReport, title: str) -> None:
    table = Table("scope", "exchanges", "copied now", "facts", title=title)
    for scope in report.scopes:
        who = scope.user_id + (f"/{scope.agent_name}" if scope.agent_name else "")
        table.add_row(who, str(scope.pages), str(scope.pages_copied), str(scope.facts))
    if report.scopes:
        table.add_section()
        table.add_row("total", str(report.pages), str(report.pages_copied), str(report.facts))
        out.print(table)
    out.print(report.message)


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[: SNIPPET_CHARS - 1] + "…"


def tokens(records: Sequence[TokenRecord], path: Path) -> None:
    table = Table("token id", "user", "label", "created", title=f"{plural(len(records), 'token')} in {path}")
    for record in records:
        table.add_row(record.token_id, record.user_id, record.label or "-", record.created)
    out.print(table)
