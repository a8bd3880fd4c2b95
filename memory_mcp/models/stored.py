"""What is stored: exchanges (pages), the memory document, and what proposes changes to it.

The document keeps DeerFlow's memory.json field names (camelCase), so files written by either
system read the same.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, ConfigDict, Field, StringConstraints

from memory_mcp.base.clock import normalise_timestamp
from memory_mcp.base.model import Model

SCHEMA_VERSION = "1.0"
FactCategory = Literal["preference", "knowledge", "context", "behavior", "goal", "correction"]
UserSectionName = Literal["workContext", "personalContext", "topOfMind"]
HistorySectionName = Literal["recentMonths", "earlierContext", "longTermBackground"]
SectionName = Literal[UserSectionName, HistorySectionName]
USER_SECTION_NAMES: tuple[str, ...] = get_args(UserSectionName)
HISTORY_SECTION_NAMES: tuple[str, ...] = get_args(HistorySectionName)
MAX_FACT_CHARS = 2000
FACT_ID_PATTERN = r"^fact_[0-9a-f]{8}$"


class Page(Model):
    """One exchange, stored verbatim: what the user said and what the agent answered."""

    page_id: str
    user_input: str
    agent_response: str
    timestamp: str
    meta_data: dict[str, Any] | None = None
    thread_id: str | None = None
    project: str | None = None  # the repository or folder it was said in (projects.py); None: unknown


def without_nul(value: str) -> str:
    """Structured memory holds no U+0000: PostgreSQL's JSON cannot store it, and one such character
    in a stored document would break that memory for good. The one rule, on both backends."""
    if "\x00" in value:
        raise ValueError("must not contain the character U+0000 (NUL)")
    return value


MemoryText = Annotated[str, AfterValidator(without_nul)]
FactText = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_FACT_CHARS), AfterValidator(without_nul)
]


class ProposedFact(Model):
    """A fact someone proposes to remember (the host model, or the server's updater), before the
    rules decide whether it enters memory."""

    model_config = ConfigDict(extra="forbid")

    content: FactText = Field(description="One short self-contained statement, in the user's language.")
    category: FactCategory
    confidence: float = Field(ge=0, le=1, description="0.9-1 said outright; 0.7-0.89 strongly implied.")
    sourceError: MemoryText | None = Field(
        None, max_length=MAX_FACT_CHARS, description="For a correction: the mistake to avoid."
    )
    replaces: str | None = Field(None, pattern=FACT_ID_PATTERN, description="Id of the fact it supersedes.")


def _expiry(value: str | None) -> str | None:
    return None if value is None else normalise_timestamp(value)


# When a fact stops holding by itself ("in Paris until Friday"), in any timestamp form.
Expiry = Annotated[str | None, AfterValidator(_expiry)]


class HostFact(ProposedFact):
    """A fact the host model sends with an exchange: it may pin it or give it an end, as the user
    asked. (The server's own updater proposes plain facts: it pins nothing on its own.)"""

    pinned: bool = Field(False, description="Always keep it (the user asked).")
    expiresAt: Expiry = Field(None, description="When it stops holding (ISO 8601).")


class HostMemory(Model):
    """What the host model learned from one exchange, stored with the exchange itself so that the
    page and what it taught are written as one record; applied to memory.json right after."""

    model_config = ConfigDict(extra="forbid")

    facts: list[HostFact] = Field(default_factory=list)
    profile: dict[SectionName, str] = Field(default_factory=dict)


class StoredPage(Page):
    """A page as the log keeps it. Tool results carry the plain `Page` fields only."""

    host_memory: HostMemory | None = None

    def record(self) -> str:
        """The page as one log record; without host memory when it carries none (the usual case)."""
        return self.model_dump_json(exclude=None if self.host_memory is not None else {"host_memory"})


def carries_host_memory(page: Page) -> bool:
    """Whether the page came with structured memory from the host (to apply, or applied)."""
    return isinstance(page, StoredPage) and page.host_memory is not None


class Section(Model):
    """One profile section: a short summary the updater rewrites as it learns."""

    model_config = ConfigDict(extra="allow")

    summary: str = ""
    updatedAt: str = ""


class UserSections(Model):
    model_config = ConfigDict(extra="allow")

    workContext: Section = Field(default_factory=Section)
    personalContext: Section = Field(default_factory=Section)
    topOfMind: Section = Field(default_factory=Section)


class HistorySections(Model):
    model_config = ConfigDict(extra="allow")

    recentMonths: Section = Field(default_factory=Section)
    earlierContext: Section = Field(default_factory=Section)
    longTermBackground: Section = Field(default_factory=Section)


class Fact(Model):
    """A discrete thing known about the user, with how sure we are of it."""

    model_config = ConfigDict(extra="allow")

    id: str
    content: str
    category: FactCategory = "context"
    confidence: float = Field(ge=0, le=1)
    createdAt: str = ""
    source: str = "unknown"
    sourceError: str | None = None
    validTo: str | None = Field(None, description="When it stopped holding; absent while it holds.")
    supersededBy: str | None = Field(None, description="The fact that replaced it, if one did.")
    pinned: bool = Field(False, description="Never trimmed by max_facts; shown right after corrections.")
    expiresAt: str | None = Field(None, description="When it stops holding by itself, if it does.")
    project: str | None = Field(
        None, description="The project it is about ('this repo uses pnpm'); absent: the user's, everywhere."
    )

    def expired(self, now: str) -> bool:
        """Whether it has run out by `now` (a stored timestamp)."""
        return self.expiresAt is not None and self.expiresAt <= now

    def held_at(self, moment: str) -> bool:
        """Whether it was believed at `moment`: recorded by then (createdAt is when it began to
        hold), not yet superseded or withdrawn (validTo), not yet run out (expiresAt)."""
        return self.createdAt <= moment and (self.validTo is None or moment < self.validTo) and not self.expired(moment)


class KnowledgeEntry(Model):
    """Something the assistant stated or did that it should stay consistent with."""

    model_config = ConfigDict(extra="allow")

    id: str
    content: str
    confidence: float = Field(1.0, ge=0, le=1)
    createdAt: str = ""
    source: str = "unknown"


class FailingBatch(Model):
    """A batch of a thread whose LLM replies could not be used, counted so that it is not retried for ever."""

    model_config = ConfigDict(extra="allow")

    firstPageId: str
    attempts: int = Field(1, ge=1)
    reason: str = ""
    at: str = ""


class SetAsideBatch(Model):
    """Exchanges the updater gave up on: still stored, searched and exported, but not analysed
    again until someone asks (flush_memory with retry_failed)."""

    model_config = ConfigDict(extra="allow")

    thread: str = ""
    pageIds: list[str]
    reason: str
    at: str
    attempts: int = Field(1, ge=1)


class AnalysisProgress(Model):
    """How far the updater has read the page log, so that a restart resumes instead of losing work.

    Page numbers are positions in the append-only log. A page is analysed when its number is below
    `allBefore`, or below the entry of its thread in `threads` (thread "" = pages without one).
    Entries at or below `allBefore` are dropped, so the map stays small however many threads pass.
    """

    model_config = ConfigDict(extra="allow")

    allBefore: int = Field(0, ge=0)
    threads: dict[str, int] = Field(default_factory=dict)
    hostBefore: int = Field(
        0, ge=0, description="Pages below this have had their host_memory applied (0: the host never sent any)."
    )
    failing: dict[str, FailingBatch] = Field(
        default_factory=dict, description="Per thread: the batch whose replies keep being unusable."
    )
    setAside: list[SetAsideBatch] = Field(
        default_factory=list, description="Batches given up on after memory.max_batch_attempts unusable replies."
    )
    erasing: list[str] = Field(
        default_factory=list,
        description="Exchanges being erased from the page log (JSON files): positions here already count "
        "without them. Left only by a crash before the log was rewritten; the store finishes the erase "
        "the next time it reads this memory.",
    )

    def set_aside_pages(self) -> int:
        return sum(len(batch.pageIds) for batch in self.setAside)


class SessionState(Model):
    """What is kept about one mid-term session (a thread, or a day of thread-less exchanges).

    Its size is not stored: it is counted from the page log. `counted` is the size at the last
    consolidation, since heat counts only the exchanges after it (MemoryOS resets them).
    """

    model_config = ConfigDict(extra="allow")

    visits: int = Field(0, ge=0)
    lastVisit: str = ""
    counted: int = Field(0, ge=0)
    archived: bool = False
    summary: str = ""
    keywords: list[str] = Field(default_factory=list)


class MemoryDocument(Model):
    """memory.json: the structured memory of one user (or one user's agent).

    Unknown fields are kept as they are, so a newer writer's additions survive an older reader.
    """

    model_config = ConfigDict(extra="allow")

    version: str = SCHEMA_VERSION
    lastUpdated: str = ""
    user: UserSections = Field(default_factory=UserSections)
    history: HistorySections = Field(default_factory=HistorySections)
    facts: list[Fact] = Field(default_factory=list)
    assistantKnowledge: list[KnowledgeEntry] = Field(default_factory=list)
    analysis: AnalysisProgress = Field(default_factory=AnalysisProgress)
    sessions: dict[str, SessionState] = Field(default_factory=dict)

    def is_empty(self) -> bool:
        sections = [*self.user.__dict__.values(), *self.history.__dict__.values()]
        holding = [fact for fact in self.facts if fact.validTo is None]
        return not holding and not self.assistantKnowledge and not any(s.summary for s in sections)
