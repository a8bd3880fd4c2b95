"""What a retrieve found, and which of it a model is shown.

The structured result keeps the whole ranking, for programs and benchmarks. What a model reads
is less: items that clear relevance's floors, nothing of the conversation it is in (it has
that), another project's exchanges only when clearly relevant, labelled with their project.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memory_mcp.base.projects import project_name
from memory_mcp.models import (
    Fact,
    MemoryDocument,
    Page,
    ProfileSections,
    RetrieveMemoryRequest,
    RetrieveMemoryResult,
    ScoredFact,
    ScoredKnowledge,
    ScoredPage,
)
from memory_mcp.recall.memory_block import MemoryContext
from memory_mcp.recall.relevance import exchange_clears, fact_clears
from memory_mcp.recall.scope_recall import Hit
from memory_mcp.store import Scope

# Another project's exchange ranks as if it scored this share of what it does: the current
# project's come first among those about as relevant.
OTHER_PROJECT_SCORE = 0.5


@dataclass
class Found:
    request: RetrieveMemoryRequest
    scope: Scope
    document: MemoryDocument
    recent: list[Page]  # oldest first
    ranked: list[tuple[ScoredPage, Hit]]  # best first
    facts: list[ScoredFact]  # best first
    fact_similarity: dict[str, float]  # fact id -> similarity to the query (empty: no query)
    knowledge: list[ScoredKnowledge]
    worth_recalling: bool  # the query asks for something (relevance.worth_recalling)
    notes: list[str] = field(default_factory=list)

    def other_project(self, item: Page | Fact) -> bool:
        """Whether an exchange came from, or a fact is about, a project other than the request's
        (never, without one)."""
        project = self.request.project
        return project is not None and item.project is not None and item.project != project

    def _in_conversation(self, page: Page) -> bool:
        return self.request.thread_id is not None and page.thread_id == self.request.thread_id

    def recent_to_show(self) -> list[Page]:
        """The recent window without the conversation's own exchanges and other projects'."""
        return [page for page in self.recent if not self._in_conversation(page) and not self.other_project(page)]

    def earlier_to_show(self) -> list[ScoredPage]:
        """The ranked exchanges that clear the floor (a higher one for another project's)."""
        if not self.worth_recalling:
            return []
        return [
            page
            for page, hit in self.ranked
            if not self._in_conversation(page) and exchange_clears(hit.words, hit.meaning, self.other_project(page))
        ]

    def facts_to_show(self) -> list[ScoredFact]:
        """Corrections and pinned facts always (of another project, only when relevant); the others
        when relevant to the query (about another project, when clearly so), or all of them, best
        first, when the request asks nothing in particular (an empty query)."""
        if not self.request.query.strip():
            return list(self.facts)
        return [
            fact
            for fact in self.facts
            if ((fact.category == "correction" or fact.pinned) and not self.other_project(fact))
            or (self.worth_recalling and fact_clears(self.fact_similarity.get(fact.id, 0.0), self.other_project(fact)))
        ]

    def labels(self) -> dict[str, str]:
        """Page id -> its project's name, for the exchanges of another project."""
        pages = [page for page, _ in self.ranked] + self.recent
        return {page.page_id: project_name(page.project) for page in pages if self.other_project(page)}

    def result(self, block: MemoryContext) -> RetrieveMemoryResult:
        request = self.request
        result = RetrieveMemoryResult(
            query=request.query,
            user_id=self.scope.user_id,
            agent_name=self.scope.agent_name,
            relationship_with_user=request.relationship_with_user,
            style_hint=request.style_hint,
            short_term_memory=self.recent,
            retrieved_pages=[page for page, _ in self.ranked],
            retrieved_user_knowledge=self.facts[: request.max_results],
            retrieved_assistant_knowledge=self.knowledge[: request.max_results],
            user_profile=ProfileSections(user=self.document.user, history=self.document.history),
            context=block.text,
            context_tokens=block.tokens,
            notes=self.notes,
        )
        result._shown_pages = list(block.shown_pages)
        return result


def prefer_project(ranked: list[tuple[Page, Hit]], project: str | None) -> list[tuple[Page, Hit, float]]:
    """The hits re-ranked so that, of about equally relevant exchanges, the current project's come
    first (another project's scores OTHER_PROJECT_SCORE of what it did); with each its score."""
    scored = [
        (page, hit, hit.score * (OTHER_PROJECT_SCORE if project and page.project not in (None, project) else 1.0))
        for page, hit in ranked
    ]
    return sorted(scored, key=lambda item: (-item[2], -item[1].position))
