"""What memory_status reports: storage, extraction, and each user's counts."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from memory_mcp import __version__
from memory_mcp.base.errors import StorageError
from memory_mcp.base.settings import Settings
from memory_mcp.extraction.runner import UpdateRunner
from memory_mcp.extraction.updater import pending_count
from memory_mcp.memory.facts import current
from memory_mcp.models import MemoryDocument, StatusResult, UserSummary
from memory_mcp.recall.embedding_runner import EmbeddingRunner
from memory_mcp.recall.scope_recall import PageRecall
from memory_mcp.recall.token_count import TokenCounter
from memory_mcp.service.notes import extraction_mode, extraction_notes
from memory_mcp.service.scopes import require_stored
from memory_mcp.store import MemoryStore, Scope


class StatusReport:
    """Reads the counts of stored memory and the state of the work behind it (updates queued,
    vectors missing, scopes cached), as memory_status and the dashboard show them."""

    def __init__(
        self,
        settings: Settings,
        store: MemoryStore,
        updates: UpdateRunner,
        embedding: EmbeddingRunner | None,
        recall: PageRecall,
        tokens: TokenCounter,
    ) -> None:
        self._settings = settings
        self._store = store
        self._updates = updates
        self._embedding = embedding
        self._recall = recall
        self._tokens = tokens

    def status(self, only_user: str | None) -> StatusResult:
        """Storage, extraction and per-user counts; with `only_user`, that user's alone (an
        authenticated caller sees nothing of the others, not even their ids, nor where the
        instance keeps memory or how much it holds). A user whose files are damaged is listed with
        the reason, and the others as usual."""
        listed = self._store.list_users()
        users = []
        documents: list[MemoryDocument] = []
        for user_id in listed if only_user is None else [user for user in listed if user == only_user]:
            try:
                summary, scope_documents = self._summary(user_id)
            except StorageError as exc:
                summary, scope_documents = UserSummary(user_id=user_id, problem=str(exc)), []
            users.append(summary)
            documents += scope_documents
        errors = self._updates.last_errors(only_user)
        notes = extraction_notes(self._settings)
        try:
            self._store.check_ready()
            storage_ok = True
        except StorageError as exc:
            storage_ok = False
            notes.insert(0, f"Memory cannot be stored right now: {exc}")
        damaged = [user.user_id for user in users if user.problem]
        if damaged:
            notes.append(f"Damaged memory (its calls fail until it is repaired): {', '.join(damaged)}; see `problem`.")
        settings = self._settings
        return StatusResult(
            version=__version__,
            data_dir=self._store.location if only_user is None else None,
            storage_ok=storage_ok,
            users=users,
            llm_configured=settings.llm_configured,
            extraction=extraction_mode(settings, *documents),
            llm_model=settings.llm_model if settings.llm_configured else None,
            llm_base_url=_without_credentials(settings.openai_base_url),
            token_counter=self._tokens.method,
            queued_updates=self._updates.queued(only_user),
            scopes_in_memory=self._recall.cached() if only_user is None else 0,
            last_update_errors=errors,
            notes=notes,
        )

    def scope_summary(self, scope: Scope) -> UserSummary:
        """The counts of one memory alone: a user's own (without their agents'), or one agent's."""
        require_stored(self._store, scope)
        return self._counts(scope.user_id, [scope], agents=[])[0]

    def _summary(self, user_id: str) -> tuple[UserSummary, list[MemoryDocument]]:
        """A user's counts over their scopes, and their documents; StorageError if one is damaged."""
        agents = self._store.list_agents(user_id)
        return self._counts(user_id, [Scope(user_id), *(Scope(user_id, agent) for agent in agents)], agents)

    def _counts(self, user_id: str, scopes: list[Scope], agents: list[str]) -> tuple[UserSummary, list[MemoryDocument]]:
        """Counts summed over `scopes`, and their documents; StorageError if one is damaged."""
        store, embedding = self._store, self._embedding
        documents = [store.read_document(scope) for scope in scopes]
        summary = UserSummary(
            user_id=user_id,
            agents=agents,
            pages=sum(store.page_count(scope) for scope in scopes),  # an unreadable record raises
            facts=sum(len(current(document.facts)) for document in documents),
            pending_pages=sum(pending_count(store, scope) for scope in scopes),
            set_aside_pages=sum(document.analysis.set_aside_pages() for document in documents),
            pages_without_vectors=None if embedding is None else sum(len(embedding.missing(scope)) for scope in scopes),
        )
        return summary, documents


def _without_credentials(url: str | None) -> str | None:
    """The endpoint as it may be shown: no user, password or query string (which may hold a key)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
