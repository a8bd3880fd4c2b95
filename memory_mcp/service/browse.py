"""What people read of a memory (the dashboard, the command line): its exchanges listed, searched,
by project and by session."""

from __future__ import annotations

from collections.abc import Callable

from memory_mcp.base.clock import now
from memory_mcp.base.settings import Settings
from memory_mcp.memory.sessions import SessionView, archived_sessions, session_views
from memory_mcp.models import Page, RetrieveMemoryRequest, ScoredPage
from memory_mcp.recall.scope_recall import PageRecall
from memory_mcp.service.pages import pages_now, scored_page, shown_page
from memory_mcp.service.scopes import require_stored
from memory_mcp.store import MemoryStore, Scope

LATEST_BATCH = 32  # pages read back at a time when looking for the latest of a project
MAX_PAGE_PROJECTS = 100_000  # page -> project kept per scope for that (~10 MB at most)


def search_exchanges(
    store: MemoryStore, recall: PageRecall, scope: Scope, request: RetrieveMemoryRequest
) -> list[ScoredPage]:
    """Every stored exchange ranked for the query, recent and archived ones included; for a
    person searching their memory, so it counts no visits."""
    page_log = store.read_pages(scope)
    pages = pages_now(page_log)
    hits = recall.search_all(scope, page_log, request.query, request.max_results, among_first=len(pages))
    shown = pages.pick([i for i, _ in hits])
    return [scored_page(page, score) for page, (_, score) in zip(shown, hits)]


def latest_pages(store: MemoryStore, scope: Scope, count: int) -> list[Page]:
    """The last `count` exchanges stored for a scope, in the order they were added."""
    pages = store.read_pages(scope).pages
    return [shown_page(page) for page in pages[-count:]] if count > 0 else []


def find_pages(store: MemoryStore, scope: Scope, keep: Callable[[Page], bool], limit: int) -> tuple[list[Page], int]:
    """The newest `limit` exchanges `keep` accepts, newest first, and how many it accepts in
    all; only those returned are copied out of the log (a browse at 10k is then milliseconds)."""
    found: list[Page] = []
    total = 0
    for page in reversed(store.read_pages(scope).pages):
        if keep(page):
            total += 1
            if len(found) < limit:
                found.append(shown_page(page))
    return found, total


def exchange_times(store: MemoryStore, scope: Scope) -> list[str]:
    """When each exchange was said, in the order they were added."""
    return list(store.read_pages(scope).pages.timestamps)


def scope_sessions(store: MemoryStore, settings: Settings, scope: Scope) -> list[SessionView]:
    """The memory's sessions, hottest first: which ones everyday retrieval still searches."""
    require_stored(store, scope)
    return session_views(store.read_pages(scope).pages, store.read_document(scope), now(), settings)


def archived(store: MemoryStore, scope: Scope) -> frozenset[str]:
    """The sessions everyday retrieval no longer searches (named as sessions.session_of names them)."""
    return archived_sessions(store.read_document(scope))


class PageProjects:
    """Which project each page looked at belongs to, per scope, so that a process that asks for a
    project's latest exchanges again (a hook helper) reads only what it shows."""

    def __init__(self) -> None:
        self._by_scope: dict[Scope, dict[str, str | None]] = {}

    def latest(
        self,
        store: MemoryStore,
        scope: Scope,
        count: int,
        project: str | None,
        skip_thread: str | None,
        among_last: int,
    ) -> list[Page]:
        """The newest `count` exchanges of `project` (of any, with None) outside thread
        `skip_thread`, oldest first, looked for among the last `among_last` added only (a session's
        digest must be quick however long the history)."""
        pages = pages_now(store.read_pages(scope))
        ids, threads = pages.ids, pages.threads
        skip = skip_thread or None
        candidates = [n for n in range(len(pages) - 1, max(-1, len(pages) - 1 - among_last), -1) if threads[n] != skip]
        projects = self._by_scope.setdefault(scope, {})
        if len(projects) > MAX_PAGE_PROJECTS:
            projects.clear()
        found: list[Page] = []
        for start in range(0, len(candidates), LATEST_BATCH):
            batch = candidates[start : start + LATEST_BATCH]
            unknown = [n for n in batch if ids[n] not in projects]
            projects.update((page.page_id, page.project) for page in pages.pick(unknown))
            wanted = [n for n in batch if project is None or projects[ids[n]] == project][: count - len(found)]
            found += [shown_page(page) for page in pages.pick(wanted)]
            if len(found) == count:
                break
        return found[::-1]

    def drop(self, scope: Scope) -> None:
        """Forget what is known of a scope's pages: they were erased or replaced."""
        self._by_scope.pop(scope, None)
