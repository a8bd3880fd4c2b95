"""MemoryService: the one API that the MCP tools, the command line and the tests call."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from memory_mcp import __version__
from memory_mcp.base.clock import now, utc_now
from memory_mcp.base.errors import InvalidInput, LogReplaced, NotFound, StorageError
from memory_mcp.base.ids import new_id
from memory_mcp.base.settings import Settings
from memory_mcp.base.wording import plural
from memory_mcp.extraction import host_facts
from memory_mcp.extraction.retention import document_without
from memory_mcp.extraction.runner import UpdateRunner
from memory_mcp.extraction.updater import pending_count
from memory_mcp.memory.facts import current
from memory_mcp.memory.progress import thread_key
from memory_mcp.memory.redaction import ModelT, without_secrets
from memory_mcp.memory.sessions import SessionView, archived_sessions, session_views
from memory_mcp.models import (
    AddFactRequest,
    AddMemoryRequest,
    AddMemoryResult,
    DeleteFactRequest,
    ExportDocument,
    ExportRequest,
    ExtractionMode,
    Fact,
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
    KnowledgeEntry,
    MemoryDocument,
    Page,
    ProfileRequest,
    RetrieveMemoryRequest,
    RetrieveMemoryResult,
    ScoredFact,
    ScoredKnowledge,
    ScoredPage,
    ScrubResult,
    SearchFactsRequest,
    StatusResult,
    StoredPage,
    UpdateFactRequest,
    UserProfileResult,
    UserSummary,
)
from memory_mcp.models.stored import without_nul
from memory_mcp.portability import documents
from memory_mcp.portability.documents import MergeCounts, parse_import
from memory_mcp.recall.embeddings import (
    MIN_FACTS_COMPARED,
    EmbeddingRunner,
    fact_vector_id,
    open_embedder,
    stored_model,
)
from memory_mcp.recall.findings import Found, prefer_project
from memory_mcp.recall.memory_block import MemoryContext, build_context
from memory_mcp.recall.ranking import LexicalIndex, entry_similarities, rank_by_similarity_and_confidence
from memory_mcp.recall.relevance import worth_recalling
from memory_mcp.recall.scope_recall import PageRecall, time_window
from memory_mcp.recall.token_count import TokenCounter
from memory_mcp.service import facts as fact_edits
from memory_mcp.service.session_ledger import erase_ledgers
from memory_mcp.store import MemoryStore, Scope, open_store
from memory_mcp.store.page_sequence import PageSequence

log = logging.getLogger(__name__)

ScoredT = TypeVar("ScoredT", ScoredFact, ScoredKnowledge)
_SECTION_NAMES = {
    "header": "header lines",
    "user": "profile sections",
    "history": "history sections",
    "facts": "facts",
    "recent": "recent exchanges",
    "earlier": "earlier exchanges",
}

HOST_EXTRACTION_NOTE = (
    "This server extracts no structured memory itself (no LLM endpoint is configured): the profile and facts "
    "grow from the `facts` and `profile` the host model passes to add_memory. To have the server extract them, "
    "set openai_base_url (or OPENAI_BASE_URL) and, if the endpoint needs one, openai_api_key (or OPENAI_API_KEY)."
)
# Hosts time out servers that answer `initialize` slowly: heavy imports wait until after it.
WARM_UP_DELAY_SECONDS = 2.0
ERASE_WAIT_SECONDS = 30.0  # for an update under way, before erasing an exchange says busy
RETRIEVE_ATTEMPTS = 3  # reads of the log when exchanges keep being erased under a retrieve
LATEST_BATCH = 32  # pages read back at a time when looking for the latest of a project
MAX_PAGE_PROJECTS = 100_000  # page -> project kept per scope for that (~10 MB at most)
NO_MODEL_NOTE = (
    "An LLM endpoint is set but llm_model (or MEMORY_MCP_LLM_MODEL) is not: this server extracts nothing until it "
    "names the model to ask (none is guessed); meanwhile the profile and facts grow from what the host model "
    "passes to add_memory."
)
EXTRACTION_DISABLED_NOTE = (
    "The server's own extraction is disabled (memory.enabled is false): the profile and facts grow only from "
    "what the host model passes to add_memory (`facts`, `profile`) and from add_fact."
)
EMPTY_PROFILE_NOTE = "Nothing is known about this user yet: the profile fills in as conversations are remembered."
EMPTY_PROFILE_HOST_NOTE = (
    "Nothing is known about this user yet, and nothing will fill the profile by itself: pass what you learn "
    "to add_memory as `facts` and `profile` (or use add_fact), or configure an LLM endpoint for the server."
)


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
        self._embedder = open_embedder(settings)
        self._vector_model = stored_model(self._embedder.model) if self._embedder is not None else ""
        # Vectors are computed by processes that live long enough to; a hook's queries still use them.
        self._embedding = None if self._embedder is None or short_lived else EmbeddingRunner(self.store, self._embedder)
        self._page_projects: dict[Scope, dict[str, str | None]] = {}  # see latest_exchanges
        self._recall = PageRecall(
            settings,
            self.store,
            on_hot=self._updates.analyse_soon if self.extraction_on and not short_lived else None,
            on_unembedded=None if self._embedding is None else self._embedding.notify,
        )

    @property
    def tokens(self) -> TokenCounter:
        """The counter every budget here is measured with."""
        return self._tokens

    @property
    def extraction_on(self) -> bool:
        return self.settings.memory.enabled and self.settings.llm_configured

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
        """Import numpy, load the token encoding and the scope's index (a fraction of a second
        with a saved index, seconds without one) so that the first retrieve_memory does not pay for it. By default
        the default user's: on a one-person desktop that is everyone."""
        try:
            LexicalIndex().search("warm up", 1)
            self._tokens.count("warm up")
            scope = self.resolve_scope(user_id, agent_name)
            self._recall.cache(scope, self.store.read_pages(scope))
        except Exception:  # only a head start: the first real call loads whatever failed here
            log.debug("warm-up did not complete", exc_info=True)

    def close(self) -> int:
        """Save unsaved session visits, and give pending updates `shutdown_flush_seconds` to
        finish; return how many were left."""
        self._recall.close()
        if self._embedding is not None:
            self._embedding.shutdown(self.settings.memory.shutdown_flush_seconds)
        left = self._updates.shutdown()
        if self._owns_store:
            self.store.close()
        return left

    # --- tools ----------------------------------------------------------------------------

    def add_memory(self, request: AddMemoryRequest) -> AddMemoryResult:
        """Store one exchange verbatim, with what the host learned from it applied to structured
        memory; all of it is on disk (fsync'd) when this returns."""
        self._check_sizes(request)
        request = self._secrets_out(request)
        scope = self.resolve_scope(request.user_id, request.agent_name)
        host = request.host_memory
        page = StoredPage(
            page_id=new_id("page"),
            user_input=request.user_input,
            agent_response=request.agent_response,
            timestamp=request.timestamp or utc_now(),
            meta_data=request.meta_data,
            thread_id=request.thread_id,
            project=request.project,
            host_memory=host,
        )
        if host is not None:
            host_facts.check(self.store.read_document(scope), host, self.settings, scope)  # before any write
        self.store.append_page(scope, page)
        structured, deferred = None, None
        if host is not None:
            try:
                structured = host_facts.outcome(
                    host_facts.apply_pending(self.store, scope, self.settings).get(page.page_id)
                )
            except StorageError as exc:
                # The exchange is stored, and what the host learned with it (one record): the next
                # add or start applies that. Saying "nothing was written" would be false.
                deferred = exc
        self._updates.added(scope, thread_key(page))
        self._embed_soon(scope)
        message = "Remembered. retrieve_memory will find this exchange from now on."
        if deferred is not None:
            message += f" Its facts and profile are stored with it and applied at the next add or start ({deferred})."
        if structured is not None:
            message += (
                f" Structured memory: {plural(len(structured.facts_added), 'fact')} added, {len(structured.facts_skipped)} "
                f"skipped, {len(structured.facts_superseded)} superseded, "
                f"{plural(len(structured.sections_updated), 'profile section')} updated."
            )
        return AddMemoryResult(
            message=message,
            page_id=page.page_id,
            user_id=scope.user_id,
            agent_name=scope.agent_name,
            thread_id=page.thread_id,
            timestamp=page.timestamp,
            structured=structured,
        )

    def retrieve_memory(self, request: RetrieveMemoryRequest) -> RetrieveMemoryResult:
        """Recent exchanges, the older ones most relevant to the query, what is known, and all of
        it as a <memory> block within the token budget. Exchanges erased while it read them: it
        reads again what is kept (a few times at most, if erases keep coming)."""
        found = self.find(request)
        block = self._memory_block(found, request.max_tokens)
        return found.result(block)

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
        for _ in range(RETRIEVE_ATTEMPTS - 1):
            with contextlib.suppress(LogReplaced):
                return self._find(scope, request, for_injection, skip_pages)
        return self._find(scope, request, for_injection, skip_pages)

    def _find(
        self, scope: Scope, request: RetrieveMemoryRequest, for_injection: bool, skip_pages: Collection[str]
    ) -> Found:
        self._recall.read_index_ahead(scope)  # a first retrieve: the saved index comes with the log
        page_log = self.store.read_pages(scope)
        # The log may grow while we work (another thread adds): fix its length once.
        pages = page_log.pages[: len(page_log.pages)]
        within = time_window(pages, request.since, request.until)
        recent = [] if for_injection else self._recall.recent(scope, page_log, len(pages), within)
        excluded = recent + (_positions_of(pages, request.thread_id, skip_pages) if for_injection else [])
        document = self.store.read_document(scope)
        held = current(document.facts)
        worth = worth_recalling(request.query)
        wanted = len(pages) > len(excluded) or len(held) >= MIN_FACTS_COMPARED
        query_vector, vector_note = self._query_vector(request.query) if wanted and worth else (None, None)
        # With a project, a wider pool: the current project's exchanges are preferred within it.
        pool = (
            request if request.project is None else request.model_copy(update={"max_results": 2 * request.max_results})
        )
        hits = self._recall.search(
            scope,
            page_log,
            document,
            pool,
            len(pages),
            exclude=excluded,
            within=within,
            query_vector=query_vector,
            vector_model=self._vector_model,
        )
        shown = pages.pick([hit.position for hit in hits] + recent)  # read together: one query, one file read
        ranked = prefer_project(list(zip(shown, hits)), request.project)
        ranked = ranked[: request.max_results]
        short_term = [Page(**_page_fields(page)) for page in shown[len(hits) :]]
        about = f"{request.query}\n{request.current_context}".strip()
        relevance = None
        if query_vector is not None:
            contents = [fact.content for fact in held]
            relevance = self._recall.fact_relevance(scope, page_log, contents, query_vector, self._vector_model)
        facts, similarity = self._rank_entries(held, about, ScoredFact, relevance)
        knowledge, _ = self._rank_entries(document.assistantKnowledge, about, ScoredKnowledge)
        notes = self._notes(document) + ([vector_note] if vector_note else [])
        return Found(
            request=request,
            scope=scope,
            document=document,
            recent=short_term,
            ranked=[(ScoredPage(**_page_fields(page), score=round(score, 4)), hit) for page, hit, score in ranked],
            facts=facts,
            fact_similarity=similarity,
            knowledge=knowledge,
            worth_recalling=worth,
            notes=notes,
        )

    def _memory_block(self, found: Found, max_tokens: int | None) -> MemoryContext:
        """The <memory> block of what `found` may show a model, within `max_tokens` (default
        memory.max_injection_tokens); what did not fit is said in `found.notes`."""
        memory = self.settings.memory
        if not memory.injection_enabled:
            found.notes.append("Context injection is off (memory.injection_enabled is false): context is empty.")
            return EMPTY_BLOCK
        budget = max_tokens or memory.max_injection_tokens
        request = found.request
        built = build_context(
            found.document,
            found.facts_to_show(),
            found.recent_to_show(),
            found.earlier_to_show(),
            budget,
            self._tokens,
            request.relationship_with_user,
            request.style_hint,
            labels=found.labels(),
        )
        if built.left_out:
            parts = ", ".join(f"{count} {_SECTION_NAMES[section]}" for section, count in built.left_out.items())
            found.notes.append(
                f"To fit max_tokens={budget}, the context leaves out {parts}; raise max_tokens to include them."
            )
        if built.shortened:
            found.notes.append(
                f"To fit max_tokens={budget}, {built.shortened} exchanges in the context are shortened (…)."
            )
        return built

    def get_user_profile(self, request: ProfileRequest) -> UserProfileResult:
        """The structured memory of a user: profile sections, and facts or knowledge when asked."""
        scope = self.resolve_scope(request.user_id, request.agent_name)
        document = self.store.read_document(scope)
        holding = current(document.facts)
        facts = sorted(holding, key=lambda fact: -fact.confidence) if request.include_knowledge else None
        knowledge = list(document.assistantKnowledge) if request.include_assistant_knowledge else None
        return UserProfileResult(
            user_id=scope.user_id,
            agent_name=scope.agent_name,
            user=document.user,
            history=document.history,
            facts=facts,
            assistant_knowledge=knowledge,
            lastUpdated=document.lastUpdated,
            notes=self._notes(document),
        )

    def flush_memory(self, request: FlushRequest) -> FlushResult:
        """Analyse everything pending for the scope now (and, with retry_failed, what was set
        aside), and say what changed."""
        scope = self.resolve_scope(request.user_id, request.agent_name)
        report = self._updates.flush(scope, request.retry_failed)
        pending = pending_count(self.store, scope)
        document = self.store.read_document(scope)
        notes = self._extraction_notes()
        if pending and self.extraction_on:
            notes.append(
                f"{plural(pending, 'exchange is', 'exchanges are')} still pending; they are retried automatically."
            )
        notes += _set_aside_notes(document)
        return FlushResult(
            user_id=scope.user_id,
            agent_name=scope.agent_name,
            extraction=self._mode(document),
            pages_analysed=report.pages_analysed,
            llm_calls=report.llm_calls,
            facts_added=[fact.content for fact in report.facts_added],
            facts_removed=report.facts_removed,
            sections_updated=report.sections_updated,
            assistant_knowledge_added=report.knowledge_added,
            pending_pages=pending,
            set_aside_pages=document.analysis.set_aside_pages(),
            errors=report.errors,
            notes=notes,
        )

    # --- users own their memory -----------------------------------------------------------

    def search_facts(self, request: SearchFactsRequest) -> FactsResult:
        scope = self.resolve_scope(request.user_id, request.agent_name)

        def relevance_of(contents: Sequence[str]) -> Any:
            query_vector, _ = self._query_vector(request.query) if len(contents) >= MIN_FACTS_COMPARED else (None, None)
            if query_vector is None:
                return None
            page_log = self.store.read_pages(scope)
            return self._recall.fact_relevance(scope, page_log, contents, query_vector, self._vector_model)

        return fact_edits.search_facts(self.store, scope, request, self.settings, relevance_of)

    def add_fact(self, request: AddFactRequest) -> FactChangeResult:
        request = self._secrets_out(request)
        scope = self.resolve_scope(request.user_id, request.agent_name)
        result = fact_edits.add_fact(self.store, scope, request, self.settings)
        self._embed_soon(scope)
        return result

    def update_fact(self, request: UpdateFactRequest) -> FactChangeResult:
        request = self._secrets_out(request)
        scope = self.resolve_scope(request.user_id, request.agent_name)
        self._require_stored(scope)  # a fact of nobody: say so, and create nothing
        result = fact_edits.update_fact(self.store, scope, request, self.settings)
        self._embed_soon(scope)
        return result

    def delete_fact(self, request: DeleteFactRequest) -> FactChangeResult:
        scope = self.resolve_scope(request.user_id, request.agent_name)
        self._require_stored(scope)
        result = fact_edits.delete_fact(self.store, scope, request)
        self._embed_soon(scope)  # its vector goes too
        return result

    def export_memory(self, request: ExportRequest) -> ExportDocument:
        scope = self.resolve_scope(request.user_id, request.agent_name)
        self._require_stored(scope)
        agents = self.store.list_agents(scope.user_id) if scope.agent_name is None else []
        return documents.export_scope(self.store, scope, agents)

    def import_memory(self, request: ImportRequest) -> ImportResult:
        """Validate the whole document first, every exchange by add_memory's rules; then write
        (after erasing, with mode 'replace')."""
        document, scope, parts = self._import_parts(request)
        counts = MergeCounts()
        max_facts = self.settings.memory.max_facts
        if request.mode == "replace":
            # Written whole aside, then swapped in at once: a crash leaves the old memory or the new.
            held = [(part_scope, *documents.capped(memory, max_facts), pages) for part_scope, memory, pages in parts]
            for _, memory, trimmed, pages in held:
                counts.add(MergeCounts(pages_added=len(pages), facts_added=len(memory.facts), facts_trimmed=trimmed))
            affected = self._let_go(scope)
            self.store.replace(scope, [(part_scope, memory, pages) for part_scope, memory, _, pages in held])
            self._recall.drop(affected)
        else:
            for part_scope, memory, pages in parts:
                counts.add(documents.import_scope(self.store, part_scope, memory, pages, max_facts))
        for part_scope, _, _ in parts:
            self._embed_soon(part_scope)
        return documents.import_result(
            document.model_copy(update={"agent_name": scope.agent_name}), request.mode, counts
        )

    def preview_import(self, request: ImportRequest) -> ImportResult:
        """What import_memory would do with this request, checked the same way; writes nothing."""
        document, scope, parts = self._import_parts(request)
        replace = request.mode == "replace"
        counts = MergeCounts()
        for part_scope, memory, pages in parts:
            counts.add(
                documents.planned_import(self.store, part_scope, memory, pages, replace, self.settings.memory.max_facts)
            )
        return documents.import_result(
            document.model_copy(update={"agent_name": scope.agent_name}), request.mode, counts, done=False
        )

    def _import_parts(
        self, request: ImportRequest
    ) -> tuple[ExportDocument, Scope, list[tuple[Scope, MemoryDocument, list[Page]]]]:
        """The import's document, its scope, and each scope's memory and admitted pages; InvalidInput
        for anything that could not be written."""
        document = parse_import(request.data, request.user_id, self.settings.user_id)
        scope = Scope(document.user_id, document.agent_name)
        named = [("", scope, document.memory, document.pages)] + [
            (f"agents.{name}.", Scope(document.user_id, name), agent.memory, agent.pages)
            for name, agent in document.agents.items()
        ]
        parts = []
        for where, part_scope, memory, pages in named:
            documents.check_imported(where, memory, pages)
            admitted = self._admitted(pages)
            try:  # what cannot be written must fail now, before anything is erased
                clean = self._secrets_out(memory)
                _refuse_nul(f"{where}memory", clean.model_dump(mode="json"))
                clean_pages = [self._secrets_out(page) for page in admitted]
                clean.model_dump_json()
            except ValueError as exc:
                raise InvalidInput(f"data cannot be stored ({exc}); nothing was imported") from None
            parts.append((part_scope, clean, clean_pages))
        return document, scope, parts

    def _admitted(self, pages: list[Page]) -> list[Page]:
        """Imported exchanges pass the rules add_memory applies (sizes, meta_data, thread ids,
        valid text), and are stored with timestamps in the one stored form."""
        admitted = []
        for number, page in enumerate(pages):
            fields = page.model_dump(exclude={"page_id"})
            try:
                request = AddMemoryRequest.build(**fields)
                self._check_sizes(request)
            except InvalidInput as exc:
                raise InvalidInput(f"pages[{number}] ({page.page_id}): {exc}; nothing was imported") from None
            admitted.append(page.model_copy(update={"timestamp": request.timestamp}))
        return admitted

    def forget(self, request: ForgetRequest) -> ForgetResult:
        """Erase everything stored for the scope; with no agent_name, the user's agents too."""
        scope = self.resolve_scope(request.user_id, request.agent_name)
        if request.confirm != scope.user_id:
            raise InvalidInput(f"confirm must equal the user_id ({scope.user_id!r}) to erase that user's memory")
        self._require_stored(scope)
        scopes = self._with_agents(scope)
        pages = sum(len(self.store.read_pages(each).pages) for each in scopes)
        facts = sum(len(self.store.read_document(each).facts) for each in scopes)
        self._erase(scope)
        return ForgetResult(
            user_id=scope.user_id,
            agent_name=scope.agent_name,
            removed_pages=pages,
            removed_facts=facts,
            message=f"Erased all memory of {scope.describe()}{' and its agents' if scope.agent_name is None else ''}.",
        )

    def forget_exchange(self, request: ForgetExchangeRequest) -> ForgetExchangeResult:
        """Erase one exchange for good: from the log, its vectors, the word index and the sessions'
        counts, in one step a crash cannot leave half done. What was learned from it stays (facts
        are erased one by one). An update under way is waited for, as it reads the exchanges by
        their positions."""
        scope = self.resolve_scope(request.user_id, request.agent_name)
        self._require_stored(scope)
        with self.store.exclusive_updates(scope, wait=ERASE_WAIT_SECONDS) as acquired:
            if not acquired:
                raise StorageError(
                    f"the memory of {scope.describe()} is being updated (an LLM call may take a minute): "
                    "nothing was erased; try again shortly"
                )
            pages = self.store.read_pages(scope).pages
            if request.exchange_id not in pages.ids:
                raise NotFound(f"no exchange {request.exchange_id!r} in the memory of {scope.describe()}")
            self.store.erase_pages(
                scope, [request.exchange_id], lambda document, positions: document_without(document, pages, positions)
            )
        self._page_projects.pop(scope, None)
        return ForgetExchangeResult(
            user_id=scope.user_id,
            agent_name=scope.agent_name,
            exchange_id=request.exchange_id,
            message=f"Erased exchange {request.exchange_id} of {scope.describe()} for good.",
        )

    def scrub(self, user_id: str | None = None) -> ScrubResult:
        """Apply redaction to what is already stored (a user's memory and their agents', or
        everyone's), as durably as forget: the exchanges' text rewritten in place with their vectors
        and the saved word index gone, facts and profile sections rewritten, the vectors of the
        facts' old wording erased. Whatever memory.redaction says: this is asked for by name."""
        users = [user_id] if user_id is not None else self.store.list_users()
        memories = exchanges = documents = 0
        for user in users:
            self._require_stored(Scope(user))
            for scope in self._with_agents(Scope(user)):
                with self.store.exclusive_updates(scope, wait=ERASE_WAIT_SECONDS) as acquired:
                    if not acquired:
                        raise StorageError(
                            f"the memory of {scope.describe()} is being updated: it was not scrubbed (the ones "
                            f"before it were); run scrub again shortly"
                        )
                    memories += 1
                    exchanges += self._scrub_exchanges(scope)
                    documents += self._scrub_document(scope)
        return ScrubResult(
            memories=memories,
            exchanges=exchanges,
            documents=documents,
            message=(
                f"Scrubbed {plural(memories, 'memory', 'memories')}: secrets and private spans replaced in "
                f"{plural(exchanges, 'exchange')} and in the facts or profile of {plural(documents, 'memory', 'memories')}."
            ),
        )

    def _scrub_exchanges(self, scope: Scope) -> int:
        cleaned = [clean for page in self.store.read_pages(scope).pages if (clean := without_secrets(page)) != page]
        if cleaned:
            self.store.rewrite_pages(scope, cleaned)
            self._embed_soon(scope)  # their vectors, computed anew from the text without secrets
        return len(cleaned)

    def _scrub_document(self, scope: Scope) -> int:
        before = self.store.read_document(scope)
        if without_secrets(before) == before:
            return 0
        old_wordings: set[str] = set()

        def change(document: MemoryDocument) -> MemoryDocument:
            clean = without_secrets(document)
            old_wordings.update(fact_vector_id(fact.content) for fact in document.facts)
            old_wordings.difference_update(fact_vector_id(fact.content) for fact in clean.facts)
            return clean

        self.store.update_document(scope, change, create=False)
        vectors, _ = self.store.read_vectors(scope, 0)
        for model in {vector.model for vector in vectors if vector.page_id in old_wordings}:
            self.store.erase_vectors(scope, model, sorted(old_wordings))
        self._embed_soon(scope)
        return 1

    def memory_status(self, only_user: str | None = None) -> StatusResult:
        """Storage, extraction and per-user counts; with `only_user`, that user's alone (an
        authenticated caller sees nothing of the others, not even their ids, nor where the
        instance keeps memory or how much it holds). A user whose files are damaged is listed with
        the reason, and the others as usual."""
        listed = self.store.list_users()
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
        notes = self._extraction_notes()
        try:
            self.store.check_ready()
            storage_ok = True
        except StorageError as exc:
            storage_ok = False
            notes.insert(0, f"Memory cannot be stored right now: {exc}")
        damaged = [user.user_id for user in users if user.problem]
        if damaged:
            notes.append(f"Damaged memory (its calls fail until it is repaired): {', '.join(damaged)}; see `problem`.")
        return StatusResult(
            version=__version__,
            data_dir=self.store.location if only_user is None else None,
            storage_ok=storage_ok,
            users=users,
            llm_configured=self.settings.llm_configured,
            extraction=self._mode(*documents),
            llm_model=self.settings.llm_model if self.settings.llm_configured else None,
            llm_base_url=_without_credentials(self.settings.openai_base_url),
            token_counter=self._tokens.method,  # type: ignore[arg-type]
            queued_updates=self._updates.queued(only_user),
            scopes_in_memory=self._recall.cached() if only_user is None else 0,
            last_update_errors=errors,
            notes=notes,
        )

    def scope_summary(self, user_id: str, agent_name: str | None = None) -> UserSummary:
        """The counts of one memory alone: a user's own (without their agents'), or one agent's."""
        scope = self.resolve_scope(user_id, agent_name)
        self._require_stored(scope)
        return self._counts(scope.user_id, [scope], agents=[])[0]

    def sessions(self, user_id: str, agent_name: str | None = None) -> list[SessionView]:
        """The memory's sessions, hottest first: which ones everyday retrieval still searches."""
        scope = self.resolve_scope(user_id, agent_name)
        self._require_stored(scope)
        return session_views(self.store.read_pages(scope).pages, self.store.read_document(scope), now(), self.settings)

    def _summary(self, user_id: str) -> tuple[UserSummary, list[MemoryDocument]]:
        """A user's counts over their scopes, and their documents; StorageError if one is damaged."""
        agents = self.store.list_agents(user_id)
        return self._counts(user_id, [Scope(user_id), *(Scope(user_id, agent) for agent in agents)], agents)

    def _counts(self, user_id: str, scopes: list[Scope], agents: list[str]) -> tuple[UserSummary, list[MemoryDocument]]:
        """Counts summed over `scopes`, and their documents; StorageError if one is damaged."""
        documents = [self.store.read_document(scope) for scope in scopes]
        summary = UserSummary(
            user_id=user_id,
            agents=agents,
            pages=sum(self.store.page_count(scope) for scope in scopes),  # an unreadable record raises
            facts=sum(len(current(document.facts)) for document in documents),
            pending_pages=sum(pending_count(self.store, scope) for scope in scopes),
            set_aside_pages=sum(document.analysis.set_aside_pages() for document in documents),
            pages_without_vectors=None
            if self._embedding is None
            else sum(len(self._embedding.missing(scope)) for scope in scopes),
        )
        return summary, documents

    def embed_missing(
        self, user_id: str, agent_name: str | None, progress: Callable[[Scope, int, int], None] | None = None
    ) -> int:
        """Compute now the vectors the user's exchanges lack (their agents' too, unless one is
        named); return how many were stored. Stopped part-way, it resumes where it stopped."""
        if self._embedding is None:
            raise InvalidInput("embeddings are off: set embeddings.backend to 'local' or 'openai' in the config")
        scope = self.resolve_scope(user_id, agent_name)
        self._require_stored(scope)
        stored = 0
        for each in self._with_agents(scope):
            told = None if progress is None else functools.partial(progress, each)
            stored += self._embedding.embed_scope(each, told)
        return stored

    # --- internals ------------------------------------------------------------------------

    def is_stored(self, user_id: str | None, agent_name: str | None = None) -> bool:
        """Whether anything is stored for the user (or that agent of theirs)."""
        return self._stored(self.resolve_scope(user_id, agent_name))

    def search_exchanges(self, request: RetrieveMemoryRequest) -> list[ScoredPage]:
        """Every stored exchange ranked for the query, recent and archived ones included; for a
        person searching their memory, so it counts no visits."""
        scope = self.resolve_scope(request.user_id, request.agent_name)
        page_log = self.store.read_pages(scope)
        pages = page_log.pages[: len(page_log.pages)]
        hits = self._recall.search_all(scope, page_log, request.query, request.max_results, among_first=len(pages))
        shown = pages.pick([i for i, _ in hits])
        return [ScoredPage(**_page_fields(page), score=round(score, 4)) for page, (_, score) in zip(shown, hits)]

    def latest_pages(self, user_id: str, agent_name: str | None, count: int) -> list[Page]:
        """The last `count` exchanges stored for a user (or agent), in the order they were added."""
        pages = self.store.read_pages(self.resolve_scope(user_id, agent_name)).pages
        return [Page(**_page_fields(page)) for page in pages[-count:]] if count > 0 else []

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
        pages = self.store.read_pages(scope).pages
        pages = pages[: len(pages)]
        ids, threads = pages.ids, pages.threads
        skip = skip_thread or None
        candidates = [n for n in range(len(pages) - 1, max(-1, len(pages) - 1 - among_last), -1) if threads[n] != skip]
        projects = self._page_projects.setdefault(scope, {})
        if len(projects) > MAX_PAGE_PROJECTS:
            projects.clear()
        found: list[Page] = []
        for start in range(0, len(candidates), LATEST_BATCH):
            batch = candidates[start : start + LATEST_BATCH]
            unknown = [n for n in batch if ids[n] not in projects]
            projects.update((page.page_id, page.project) for page in pages.pick(unknown))
            wanted = [n for n in batch if project is None or projects[ids[n]] == project][: count - len(found)]
            found += [Page(**_page_fields(page)) for page in pages.pick(wanted)]
            if len(found) == count:
                break
        return found[::-1]

    def find_pages(
        self, user_id: str, agent_name: str | None, keep: Callable[[Page], bool], limit: int
    ) -> tuple[list[Page], int]:
        """The newest `limit` exchanges `keep` accepts, newest first, and how many it accepts in
        all; only those returned are copied out of the log (a browse at 10k is then milliseconds)."""
        found: list[Page] = []
        total = 0
        for page in reversed(self.store.read_pages(self.resolve_scope(user_id, agent_name)).pages):
            if keep(page):
                total += 1
                if len(found) < limit:
                    found.append(Page(**_page_fields(page)))
        return found, total

    def exchange_times(self, user_id: str, agent_name: str | None) -> list[str]:
        """When each exchange was said, in the order they were added."""
        return list(self.store.read_pages(self.resolve_scope(user_id, agent_name)).pages.timestamps)

    def archived_sessions(self, user_id: str, agent_name: str | None) -> frozenset[str]:
        """The sessions everyday retrieval no longer searches (named as sessions.session_of names them)."""
        return archived_sessions(self.store.read_document(self.resolve_scope(user_id, agent_name)))

    def list_users(self) -> list[str]:
        return self.store.list_users()

    @property
    def location(self) -> str:
        """Where memory is kept, as it may be shown (a database without its password)."""
        return self.store.location

    def check_ready(self) -> None:
        """Raise StorageError if memory cannot be stored right now (what a health check asks)."""
        self.store.check_ready()

    def _stored(self, scope: Scope) -> bool:
        if scope.user_id not in self.store.list_users():
            return False
        return scope.agent_name is None or scope.agent_name in self.store.list_agents(scope.user_id)

    def _require_stored(self, scope: Scope) -> None:
        if not self._stored(scope):
            raise NotFound(f"nothing is stored for {scope.describe()}; memory_status lists the users")

    def _erase(self, scope: Scope) -> None:
        """Erase a scope (for a user, with their agents) and forget everything cached about it.

        It waits for no update: one under way here is cancelled (its LLM call cut off), and no
        background write, here or in another process, can recreate erased memory or write into
        memory begun anew after it (the store refuses them), so an erase never fails for being busy."""
        if not self._stored(scope):
            return
        affected = self._let_go(scope)
        self.store.erase(scope)
        self._recall.drop(affected)

    def _let_go(self, scope: Scope) -> list[Scope]:
        """Before a scope (for a user, with their agents) is erased or replaced: its updates cut off,
        and what host sessions were given of it forgotten. Returns the scopes (whose caches the
        caller drops once the store has changed)."""
        affected = self._with_agents(scope)
        self._updates.stop_for_erase(affected)
        erase_ledgers(self.settings.data_storage_path, scope)  # what host sessions were given: ids only
        for each in affected:
            self._page_projects.pop(each, None)
        return affected

    def _embed_soon(self, scope: Scope) -> None:
        """With embeddings on: have what the scope's pages and facts lack computed in the background."""
        if self._embedding is not None:
            self._embedding.notify(scope)

    def _with_agents(self, scope: Scope) -> list[Scope]:
        """The scope, and for a user's own scope every agent of theirs too."""
        agents = self.store.list_agents(scope.user_id) if scope.agent_name is None else []
        return [scope, *(Scope(scope.user_id, agent) for agent in agents)]

    def resolve_scope(self, user_id: str | None, agent_name: str | None) -> Scope:
        """Whose memory a call means: an id left out (or empty) is the configured default."""
        return Scope(user_id or self.settings.user_id, agent_name or self.settings.assistant_id)

    def _secrets_out(self, model: ModelT) -> ModelT:
        """What is about to be stored, without secrets or private spans (unless memory.redaction is off)."""
        return without_secrets(model) if self.settings.memory.redaction else model

    def _check_sizes(self, request: AddMemoryRequest) -> None:
        limit = self.settings.max_text_chars
        for name in ("user_input", "agent_response"):
            if len(getattr(request, name)) > limit:
                raise InvalidInput(f"{name} is longer than {limit} characters (max_text_chars); store less of it")
        if not request.user_input.strip() and not request.agent_response.strip():
            raise InvalidInput("user_input and agent_response are both empty: there is nothing to remember")
        if request.meta_data is not None:
            size = len(json.dumps(request.meta_data, ensure_ascii=False, separators=(",", ":")).encode())
            if size > self.settings.max_meta_data_bytes:
                raise InvalidInput(
                    f"meta_data is {size} bytes as JSON, over the {self.settings.max_meta_data_bytes} allowed "
                    "(max_meta_data_bytes)"
                )

    def _mode(self, *documents: MemoryDocument) -> ExtractionMode:
        """Who fills structured memory: this server's updater, the host model, or nobody (yet)."""
        if self.extraction_on:
            return "server"
        # hostBefore moves only when structured memory sent by the host has been applied.
        return "host" if any(document.analysis.hostBefore for document in documents) else "off"

    def _extraction_notes(self) -> list[str]:
        if self.extraction_on:
            return []
        if not self.settings.memory.enabled:
            return [EXTRACTION_DISABLED_NOTE]
        return [NO_MODEL_NOTE if self.settings.llm_endpoint_set else HOST_EXTRACTION_NOTE]

    def _rank_entries(
        self, entries: Sequence[Fact | KnowledgeEntry], about: str, scored: type[ScoredT], relevance: Any = None
    ) -> tuple[list[ScoredT], dict[str, float]]:
        """All entries, best first: similarity to the query and context (or by meaning, where
        `relevance` says so), weighed with confidence; and each entry's similarity by its id
        (empty with no query)."""
        memory = self.settings.memory
        contents = [entry.content for entry in entries]
        similarities = entry_similarities(contents, about, relevance, whole_query=True)
        ranked = rank_by_similarity_and_confidence(
            contents,
            [entry.confidence for entry in entries],
            about,
            memory.similarity_weight,
            memory.confidence_weight,
            relevance,
        )
        by_id = {} if similarities is None else {entry.id: value for entry, value in zip(entries, similarities)}
        return [scored(**entries[i].model_dump(), score=round(score, 4)) for i, score in ranked], by_id

    def _query_vector(self, query: str) -> tuple[Any, str | None]:
        """The query's vector when embeddings are on; else None, and why when they are on."""
        if self._embedder is None or not query.strip():
            return None, None
        try:
            return self._embedder.embed([query], query=True)[0], None
        except Exception as exc:  # an embedding that fails never fails a retrieve
            return None, f"Embeddings unavailable ({type(exc).__name__}: {str(exc)[:120]}): ranked by words alone."

    def _notes(self, document: MemoryDocument) -> list[str]:
        if document.is_empty():
            notes = [EMPTY_PROFILE_NOTE] if self.extraction_on else [EMPTY_PROFILE_HOST_NOTE]
            if not self.settings.memory.enabled:
                notes.insert(0, EXTRACTION_DISABLED_NOTE)
        else:
            notes = self._extraction_notes()
        return notes + _set_aside_notes(document)


EMPTY_BLOCK = MemoryContext(text="", tokens=0, left_out={}, shortened=0)


def _refuse_nul(where: str, value: Any) -> None:
    """ValueError naming the first string in `value` (structured memory, as JSON) holding U+0000."""
    if isinstance(value, str):
        without_nul(value)
    elif isinstance(value, list | dict):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            try:
                _refuse_nul(f"{where}.{key}", item)
            except ValueError as exc:
                raise ValueError(f"{where}.{key}: {exc}" if isinstance(item, str) else str(exc)) from None


def _positions_of(pages: PageSequence, thread_id: str | None, page_ids: Collection[str]) -> list[int]:
    """Positions of the pages of thread `thread_id` and of those with these ids (from the columns:
    no page is read)."""
    if thread_id is None and not page_ids:
        return []
    ids = frozenset(page_ids)
    return [
        position
        for position, (page_id, thread) in enumerate(zip(pages.ids, pages.threads))
        if thread == thread_id or page_id in ids
    ]


def _page_fields(page: Page) -> dict[str, Any]:
    """A stored page's fields as tool results show them (host memory is the log's business)."""
    return page.model_dump(include=set(Page.model_fields))


def _set_aside_notes(document: MemoryDocument) -> list[str]:
    aside = document.analysis.setAside
    if not aside:
        return []
    latest = aside[-1]
    note = (
        f"{document.analysis.set_aside_pages()} exchanges were set aside after repeated unusable LLM replies "
        f"(latest: {latest.reason}, {latest.at}); they stay searchable. flush_memory(retry_failed=true) tries them again."
    )
    return [note]


def _without_credentials(url: str | None) -> str | None:
    """The endpoint as it may be shown: no user, password or query string (which may hold a key)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
