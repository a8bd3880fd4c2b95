"""What each tool returns (MemoryOS's snake_case names; stored parts keep DeerFlow's)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr

from memory_mcp.base.model import Model
from memory_mcp.models.stored import Fact, HistorySections, KnowledgeEntry, Page, UserSections

ExtractionMode = Literal["server", "host", "off"]


class ScoredPage(Page):
    """A page returned by retrieval, with its relevance to the query (higher is closer)."""

    score: float


class SkippedFact(Model):
    index: int = Field(description="Position in the facts that were sent.")
    content: str
    reason: Literal["duplicate", "below_threshold", "upload_mention", "over_max_facts"]


class SupersededFact(Model):
    id: str = Field(description="The fact that no longer holds (kept as history).")
    superseded_by: str


class StructuredUpdate(Model):
    """What the facts and profile sent with an exchange changed in structured memory."""

    facts_added: list[Fact]
    facts_skipped: list[SkippedFact]
    facts_superseded: list[SupersededFact]
    sections_updated: list[str]


class AddMemoryResult(Model):
    status: Literal["success"] = "success"
    message: str
    page_id: str
    user_id: str
    agent_name: str | None
    thread_id: str | None
    timestamp: str
    structured: StructuredUpdate | None = Field(
        None, description="What the facts and profile sent with the exchange changed (absent when none were sent)."
    )


class ScoredFact(Fact):
    score: float


class ScoredKnowledge(KnowledgeEntry):
    score: float


class ProfileSections(Model):
    user: UserSections
    history: HistorySections


class RetrieveMemoryResult(Model):
    status: Literal["success"] = "success"
    query: str
    user_id: str
    agent_name: str | None
    relationship_with_user: str
    style_hint: str
    short_term_memory: list[Page]
    retrieved_pages: list[ScoredPage]
    retrieved_user_knowledge: list[ScoredFact]
    retrieved_assistant_knowledge: list[ScoredKnowledge]
    user_profile: ProfileSections
    context: str = Field(description="A <memory> block ready for a system prompt ('' when injection is off).")
    context_tokens: int
    notes: list[str] = Field(default_factory=list, description="What is switched off or missing, in words.")
    # The ids of the exchanges `context` shows, for the text a model reads (not part of the result).
    _shown_pages: list[str] = PrivateAttr(default_factory=list)

    @property
    def shown_pages(self) -> list[str]:
        return self._shown_pages


class UserProfileResult(Model):
    status: Literal["success"] = "success"
    user_id: str
    agent_name: str | None
    user: UserSections
    history: HistorySections
    facts: list[Fact] | None = None
    assistant_knowledge: list[KnowledgeEntry] | None = None
    lastUpdated: str
    notes: list[str] = Field(default_factory=list, description="Why the profile is empty, when it is.")


class FlushResult(Model):
    status: Literal["success"] = "success"
    user_id: str
    agent_name: str | None
    extraction: ExtractionMode
    pages_analysed: int
    llm_calls: int
    facts_added: list[str]
    facts_removed: list[str]
    sections_updated: list[str]
    assistant_knowledge_added: list[str]
    pending_pages: int = Field(description="Exchanges still awaiting analysis after this flush.")
    set_aside_pages: int = Field(
        description="Exchanges set aside after repeated unusable replies; flush_memory(retry_failed=true) retries them."
    )
    errors: list[str]
    notes: list[str] = Field(default_factory=list)


class FactsResult(Model):
    status: Literal["success"] = "success"
    user_id: str
    agent_name: str | None
    facts: list[ScoredFact]
    total: int = Field(description="Facts matching the filters before `limit`.")


class FactChangeResult(Model):
    status: Literal["success"] = "success"
    user_id: str
    agent_name: str | None
    action: Literal["added", "updated", "replaced", "deleted", "duplicate"]
    fact: Fact
    message: str


class ForgetExchangeResult(Model):
    status: Literal["success"] = "success"
    user_id: str
    agent_name: str | None
    exchange_id: str
    message: str


class ScrubResult(Model):
    status: Literal["success"] = "success"
    memories: int = Field(description="Memories looked through: users' own and their agents'.")
    exchanges: int = Field(description="Exchanges whose stored text held a secret or a private span.")
    documents: int = Field(description="Memories whose facts or profile held one.")
    message: str


class ForgetResult(Model):
    status: Literal["success"] = "success"
    user_id: str
    agent_name: str | None
    removed_pages: int
    removed_facts: int
    message: str


class ImportResult(Model):
    status: Literal["success"] = "success"
    user_id: str
    agent_name: str | None
    mode: Literal["merge", "replace"]
    pages_added: int
    pages_skipped: int = Field(description="Pages already present (same page_id).")
    facts_added: int
    facts_skipped: int = Field(description="Facts already present (same id or same content).")
    agents: list[str]
    message: str


class UserSummary(Model):
    user_id: str
    agents: list[str] = Field(default_factory=list)
    pages: int = 0
    facts: int = 0
    pending_pages: int = 0
    set_aside_pages: int = 0
    pages_without_vectors: int | None = Field(
        None, description="Exchanges whose embedding is not computed yet (None: embeddings are off)."
    )
    problem: str | None = Field(None, description="Why this user's memory cannot be read (file and reason), if so.")


class StatusResult(Model):
    status: Literal["success"] = "success"
    version: str
    data_dir: str | None = Field(description="Where memory is kept; not shown to a caller authenticated by a token.")
    storage_ok: bool = Field(description="Whether memory can be stored right now (the data directory is writable).")
    users: list[UserSummary]
    llm_configured: bool
    extraction: ExtractionMode = Field(
        description="server: this server's LLM updater extracts; host: facts arrive from the host model; off: neither."
    )
    llm_model: str | None
    llm_base_url: str | None
    token_counter: Literal["tiktoken", "char"]
    queued_updates: int = Field(description="Updates waiting (for a token holder: of their memory alone).")
    scopes_in_memory: int = Field(
        0,
        description="Users and agents whose search index this process holds now (memory.cached_scopes at most, "
        "give or take those in use).",
    )
    last_update_errors: list[str]
    notes: list[str] = Field(default_factory=list)


class ScopeMigration(Model):
    """One user's (or agent's) memory as it stands in both stores once verified."""

    user_id: str
    agent_name: str | None
    pages: int
    pages_copied: int  # fewer than `pages` when a resumed run found some already there
    facts: int  # superseded ones included


class MigrationReport(Model):
    """What `memory-mcp migrate` prints: every scope, and the totals a person checks first."""

    status: Literal["success"] = "success"
    scopes: list[ScopeMigration]
    pages: int
    pages_copied: int
    facts: int
    message: str
