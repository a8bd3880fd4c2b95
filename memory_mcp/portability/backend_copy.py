"""`memory-mcp migrate`: copy everything stored in one backend into another, and prove it arrived.

The source is only ever read. Each scope's pages go first, in their order and in bounded batches,
and its document last, so a document never stands in the target without the pages it describes
(its analysis progress counts positions in the page log). A migration that stops half way leaves
each scope's target log holding a prefix of the source's: `resume=True` checks exactly that and
copies the rest.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Literal

from memory_mcp.base.errors import InvalidInput, StorageError
from memory_mcp.base.phrases import plural
from memory_mcp.base.settings import Settings
from memory_mcp.models import MemoryDocument, MigrationReport, Page, ScopeMigration
from memory_mcp.store import MemoryStore, Scope, open_store

Backend = Literal["json", "postgres"]
# One append is one statement on PostgreSQL: keep it far from the 1 GB message limit and well
# inside the statement timeout, whatever the pages hold (a page may carry 200,000 characters).
BATCH_PAGES = 1000
BATCH_CHARS = 8_000_000
RESUME_HINT = "run the same command again with --resume to continue where it stopped"


def backend_settings(settings: Settings, backend: Backend) -> Settings:
    """The settings with `backend` as the storage, checked as the config file would be, so that a
    missing DSN is reported before anything is opened."""
    storage = settings.storage
    if backend == "postgres" and not storage.dsn:
        raise InvalidInput(
            "migrating to or from postgres needs a DSN: set storage.dsn in the config file or MEMORY_MCP_DSN "
            "in the environment; nothing was migrated"
        )
    return settings.model_copy(update={"storage": storage.model_copy(update={"backend": backend})})


@contextmanager
def open_backend(settings: Settings) -> Iterator[MemoryStore]:
    """The store the settings name, closed afterwards (PostgreSQL holds connection pools)."""
    store = open_store(settings)
    try:
        yield store
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()


def copy_memory(
    source: MemoryStore, target: MemoryStore, reread: MemoryStore, *, resume: bool = False
) -> MigrationReport:
    """Copy every scope of `source` into `target`, then check through `reread` (a second instance
    over the target, so what is compared is what was stored, not what `target` cached) that each
    scope's pages and document equal the source's.

    Refuses, writing nothing, when the target already holds any of the scopes, unless `resume`:
    then each such scope must hold the first pages of the source's, and only the rest are copied.
    """
    scopes = source.list_scopes()
    present = _already_copied(source, target, scopes, resume)
    copied = []
    for scope in scopes:
        try:
            copied.append(_copy_scope(source, target, scope, present.get(scope, 0)))
        except StorageError as exc:
            raise StorageError(
                f"migration stopped at {scope.describe()}: {exc}; the source is unchanged; {RESUME_HINT}"
            ) from exc
    target.bulk_loaded()  # verifying reads every page back
    for scope in scopes:
        _verify(source, reread, scope)
    pages = sum(each.pages for each in copied)
    pages_copied = sum(each.pages_copied for each in copied)
    facts = sum(each.facts for each in copied)
    message = (
        f"Migrated {plural(len(scopes), 'scope')}: {plural(pages, 'exchange')} ({pages_copied} copied now) and {plural(facts, 'fact')}, "
        "verified against the source."
        if scopes
        else "The source holds no memory: nothing was migrated."
    )
    return MigrationReport(scopes=copied, pages=pages, pages_copied=pages_copied, facts=facts, message=message)


def _already_copied(source: MemoryStore, target: MemoryStore, scopes: list[Scope], resume: bool) -> dict[Scope, int]:
    """How many of each scope's pages the target holds already; raises, before anything is written,
    when the target holds memory that this migration did not put there (or any at all, without resume)."""
    stored = set(target.list_scopes())
    present = [scope for scope in scopes if scope in stored]
    if present and not resume:
        raise InvalidInput(
            f"the target already holds memory for {_names(present)}; nothing was written. Migrate into an empty "
            "target, or, if an earlier migration from this source stopped, run again with --resume"
        )
    counts: dict[Scope, int] = {}
    for scope in present:
        have = list(target.read_pages(scope).pages.ids)
        want = list(source.read_pages(scope).pages.ids)
        if have != want[: len(have)]:
            raise InvalidInput(
                f"cannot resume: the target's exchanges of {scope.describe()} are not the first {len(have)} of the "
                "source's, so they were not copied from it; nothing was written"
            )
        counts[scope] = len(have)
    return counts


def _copy_scope(source: MemoryStore, target: MemoryStore, scope: Scope, skip: int) -> ScopeMigration:
    pages = source.read_pages(scope).pages
    for batch in batches(pages[skip:]):
        target.append_pages(scope, batch)
    document = source.read_document(scope)
    if _comparable(target.read_document(scope)) != _comparable(document):
        target.write_document(scope, document)
    return ScopeMigration(
        user_id=scope.user_id,
        agent_name=scope.agent_name,
        pages=len(pages),
        pages_copied=len(pages) - skip,
        facts=len(document.facts),
    )


def batches(pages: Sequence[Page]) -> Iterator[Sequence[Page]]:
    """Consecutive runs of `pages` of at most BATCH_PAGES pages and about BATCH_CHARS characters of
    JSON (a larger page goes alone), each small enough for one append."""
    start, chars = 0, 0
    for end, page in enumerate(pages):
        size = len(page.model_dump_json())
        if end > start and (end - start == BATCH_PAGES or chars + size > BATCH_CHARS):
            yield pages[start:end]
            start, chars = end, 0
        chars += size
    if start < len(pages):
        yield pages[start:]


def _verify(source: MemoryStore, reread: MemoryStore, scope: Scope) -> None:
    """Raise StorageError unless the target's pages and document of `scope` equal the source's."""
    want, have = source.read_pages(scope).pages, reread.read_pages(scope).pages
    problem = None
    if len(have) != len(want):
        problem = f"the target holds {len(have)} exchanges, the source {len(want)}"
    elif have != want:
        index = next(i for i, (a, b) in enumerate(zip(have, want, strict=True)) if a != b)
        problem = f"exchange {index} differs (target {have[index].page_id}, source {want[index].page_id})"
    else:
        wanted, stored = source.read_document(scope), reread.read_document(scope)
        if len(stored.facts) != len(wanted.facts):
            problem = f"the target holds {len(stored.facts)} facts, the source {len(wanted.facts)}"
        elif _comparable(stored) != _comparable(wanted):
            problem = "the memory document differs"
    if problem is not None:
        raise StorageError(
            f"verification failed for {scope.describe()}: {problem}. If a server was still writing to the source, "
            f"stop it and {RESUME_HINT}"
        )


def _comparable(document: MemoryDocument) -> MemoryDocument:
    """The document without lastUpdated, which every write stamps anew."""
    return document.model_copy(update={"lastUpdated": ""})


def _names(scopes: list[Scope]) -> str:
    shown = ", ".join(scope.describe() for scope in scopes[:5])
    return shown + (f" (and {len(scopes) - 5} more)" if len(scopes) > 5 else "")
