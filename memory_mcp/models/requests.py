"""What each tool accepts: one model per tool, the one source of its parameters.

A model's fields are the tool's parameters, in order, with their descriptions, defaults and
bounds: the MCP server publishes each model's JSON schema as the tool's input schema and
validates calls with the same model, so the two cannot drift. `build` turns any breach into one
InvalidInput that names the field and the rule.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Self, TypeAlias, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.config import JsonDict

from memory_mcp.base.clock import normalise_timestamp
from memory_mcp.base.errors import InvalidInput
from memory_mcp.base.ids import IDENTIFIER_RULE, validate_identifier
from memory_mcp.base.model import Model
from memory_mcp.models.stored import MAX_FACT_CHARS, FactCategory, HostFact, HostMemory, MemoryText, SectionName

MAX_META_DATA_DEPTH = 32
MAX_QUERY_CHARS = 20_000
MAX_SECTION_CHARS = 4000
MAX_HOST_FACTS = 50
MAX_THREAD_ID_CHARS = 256
MAX_PATH_CHARS = 4096
# Published with each id, so a host sees the rule; "" is accepted too (it means "not given"). Written
# with `\w` ([A-Za-z0-9_] in a JSON Schema pattern), as it is in most tools twice: fewer tokens.
_ID_PATTERN: JsonDict = {"pattern": "^(" + IDENTIFIER_RULE.replace("A-Za-z0-9_", "\\w") + ")?$"}


def _absent_if_empty(value: object) -> object:
    # Host models often send "" for optional fields they mean to leave out.
    return None if value == "" else value


def _identifier(value: str | None, info: ValidationInfo) -> str | None:
    return value if not value else validate_identifier(info.field_name or "id", value)


# An optional id: "" counts as not given; otherwise it must match the rule.
UserId: TypeAlias = Annotated[
    str | None,
    BeforeValidator(_absent_if_empty),
    AfterValidator(_identifier),
    Field(description="Omit for the default user.", json_schema_extra=_ID_PATTERN),
]
AgentName: TypeAlias = Annotated[
    str | None,
    BeforeValidator(_absent_if_empty),
    AfterValidator(_identifier),
    Field(description="Omit for the user's own.", json_schema_extra=_ID_PATTERN),
]
FactId = Annotated[str, Field(min_length=1, max_length=64, description="From search_facts.")]


def _timestamp_or_none(value: str | None) -> str | None:
    return None if value is None else normalise_timestamp(value)


NEVER = "never"


def _expiry_or_never(value: str | None) -> str | None:
    return value if value in (None, NEVER) else normalise_timestamp(value)


# A moment as the caller may write it ("" counts as not given), stored in the one form of clock.py.
OptionalTimestamp = Annotated[str | None, BeforeValidator(_absent_if_empty), AfterValidator(_timestamp_or_none)]


def _printable(value: str | None, info: ValidationInfo) -> str | None:
    limit = MAX_PATH_CHARS if info.field_name == "project" else MAX_THREAD_ID_CHARS
    if value is not None and (len(value) > limit or not value.isprintable()):
        raise ValueError(f"{info.field_name} must be 1-{limit} printable characters")
    return value


ThreadId = Annotated[
    str | None,
    BeforeValidator(_absent_if_empty),
    AfterValidator(_printable),
    Field(json_schema_extra={"maxLength": MAX_THREAD_ID_CHARS}),
]
ProjectPath = Annotated[
    str | None,
    BeforeValidator(_absent_if_empty),
    AfterValidator(_printable),
    Field(description="Its project's folder; omit for the server's.", json_schema_extra={"maxLength": MAX_PATH_CHARS}),
]
Query = Annotated[str, Field(max_length=MAX_QUERY_CHARS)]


class ToolRequest(Model):
    """Shared rules: unknown fields are errors, and text must be storable (valid Unicode)."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def build(cls, **fields: Any) -> Self:
        """Validate tool arguments; any breach becomes one InvalidInput that names the field."""
        return parse_request(cls, **fields)

    @model_validator(mode="after")
    def _encodable(self) -> Self:
        """An unpaired surrogate cannot be stored as UTF-8."""
        for name, value in self:
            where = _unencodable(value)
            if where is not None:
                raise ValueError(f"{name}{where} holds an unpaired surrogate: text must be valid Unicode")
        return self


class AddMemoryRequest(ToolRequest):
    user_input: str = Field(description="What the user said, verbatim.")
    agent_response: str = Field(description="Your answer, verbatim.")
    timestamp: OptionalTimestamp = Field(None, description="When it was said (ISO 8601); omit for now.")
    meta_data: dict[str, Any] | None = Field(None, description="Any JSON object, kept as given.")
    user_id: UserId = None
    agent_name: AgentName = None
    thread_id: ThreadId = Field(None, description="The conversation it belongs to.")
    project: ProjectPath = None
    facts: list[HostFact] | None = Field(
        None,
        max_length=MAX_HOST_FACTS,
        description="What you learned, as the instructions say.",
    )
    profile: dict[SectionName, Annotated[MemoryText, StringConstraints(max_length=MAX_SECTION_CHARS)]] | None = Field(
        None,
        description="Sections this exchange changes -> each one's whole new summary.",
    )

    @property
    def host_memory(self) -> HostMemory | None:
        """What the host model sent along with the exchange, if anything."""
        if not self.facts and not self.profile:
            return None
        profile = {name: summary.strip() for name, summary in (self.profile or {}).items() if summary.strip()}
        return HostMemory(facts=self.facts or [], profile=profile)

    @field_validator("meta_data")
    @classmethod
    def _check_meta_data(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            if _nesting_depth(value) > MAX_META_DATA_DEPTH:
                raise ValueError(f"meta_data may nest at most {MAX_META_DATA_DEPTH} levels deep")
            _reject_non_finite(value)
        return value


class RetrieveMemoryRequest(ToolRequest):
    query: Query = Field(description="Usually the user's latest message.")
    relationship_with_user: str = Field("", max_length=200, description="Yours with the user, if any.")
    style_hint: str = Field("", max_length=1000, description="How you intend to answer; echoed back.")
    max_results: int = Field(10, ge=1, le=100, description="Older exchanges ranked.")
    user_id: UserId = None
    agent_name: AgentName = None
    max_tokens: int | None = Field(None, ge=100, le=8000, description="Budget of the block; omit for the default.")
    current_context: Query = Field("", description="The last few turns, to rank facts by.")
    include_archived: bool = Field(False, description="Also search archived sessions.")
    thread_id: ThreadId = Field(None, description="The conversation you are in: not given back.")
    project: ProjectPath = None
    since: OptionalTimestamp = Field(None, description="Only exchanges from then on (ISO 8601).")
    until: OptionalTimestamp = Field(None, description="Only exchanges up to then (a date: its midnight).")

    @model_validator(mode="after")
    def _check_window(self) -> RetrieveMemoryRequest:
        if self.since and self.until and self.since > self.until:
            raise ValueError(f"since ({self.since}) must not be later than until ({self.until})")
        return self


class ProfileRequest(ToolRequest):
    include_knowledge: bool = Field(True, description="Include the facts.")
    include_assistant_knowledge: bool = Field(False, description="Include what you said or did before.")
    user_id: UserId = None
    agent_name: AgentName = None


class FlushRequest(ToolRequest):
    user_id: UserId = None
    agent_name: AgentName = None
    retry_failed: bool = Field(False, description="Also retry exchanges set aside after failed replies.")


class SearchFactsRequest(ToolRequest):
    query: Query = Field("", description="Words to look for; empty: by confidence.")
    category: FactCategory | None = None
    limit: int = Field(20, ge=1, le=500)
    include_superseded: bool = Field(False, description="Also facts replaced or withdrawn.")
    as_of: OptionalTimestamp = Field(None, description="The facts believed then (ISO 8601); omit for now.")
    user_id: UserId = None
    agent_name: AgentName = None


class AddFactRequest(ToolRequest):
    content: MemoryText = Field(
        min_length=1, max_length=MAX_FACT_CHARS, description="A short self-contained statement."
    )
    category: FactCategory = "context"
    confidence: float = Field(0.9, ge=0, le=1)
    pinned: bool = Field(False, description="Always keep and show it.")
    expires_at: OptionalTimestamp = Field(None, description="When it stops holding (ISO 8601); omit for never.")
    project: ProjectPath = Field(None, description="Its project's folder if it holds only there.")
    user_id: UserId = None
    agent_name: AgentName = None

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("content must not be blank")
        return value.strip()


class UpdateFactRequest(ToolRequest):
    fact_id: FactId
    content: MemoryText | None = Field(None, min_length=1, max_length=MAX_FACT_CHARS, description="New wording.")
    category: FactCategory | None = None
    confidence: float | None = Field(None, ge=0, le=1)
    pinned: bool | None = None
    expires_at: Annotated[str | None, BeforeValidator(_absent_if_empty), AfterValidator(_expiry_or_never)] = Field(
        None, description="New end (ISO 8601), or 'never'. Omitted fields are kept."
    )
    user_id: UserId = None
    agent_name: AgentName = None

    @property
    def edits(self) -> dict[str, Any]:
        """The stored fields this request changes in place, by their stored names."""
        given: dict[str, Any] = {"category": self.category, "confidence": self.confidence, "pinned": self.pinned}
        edits = {name: value for name, value in given.items() if value is not None}
        if self.expires_at is not None:
            edits["expiresAt"] = None if self.expires_at == NEVER else self.expires_at
        return edits


class DeleteFactRequest(ToolRequest):
    fact_id: FactId
    user_id: UserId = None
    agent_name: AgentName = None


class ForgetExchangeRequest(ToolRequest):
    exchange_id: Annotated[str, Field(min_length=1, max_length=128, description="From retrieve_memory.")]
    user_id: UserId = None
    agent_name: AgentName = None


class ForgetRequest(ToolRequest):
    user_id: Annotated[str, AfterValidator(_identifier)] = Field(json_schema_extra=_ID_PATTERN)
    confirm: str = Field(description="The user_id again.")
    agent_name: AgentName = Field(None, description="Only this agent's memory; omit for all of the user's.")


class ExportRequest(ToolRequest):
    user_id: UserId = None
    agent_name: AgentName = None


class ImportRequest(ToolRequest):
    data: dict[str, Any] = Field(description="From export_memory, or a DeerFlow memory.json.")
    mode: Literal["merge", "replace"] = Field("merge", description="replace erases the user's memory first.")
    user_id: UserId = Field(None, description="Into this user instead of the document's.")


class StatusRequest(ToolRequest):
    """memory_status takes no arguments."""


class ContextRequest(ToolRequest):
    """The memory_context prompt's arguments (prompt arguments are strings)."""

    query: Query = Field(description="What the conversation is about: usually the user's latest message.")
    user_id: UserId = None
    agent_name: AgentName = None
    max_tokens: Annotated[str, StringConstraints(strip_whitespace=True)] = Field(
        "", description="Token budget (100-8000); empty for the default."
    )

    def as_retrieval(self) -> RetrieveMemoryRequest:
        return RetrieveMemoryRequest.build(
            query=self.query, user_id=self.user_id, agent_name=self.agent_name, max_tokens=self.max_tokens or None
        )


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
            stack.extend((child, f"{where}.{_shown(key)}") for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))
        elif isinstance(item, BaseModel):
            stack.extend((child, f"{where}.{key}") for key, child in item)
    return None


def _shown(key: Any) -> str:
    """A key as an error message can carry it: an unpaired surrogate is escaped, not sent."""
    return str(key).encode("utf-8", "backslashreplace").decode("utf-8")


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
