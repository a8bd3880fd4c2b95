"""MemoryService: the one API that the MCP tools, the command line and the tests call.

Each method resolves whose memory a call means and hands the work to the module that holds it:
retrieve (ranking and the <memory> block), remember (add_memory), facts, erasure, scrub,
import_export, status, flush, browse (what the dashboard and the command line read).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Collection, Iterable

from memory_mcp.base.settings import Settings
from memory_mcp.extraction.runner import UpdateRunner
from memory_mcp.memory.sessions import SessionView
from memory_mcp.models import (
    AddFactRequest,
    AddMemoryRequest,
    AddMemoryResult,
    DeleteFactRequest,
    ExportDocument,
    ExportRequest,
    FactChangeResult,
    FactsResult,
    FlushRequest,
    FlushResult,
    ForgetExchangeRequest,
    ForgetExchangeResult,
    ForgetRequest,
    ForgetResult,
    ImportRequest,
    ImportResult,
    Page,
    ProfileRequest,
    RetrieveMemoryRequest,
    RetrieveMemoryResult,
    ScoredPage,
    ScrubResult,
    SearchFactsRequest,
    StatusResult,
    UpdateFactRequest,
    UserProfileResult,
    UserSummary,
)
from memory_mcp.recall.embedders import open_embedder
from memory_mcp.recall.embedding_runner import EmbeddingRunner
from memory_mcp.recall.findings import Found
from memory_mcp.recall.index_upkeep import IdleIndexer
from memory_mcp.recall.scope_recall import PageRecall
from memory_mcp.recall.token_count import TokenCounter
from memory_mcp.service import browse, import_export, scopes
from memory_mcp.service import facts as fact_edits
from memory_mcp.service.admission import secrets_out
from memory_mcp.service.browse import PageProjects
from memory_mcp.service.erasure import Erasure
from memory_mcp.service.flush import analyse_pending
from memory_mcp.service.notes import extraction_on as server_extracts
from memory_mcp.service.profile import user_profile
from memory_mcp.service.remember import remember
from memory_mcp.service.retrieve import Retrieval
from memory_mcp.service.scrub import scrub_stored
from memory_mcp.service.status import StatusReport
from memory_mcp.service.vectors import embed_all_missing, vector_notifier
from memory_mcp.store import MemoryStore, Scope, open_store

# Hosts time out servers that answer `initialize` slowly: heavy imports wait until after it.
WARM_UP_DELAY_SECONDS = 2.0
# How long writes pause before the word index of what was written is brought up to date and saved.
INDEX_IDLE_SECONDS = 10.0


class MemoryService:
    """Stores exchanges per user, ranks them against queries, and serves the structured profile."""

    def __init__(self, settings: Settings, store: MemoryStore | None = None, short_lived: bool = False) -> None:
        """`short_lived`: a process that ends after one call (a hook) queues no background analysis
        of sessions in demand, which it would not live to run."""
        self.settings = settings
        self._owns_store = store is None
        self.store: MemoryStore = store if store is not None else open_store(settings)
        self._tokens = TokenCounter(settings.memory.token_counting)
        self._updates = UpdateRunner(settings, self.store, self.extraction_on)
        embedder = open_embedder(settings)
        # Vectors are computed by processes that live long enough to; a hook's queries still use them.
        self._embedding = None if embedder is None or short_lived else EmbeddingRunner(self.store, embedder)
        self._embed_soon = vector_notifier(self._embedding)
        self._recall = PageRecall(
            settings,
            self.store,
            on_hot=self._updates.analyse_soon if self.extraction_on and not short_lived else None,
            on_unembedded=None if self._embedding is None else self._embedding.notify,
        )
        # A hook's process ends at once: a hook that stored leaves the index to another (index_due).
        self._index_upkeep = None if short_lived else IdleIndexer(self._recall.keep_index, INDEX_IDLE_SECONDS)
        self._retrieval = Retrieval(settings, self.store, self._recall, self._tokens, embedder)
        self._page_projects = PageProjects()  # see latest_exchanges
        self._erasure = Erasure(settings, self.store, self._updates, self._recall, self._page_projects)
        self._status = StatusReport(settings, self.store, self._updates, self._embedding, self._recall, self._tokens)

    @property
    def tokens(self) -> TokenCounter:
        """The counter every budget here is measured with."""
        return self._tokens

    @property
    def extraction_on(self) -> bool:
        return server_extracts(self.settings)

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the background updater and, off the caller's thread, resume work left pending;
        and, once the host has had time to finish its handshake, load what the first recall needs."""
        warm_up = threading.Timer(WARM_UP_DELAY_SECONDS, self.warm_up)
        warm_up.daemon = True
        warm_up.start()
        self._updates.start()
        if self._embedding is not None:
            self._embedding.start()

    def warm_up(self, user_id: str | None = None, agent_name: str | None = None) -> None:
        """Load what the first retrieve_memory needs, so that it does not pay for it. By default
        the default user's: on a one-person desktop that is everyone."""
        self._retrieval.warm_up(self.resolve_scope(user_id, agent_name))

    def read_ahead(self, user_id: str | None = None, agent_name: str | None = None) -> None:
        """Start reading what a `find` for the scope will need (its saved word index, the token
        encoding) on threads of their own, for a caller with other work to do first: a session's
        first prompt hook builds its digest meanwhile."""
        self._retrieval.read_ahead(self.resolve_scope(user_id, agent_name))

    def close(self) -> int:
        """Save unsaved session visits, and give pending updates `shutdown_flush_seconds` to
        finish; return how many were left. The word index of what this process wrote is brought up
        to date first, so that the next start finds it saved."""
        if self._index_upkeep is not None:
            self._index_upkeep.close()
        self._recall.close()
        if self._embedding is not None:
            self._embedding.shutdown(self.settings.memory.shutdown_flush_seconds)
        left = self._updates.shutdown()
        if self._owns_store:
            self.store.close()
        return left

    # --- tools ----------------------------------------------------------------------------

    def exchanges_arrived(self, user_id: str, agent_name: str | None, thread_id: str | None) -> None:
        """Exchanges were stored otherwise than by add_memory (a hook's, over HTTP): their thread is
        analysed as an add's would be, once it has been quiet."""
        self._updates.added(Scope(user_id, agent_name), thread_id or "")

    def add_memory(self, request: AddMemoryRequest) -> AddMemoryResult:
        """Store one exchange verbatim, with what the host learned from it applied to structured
        memory; all of it is on disk (fsync'd) when this returns."""
        scope = self.resolve_scope(request.user_id, request.agent_name)
        result = remember(self.settings, self.store, scope, request, self._updates, self._embed_soon)
        self._wrote(scope, 1)
        return result

    def retrieve_memory(self, request: RetrieveMemoryRequest) -> RetrieveMemoryResult:
        """Recent exchanges, the older ones most relevant to the query, what is known, and all of
        it as a <memory> block within the token budget. Exchanges erased while it read them: it
        reads again what is kept (a few times at most, if erases keep coming)."""
        found = self.find(request)
        return found.result(self._retrieval.memory_block(found, request.max_tokens))

    def find(
        self, request: RetrieveMemoryRequest, *, for_injection: bool = False, skip_pages: Collection[str] = ()
    ) -> Found:
        """What memory holds for the request, ranked, with what the block for a model may show.

        The ranking (`retrieved_pages`) is the same whoever asks. What a model is shown is less:
        only exchanges and facts that clear relevance's floors, none of the conversation the
        request names (`thread_id`: the model has it), another project's exchanges only when
        clearly relevant and labelled. `for_injection` (a host's hook): the conversation's own
        exchanges and `skip_pages` (shown to it before) are not even searched, and no recent
        window is read, so the ranking holds only what may be shown."""
        scope = self.resolve_scope(request.user_id, request.agent_name)
        return self._retrieval.find(scope, request, for_injection, skip_pages)

    def get_user_profile(self, request: ProfileRequest) -> UserProfileResult:
        """The structured memory of a user: profile sections, and facts or knowledge when asked."""
        scope = self.resolve_scope(request.user_id, request.agent_name)
        return user_profile(self.settings, self.store, scope, request)

    def flush_memory(self, request: FlushRequest) -> FlushResult:
        """Analyse everything pending for the scope now (and, with retry_failed, what was set
        aside), and say what changed."""
        scope = self.resolve_scope(request.user_id, request.agent_name)
        return analyse_pending(self.settings, self.store, self._updates, scope, request.retry_failed)

    # --- users own their memory -----------------------------------------------------------

    def search_facts(self, request: SearchFactsRequest) -> FactsResult:
        scope = self.resolve_scope(request.user_id, request.agent_name)

        relevance_of = functools.partial(self._retrieval.fact_relevance, scope, request.query)
        return fact_edits.search_facts(self.store, scope, request, self.settings, relevance_of)

    def add_fact(self, request: AddFactRequest) -> FactChangeResult:
        request = secrets_out(self.settings, request)
        scope = self.resolve_scope(request.user_id, request.agent_name)
        result = fact_edits.add_fact(self.store, scope, request, self.settings)
        self._embed_soon(scope)
        return result

    def update_fact(self, request: UpdateFactRequest) -> FactChangeResult:
        request = secrets_out(self.settings, request)
        scope = self.resolve_scope(request.user_id, request.agent_name)
        scopes.require_stored(self.store, scope)  # a fact of nobody: say so, and create nothing
        result = fact_edits.update_fact(self.store, scope, request, self.settings)
        self._embed_soon(scope)
        return result

    def delete_fact(self, request: DeleteFactRequest) -> FactChangeResult:
        scope = self.resolve_scope(request.user_id, request.agent_name)
        scopes.require_stored(self.store, scope)
        result = fact_edits.delete_fact(self.store, scope, request)
        self._embed_soon(scope)  # its vector goes too
        return result

    def export_memory(self, request: ExportRequest) -> ExportDocument:
        return import_export.export_memory(self.store, self.resolve_scope(request.user_id, request.agent_name))

    def import_memory(self, request: ImportRequest) -> ImportResult:
        """Validate the whole document first, every exchange by add_memory's rules; then write
        (after erasing, with mode 'replace')."""
        result = import_export.import_memory(self.settings, self.store, request, self._erasure, self._embed_soon)
        self._wrote(Scope(result.user_id, result.agent_name), result.pages_added)
        return result

    def bulk_loaded(self) -> None:
        """Many exchanges were just imported: the store prepares for reading them back."""
        self.store.bulk_loaded()

    def index_due(self, user_id: str, agent_name: str | None, added: int) -> bool:
        """Whether, `added` exchanges just stored by a process that holds no word index of them (a
        hook's), one should be built and saved for the next start (see hooks.index_when_due)."""
        return self._recall.index_due(Scope(user_id, agent_name), added)

    def _wrote(self, scope: Scope, added: int) -> None:
        if self._index_upkeep is not None:
            self._index_upkeep.wrote(scope, added)

    def preview_import(self, request: ImportRequest) -> ImportResult:
        """What import_memory would do with this request, checked the same way; writes nothing."""
        return import_export.preview_import(self.settings, self.store, request)

    def forget(self, request: ForgetRequest) -> ForgetResult:
        """Erase everything stored for the scope; with no agent_name, the user's agents too."""
        scope = self.resolve_scope(request.user_id, request.agent_name)
        return self._erasure.forget(scope, request.confirm)

    def forget_exchange(self, request: ForgetExchangeRequest) -> ForgetExchangeResult:
        """Erase one exchange for good (what was learned from it stays: facts are erased one by one)."""
        scope = self.resolve_scope(request.user_id, request.agent_name)
        return self._erasure.forget_exchange(scope, request.exchange_id)

    def scrub(self, user_id: str | None = None) -> ScrubResult:
        """Apply redaction to what is already stored (a user's memory and their agents', or
        everyone's), as durably as forget. Whatever memory.redaction says: this is asked for by name."""
        return scrub_stored(self.store, user_id, self._embed_soon)

    def memory_status(self, only_user: str | None = None) -> StatusResult:
        """Storage, extraction and per-user counts; with `only_user`, that user's alone (an
        authenticated caller sees nothing of the others)."""
        return self._status.status(only_user)

    def scope_summary(self, user_id: str, agent_name: str | None = None) -> UserSummary:
        """The counts of one memory alone: a user's own (without their agents'), or one agent's."""
        return self._status.scope_summary(self.resolve_scope(user_id, agent_name))

    def sessions(self, user_id: str, agent_name: str | None = None) -> list[SessionView]:
        """The memory's sessions, hottest first: which ones everyday retrieval still searches."""
        return browse.scope_sessions(self.store, self.settings, self.resolve_scope(user_id, agent_name))

    def embed_missing(
        self, user_id: str, agent_name: str | None, progress: Callable[[Scope, int, int], None] | None = None
    ) -> int:
        """Compute now the vectors the user's exchanges lack (their agents' too, unless one is
        named); return how many were stored. Stopped part-way, it resumes where it stopped."""
        return embed_all_missing(self.store, self._embedding, self.resolve_scope(user_id, agent_name), progress)

    # --- what people read: the dashboard and the command line ------------------------------

    def is_stored(self, user_id: str | None, agent_name: str | None = None) -> bool:
        """Whether anything is stored for the user (or that agent of theirs)."""
        return scopes.is_stored(self.store, self.resolve_scope(user_id, agent_name))

    def search_exchanges(self, request: RetrieveMemoryRequest) -> list[ScoredPage]:
        """Every stored exchange ranked for the query, recent and archived ones included; for a
        person searching their memory, so it counts no visits."""
        scope = self.resolve_scope(request.user_id, request.agent_name)
        return browse.search_exchanges(self.store, self._recall, scope, request)

    def latest_pages(self, user_id: str, agent_name: str | None, count: int) -> list[Page]:
        """The last `count` exchanges stored for a user (or agent), in the order they were added."""
        return browse.latest_pages(self.store, self.resolve_scope(user_id, agent_name), count)

    def latest_exchanges(
        self,
        user_id: str | None,
        agent_name: str | None,
        count: int,
        *,
        project: str | None = None,
        skip_thread: str | None = None,
        among_last: int = 1000,
    ) -> list[Page]:
        """The newest `count` exchanges of `project` (of any, with None) outside thread
        `skip_thread`, oldest first, looked for among the last `among_last` added only (a session's
        digest must be quick however long the history). Which project each page looked at belongs
        to is kept, so that a process that asks again (a hook helper) reads only what it shows."""
        scope = self.resolve_scope(user_id, agent_name)
        return self._page_projects.latest(self.store, scope, count, project, skip_thread, among_last)

    def find_pages(
        self, user_id: str, agent_name: str | None, keep: Callable[[Page], bool], limit: int
    ) -> tuple[list[Page], int]:
        """The newest `limit` exchanges `keep` accepts, newest first, and how many it accepts in
        all; only those returned are copied out of the log (a browse at 10k is then milliseconds)."""
        return browse.find_pages(self.store, self.resolve_scope(user_id, agent_name), keep, limit)

    def exchange_times(self, user_id: str, agent_name: str | None) -> list[str]:
        """When each exchange was said, in the order they were added."""
        return browse.exchange_times(self.store, self.resolve_scope(user_id, agent_name))

    def archived_sessions(self, user_id: str, agent_name: str | None) -> frozenset[str]:
        """The sessions everyday retrieval no longer searches (named as sessions.session_of names them)."""
        return browse.archived(self.store, self.resolve_scope(user_id, agent_name))

    def list_users(self) -> list[str]:
        return self.store.list_users()

    @property
    def location(self) -> str:
        """Where memory is kept, as it may be shown (a database without its password)."""
        return self.store.location

    def check_ready(self) -> None:
        """Raise StorageError if memory cannot be stored right now (what a health check asks)."""
        self.store.check_ready()

    def resolve_scope(self, user_id: str | None, agent_name: str | None) -> Scope:
        """Whose memory a call means: an id left out (or empty) is the configured default."""
        return scopes.resolve_scope(self.settings, user_id, agent_name)


def save_word_indexes(settings: Settings, scopes: Iterable[tuple[str, str | None]]) -> None:
    """Build and save the word index of each (user, agent) of `scopes`, for memory written without
    indexing (a migration, a Stop hook's exchanges): the next first recall reads it instead of
    tokenising every exchange (seconds at 30,000)."""
    service = MemoryService(settings, short_lived=True)
    try:
        for user_id, agent_name in scopes:
            service.warm_up(user_id, agent_name)  # indexes the log, saving the index
    finally:
        service.close()  # waits for the saves
