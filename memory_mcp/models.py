"""Pydantic models at every boundary: what is stored, what tools accept, what they return.

The stored document keeps DeerFlow's memory.json field names (camelCase) so files written by
either system read the same; tool results use MemoryOS's snake_case names.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self, TypeVar, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from memory_mcp.errors import InvalidInput
from memory_mcp.ids import validate_identifier

SCHEMA_VERSION = "1.0"
FactCategory = Literal["preference", "knowledge", "context", "behavior", "goal", "correction"]
UserSectionName = Literal["workContext", "personalContext", "topOfMind"]
HistorySectionName = Literal["recentMonths", "earlierContext", "longTermBackground"]
SectionName = Literal[UserSectionName, HistorySectionName]
USER_SECTION_NAMES: tuple[str, ...] = get_args(UserSectionName)
HISTORY_SECTION_NAMES: tuple[str, ...] = get_args(HistorySectionName)
MAX_META_DATA_DEPTH = 32
MAX_QUERY_CHARS = 20_000
MAX_FACT_CHARS = 2000
MAX_SECTION_CHARS = 4000
MAX_HOST_FACTS = 50
FACT_ID_PATTERN = r"^fact_[0-9a-f]{8}$"
TIMESTAMP_RULE = "ISO 8601 (2024-05-01T13:56:00Z) or 'YYYY-MM-DD HH:MM:SS'"


def utc_now() -> str:
    """The current time in the one stored form."""
    return format_timestamp(datetime.now(UTC))


def format_timestamp(moment: datetime) -> str:
    """Stored form: UTC, second precision, `Z` suffix. Naive times are taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def normalise_timestamp(value: str) -> str:
    """Accept ISO 8601 or `YYYY-MM-DD HH:MM:SS` and return the stored form."""
    try:
        return format_timestamp(datetime.fromisoformat(value.strip()))
    except (ValueError, OverflowError):  # OverflowError: a valid date that leaves the calendar in UTC
        raise ValueError(f"timestamp must be {TIMESTAMP_RULE} (got {value!r:.60})") from None


# --- stored data -------------------------------------------------------------------------


class Page(BaseModel):
    """One exchange, stored verbatim: what the user said and what the agent answered."""

    page_id: str
    user_input: str
    agent_response: str
    timestamp: str
    meta_data: dict[str, Any] | None = None
    thread_id: str | None = None


class ScoredPage(Page):
    """A page returned by retrieval, with its relevance to the query (higher is closer)."""

    score: float


FactText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_FACT_CHARS)]


class ProposedFact(BaseModel):
    """A fact someone proposes to remember (the host model, or the server's updater), before the
    rules decide whether it enters memory."""

    model_config = ConfigDict(extra="forbid")

    content: FactText = Field(description="One short, self-contained statement, in the user's language.")
    category: FactCategory
    confidence: float = Field(ge=0, le=1, description="0.9-1.0 stated outright; 0.7-0.89 strongly implied.")
    sourceError: str | None = Field(
        None, max_length=MAX_FACT_CHARS, description="For a correction: the mistaken belief or action to avoid."
    )
    replaces: str | None = Field(
        None, pattern=FACT_ID_PATTERN, description="Id of a current fact this one supersedes (kept as history)."
    )


class HostMemory(BaseModel):
    """What the host model learned from one exchange, stored with the exchange itself so that the
    page and what it taught are written as one record; applied to memory.json right after."""

    model_config = ConfigDict(extra="forbid")

    facts: list[ProposedFact] = Field(default_factory=list)
    profile: dict[SectionName, str] = Field(default_factory=dict)


class StoredPage(Page):
    """A page as the log keeps it. Tool results carry the plain `Page` fields only."""

    host_memory: HostMemory | None = None

    def record(self) -> str:
        """The page as one log record; without host memory when it carries none (the usual case)."""
        return self.model_dump_json(exclude=None if self.host_memory is not None else {"host_memory"})


class Section(BaseModel):
    """One profile section: a short summary the updater rewrites as it learns."""

    model_config = ConfigDict(extra="allow")

    summary: str = ""
    updatedAt: str = ""


class UserSections(BaseModel):
    model_config = ConfigDict(extra="allow")

    workContext: Section = Field(default_factory=Section)
    personalContext: Section = Field(default_factory=Section)
    topOfMind: Section = Field(default_factory=Section)


class HistorySections(BaseModel):
    model_config = ConfigDict(extra="allow")

    recentMonths: Section = Field(default_factory=Section)
    earlierContext: Section = Field(default_factory=Section)
    longTermBackground: Section = Field(default_factory=Section)


class Fact(BaseModel):
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


class KnowledgeEntry(BaseModel):
    """Something the assistant stated or did that it should stay consistent with."""

    model_config = ConfigDict(extra="allow")

    id: str
    content: str
    confidence: float = Field(1.0, ge=0, le=1)
    createdAt: str = ""
    source: str = "unknown"


class FailingBatch(BaseModel):
    """A batch of a thread whose LLM replies could not be used, counted so that it is not retried for ever."""

    model_config = ConfigDict(extra="allow")

    firstPageId: str
    attempts: int = Field(1, ge=1)
    reason: str = ""
    at: str = ""


class SetAsideBatch(BaseModel):
    """Exchanges the updater gave up on: still stored, searched and exported, but not analysed
    again until someone asks (flush_memory with retry_failed)."""

    model_config = ConfigDict(extra="allow")

    thread: str = ""
    pageIds: list[str]
    reason: str
    at: str
    attempts: int = Field(1, ge=1)


class AnalysisProgress(BaseModel):
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

    def set_aside_pages(self) -> int:
        return sum(len(batch.pageIds) for batch in self.setAside)


class SessionState(BaseModel):
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


class MemoryDocument(BaseModel):
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


# --- tool requests -----------------------------------------------------------------------


class _Request(BaseModel):
    """Shared rules: unknown fields are errors and an empty optional id means "not given"."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def build(cls, **fields: Any) -> Self:
        """Validate tool arguments; any breach becomes one InvalidInput that names the field."""
        return parse_request(cls, **fields)

    @model_validator(mode="after")
    def _encodable(self) -> Self:
        """Text must be valid Unicode: an unpaired surrogate cannot be stored as UTF-8."""
        for name, value in self:
            where = _unencodable(value)
            if where is not None:
                raise ValueError(f"{name}{where} holds an unpaired surrogate: text must be valid Unicode")
        return self

    user_id: str | None = None
    agent_name: str | None = None

    @field_validator("user_id", "agent_name", mode="before")
    @classmethod
    def _empty_is_absent(cls, value: object) -> object:
        # Host models often send "" for optional fields they mean to leave out.
        return None if value == "" else value

    @field_validator("user_id", "agent_name")
    @classmethod
    def _check_identifier(cls, value: str | None, info: Any) -> str | None:
        return None if value is None else validate_identifier(info.field_name, value)


class AddMemoryRequest(_Request):
    user_input: str
    agent_response: str
    timestamp: str | None = None
    meta_data: dict[str, Any] | None = None
    thread_id: str | None = None
    facts: list[ProposedFact] | None = Field(None, max_length=MAX_HOST_FACTS)
    profile: dict[SectionName, Annotated[str, StringConstraints(max_length=MAX_SECTION_CHARS)]] | None = None

    @property
    def host_memory(self) -> HostMemory | None:
        """What the host model sent along with the exchange, if anything."""
        if not self.facts and not self.profile:
            return None
        profile = {name: summary.strip() for name, summary in (self.profile or {}).items() if summary.strip()}
        return HostMemory(facts=self.facts or [], profile=profile)

    @field_validator("timestamp", "thread_id", mode="before")
    @classmethod
    def _empty_optional_is_absent(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("timestamp")
    @classmethod
    def _normalise_timestamp(cls, value: str | None) -> str | None:
        return None if value is None else normalise_timestamp(value)

    @field_validator("thread_id")
    @classmethod
    def _check_thread_id(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > 256 or not value.isprintable()):
            raise ValueError("thread_id must be 1-256 printable characters")
        return value

    @field_validator("meta_data")
    @classmethod
    def _check_meta_data(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            if _nesting_depth(value) > MAX_META_DATA_DEPTH:
                raise ValueError(f"meta_data may nest at most {MAX_META_DATA_DEPTH} levels deep")
            _reject_non_finite(value)
        return value


class RetrieveMemoryRequest(_Request):
    query: str = Field(max_length=MAX_QUERY_CHARS)
    relationship_with_user: str = Field("", max_length=200)
    style_hint: str = Field("", max_length=1000)
    max_results: int = Field(10, ge=1, le=100)
    max_tokens: int | None = Field(None, ge=100, le=8000)
    current_context: str = Field("", max_length=MAX_QUERY_CHARS)
    include_archived: bool = False


class FlushRequest(_Request):
    retry_failed: bool = False


class ProfileRequest(_Request):
    include_knowledge: bool = True
    include_assistant_knowledge: bool = False


RequestT = TypeVar("RequestT", bound=BaseModel)


def parse_request(model: type[RequestT], **fields: Any) -> RequestT:
    """Validate tool arguments, turning pydantic's report into one InvalidInput naming the field."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = _field_path(error["loc"])
            message = error["msg"].removeprefix("Value error, ")
            problems.append(message if not field or message.startswith(field) else f"{field}: {message}")
        raise InvalidInput("; ".join(problems)) from None


def _field_path(location: tuple[int | str, ...]) -> str:
    """A field as a reader writes it: facts[2].confidence."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path


def _unencodable(value: Any) -> str | None:
    """Where in `value` a string cannot be encoded as UTF-8 ("" for the value itself), or None."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return where
        elif isinstance(item, dict):
            stack.extend((key, f"{where} key") for key in item)
            stack.extend((child, f"{where}.{key}") for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))
        elif isinstance(item, BaseModel):
            stack.extend((child, f"{where}.{key}") for key, child in item)
    return None


def _nesting_depth(value: Any) -> int:
    """Depth of nested objects and arrays, measured without recursion (hostile input can be deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        deepest = max(deepest, depth)
        if deepest > MAX_META_DATA_DEPTH:
            break
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def _reject_non_finite(value: Any) -> None:
    """meta_data is stored as strict JSON, which has no NaN or Infinity."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        raise ValueError("meta_data must be plain JSON: NaN and Infinity are not allowed") from None
    except TypeError as exc:
        raise ValueError(f"meta_data must be plain JSON ({exc})") from None


# --- tool results ------------------------------------------------------------------------


class SkippedFact(BaseModel):
    index: int = Field(description="Position in the facts that were sent.")
    content: str
    reason: Literal["duplicate", "below_threshold", "upload_mention", "over_max_facts"]


class SupersededFact(BaseModel):
    id: str = Field(description="The fact that no longer holds (kept as history).")
    superseded_by: str


class StructuredUpdate(BaseModel):
    """What the facts and profile sent with an exchange changed in structured memory."""

    facts_added: list[Fact]
    facts_skipped: list[SkippedFact]
    facts_superseded: list[SupersededFact]
    sections_updated: list[str]


class AddMemoryResult(BaseModel):
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


class ProfileSections(BaseModel):
    user: UserSections
    history: HistorySections


class RetrieveMemoryResult(BaseModel):
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


class UserProfileResult(BaseModel):
    status: Literal["success"] = "success"
    user_id: str
    agent_name: str | None
    user: UserSections
    history: HistorySections
    facts: list[Fact] | None = None
    assistant_knowledge: list[KnowledgeEntry] | None = None
    lastUpdated: str
    notes: list[str] = Field(default_factory=list, description="Why the profile is empty, when it is.")


ExtractionMode = Literal["server", "host", "off"]


class FlushResult(BaseModel):
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


# --- users own their memory ----------------------------------------------------------------

EXPORT_FORMAT = "memory-mcp/export"
EXPORT_VERSION = 1


class ScopeExport(BaseModel):
    """The memory of one agent of the exported user."""

    model_config = ConfigDict(extra="forbid")

    memory: MemoryDocument
    pages: list[Page]


class ExportDocument(BaseModel):
    """Everything stored for a user (or one agent of a user), as one JSON document.

    What export_memory returns is exactly what import_memory accepts.
    """

    model_config = ConfigDict(extra="forbid")

    format: Literal["memory-mcp/export"] = EXPORT_FORMAT
    version: Literal[1] = EXPORT_VERSION
    exported_at: str
    user_id: str
    agent_name: str | None = None
    memory: MemoryDocument
    pages: list[Page]
    agents: dict[str, ScopeExport] = Field(
        default_factory=dict, description="With a whole user's export: each of their agents' memory."
    )

    @field_validator("user_id")
    @classmethod
    def _check_user(cls, value: str) -> str:
        return validate_identifier("user_id", value)

    @field_validator("agent_name")
    @classmethod
    def _check_agent(cls, value: str | None) -> str | None:
        return None if value is None else validate_identifier("agent_name", value)

    @field_validator("agents")
    @classmethod
    def _check_agents(cls, value: dict[str, ScopeExport]) -> dict[str, ScopeExport]:
        for name in value:
            validate_identifier("agents key", name)
        return value


class SearchFactsRequest(_Request):
    query: str = Field("", max_length=MAX_QUERY_CHARS)
    category: FactCategory | None = None
    limit: int = Field(20, ge=1, le=500)
    include_superseded: bool = False


class AddFactRequest(_Request):
    content: str = Field(min_length=1, max_length=2000)
    category: FactCategory = "context"
    confidence: float = Field(0.9, ge=0, le=1)

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("content must not be blank")
        return value.strip()


class UpdateFactRequest(_Request):
    fact_id: str = Field(min_length=1, max_length=64)
    content: str | None = Field(None, min_length=1, max_length=2000)
    category: FactCategory | None = None
    confidence: float | None = Field(None, ge=0, le=1)


class DeleteFactRequest(_Request):
    fact_id: str = Field(min_length=1, max_length=64)


class ForgetRequest(_Request):
    confirm: str


class ExportRequest(_Request):
    pass


class ImportRequest(_Request):
    data: dict[str, Any]
    mode: Literal["merge", "replace"] = "merge"


class FactsResult(BaseModel):
    status: Literal["success"] = "success"
    user_id: str
    agent_name: str | None
    facts: list[ScoredFact]
    total: int = Field(description="Facts matching the filters before `limit`.")


class FactChangeResult(BaseModel):
    status: Literal["success"] = "success"
    user_id: str
    agent_name: str | None
    action: Literal["added", "updated", "replaced", "deleted", "duplicate"]
    fact: Fact
    message: str


class ForgetResult(BaseModel):
    status: Literal["success"] = "success"
    user_id: str
    agent_name: str | None
    removed_pages: int
    removed_facts: int
    message: str


class ImportResult(BaseModel):
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


class UserSummary(BaseModel):
    user_id: str
    agents: list[str] = Field(default_factory=list)
    pages: int = 0
    facts: int = 0
    pending_pages: int = 0
    set_aside_pages: int = 0
    problem: str | None = Field(None, description="Why this user's memory cannot be read (file and reason), if so.")


class StatusResult(BaseModel):
    status: Literal["success"] = "success"
    version: str
    data_dir: str
    storage_ok: bool = Field(description="Whether memory can be stored right now (the data directory is writable).")
    users: list[UserSummary]
    llm_configured: bool
    extraction: ExtractionMode = Field(
        description="server: this server's LLM updater extracts; host: facts arrive from the host model; off: neither."
    )
    llm_model: str | None
    llm_base_url: str | None
    token_counter: Literal["tiktoken", "char"]
    queued_updates: int
    last_update_errors: list[str]
    notes: list[str] = Field(default_factory=list)
