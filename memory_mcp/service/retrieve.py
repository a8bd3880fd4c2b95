"""The retrieve pipeline: read the log, recall exchanges, rank facts, and build the <memory> block."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Sequence
from typing import Any, TypeVar

from memory_mcp.base.errors import LogReplaced
from memory_mcp.base.settings import MemorySettings, Settings
from memory_mcp.memory.facts import current
from memory_mcp.models import Fact, KnowledgeEntry, RetrieveMemoryRequest, ScoredFact, ScoredKnowledge
from memory_mcp.recall.bm25 import LexicalIndex
from memory_mcp.recall.embedders import Embedder, stored_model
from memory_mcp.recall.fact_ranking import entry_similarities, rank_by_similarity_and_confidence
from memory_mcp.recall.findings import Found, prefer_project
from memory_mcp.recall.memory_block import MemoryContext, build_context
from memory_mcp.recall.periods import time_window
from memory_mcp.recall.relevance import worth_recalling
from memory_mcp.recall.scope_recall import PageRecall
from memory_mcp.recall.token_count import TokenCounter
from memory_mcp.recall.vectors import MIN_FACTS_COMPARED
from memory_mcp.service.notes import profile_notes
from memory_mcp.service.pages import pages_now, scored_page, shown_page
from memory_mcp.store import MemoryStore, PageLog, Scope
from memory_mcp.store.page_sequence import PageSequence

log = logging.getLogger(__name__)

ScoredT = TypeVar("ScoredT", ScoredFact, ScoredKnowledge)
RETRIEVE_ATTEMPTS = 3  # reads of the log when exchanges keep being erased under a retrieve
EMPTY_BLOCK = MemoryContext(text="", tokens=0, left_out={}, shortened=0)
_SECTION_NAMES = {
    "header": "header lines",
    "user": "profile sections",
    "history": "history sections",
    "facts": "facts",
    "recent": "recent exchanges",
    "earlier": "earlier exchanges",
}


class Retrieval:
    """Ranks what a scope's memory holds against a request, over the per-scope caches of recall,
    and fits what a model may be shown into a token budget."""

    def __init__(
        self,
        settings: Settings,
        store: MemoryStore,
        recall: PageRecall,
        tokens: TokenCounter,
        embedder: Embedder | None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._recall = recall
        self._tokens = tokens
        self._embedder = embedder
        self._vector_model = stored_model(embedder.model) if embedder is not None else ""

    def warm_up(self, scope: Scope) -> None:
        """Import numpy, load the token encoding and the scope's index (a fraction of a second
        with a saved index, seconds without one) so that the first retrieve_memory does not pay for it."""
        try:
            LexicalIndex().search("warm up", 1)
            self._tokens.count("warm up")
            self._recall.cache(scope, self._store.read_pages(scope))
        except Exception:  # only a head start: the first real call loads whatever failed here
            log.debug("warm-up did not complete", exc_info=True)

    def read_ahead(self, scope: Scope) -> None:
        """A first retrieve's loads started on threads of their own: the saved index, to come with
        the log, and the token encoding its block is counted with (nothing when loaded already)."""
        self._recall.read_index_ahead(scope)
        self._tokens.load_ahead()

    def find(
        self, scope: Scope, request: RetrieveMemoryRequest, for_injection: bool, skip_pages: Collection[str]
    ) -> Found:
        """What memory holds for the request, ranked (see MemoryService.find). Exchanges erased
        while it read them: it reads again what is kept (a few times at most, if erases keep coming)."""
        for _ in range(RETRIEVE_ATTEMPTS - 1):
            with contextlib.suppress(LogReplaced):
                return self._find(scope, request, for_injection, skip_pages)
        return self._find(scope, request, for_injection, skip_pages)

    def _find(
        self, scope: Scope, request: RetrieveMemoryRequest, for_injection: bool, skip_pages: Collection[str]
    ) -> Found:
        self.read_ahead(scope)
        page_log = self._store.read_pages(scope)
        pages = pages_now(page_log)  # its length fixed once
        within = time_window(pages, request.since, request.until)
        recent = [] if for_injection else self._recall.recent(scope, page_log, len(pages), within)
        excluded = recent + (_positions_of(pages, request.thread_id, skip_pages) if for_injection else [])
        document = self._store.read_document(scope)
        held = current(document.facts)
        worth = worth_recalling(request.query)
        wanted = len(pages) > len(excluded) or len(held) >= MIN_FACTS_COMPARED
        query_vector, vector_note = (
            self._query_vector(request.query, (scope, page_log)) if wanted and worth else (None, None)
        )
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
        short_term = [shown_page(page) for page in shown[len(hits) :]]
        about = f"{request.query}\n{request.current_context}".strip()
        relevance = None
        if query_vector is not None:
            contents = [fact.content for fact in held]
            relevance = self._recall.fact_relevance(scope, page_log, contents, query_vector, self._vector_model)
        facts, similarity = _rank_entries(self._settings.memory, held, about, ScoredFact, relevance)
        knowledge, _ = _rank_entries(self._settings.memory, document.assistantKnowledge, about, ScoredKnowledge)
        notes = profile_notes(self._settings, document) + ([vector_note] if vector_note else [])
        return Found(
            request=request,
            scope=scope,
            document=document,
            recent=short_term,
            ranked=[(scored_page(page, score), hit) for page, hit, score in ranked],
            facts=facts,
            fact_similarity=similarity,
            knowledge=knowledge,
            worth_recalling=worth,
            notes=notes,
        )

    def memory_block(self, found: Found, max_tokens: int | None) -> MemoryContext:
        """The <memory> block of what `found` may show a model, within `max_tokens` (default
        memory.max_injection_tokens); what did not fit is said in `found.notes`."""
        memory = self._settings.memory
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

    def fact_relevance(self, scope: Scope, query: str, contents: Sequence[str]) -> Any:
        """How much each of the facts `contents` stands out by meaning for `query` (None with
        embeddings off, or too few facts to compare)."""
        query_vector, _ = self._query_vector(query) if len(contents) >= MIN_FACTS_COMPARED else (None, None)
        if query_vector is None:
            return None
        page_log = self._store.read_pages(scope)
        return self._recall.fact_relevance(scope, page_log, contents, query_vector, self._vector_model)

    def _query_vector(self, query: str, pages_of: tuple[Scope, PageLog] | None = None) -> tuple[Any, str | None]:
        """The query's vector when embeddings are on (with `pages_of`, its typos respelled as that
        scope's word index reads them); else None, and why when they are on."""
        if self._embedder is None or not query.strip():
            return None, None
        text = query if pages_of is None else self._recall.respelled(*pages_of, query)
        try:
            return self._embedder.embed([text], query=True)[0], None
        except Exception as exc:  # an embedding that fails never fails a retrieve
            return None, f"Embeddings unavailable ({type(exc).__name__}: {str(exc)[:120]}): ranked by words alone."


def _rank_entries(
    memory: MemorySettings,
    entries: Sequence[Fact | KnowledgeEntry],
    about: str,
    scored: type[ScoredT],
    relevance: Any = None,
) -> tuple[list[ScoredT], dict[str, float]]:
    """All entries, best first: similarity to the query and context (or by meaning, where
    `relevance` says so), weighed with confidence; and each entry's similarity by its id
    (empty with no query)."""
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
