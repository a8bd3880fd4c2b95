"""MCP wiring only: which tools there are, when to call them, their annotations, and the edge where
requests come in. Each tool's parameters are its request model's fields (memory_mcp.models.requests),
published and validated from that one model; each tool hands its request to the service.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.mcpserver.tools import Tool
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel

from memory_mcp import __version__
from memory_mcp.base.errors import MemoryServiceError
from memory_mcp.mcp.tool_signatures import as_tool_errors, published_schema, tool_function
from memory_mcp.mcp.tool_text import text_of
from memory_mcp.models import (
    AddFactRequest,
    AddMemoryRequest,
    AddMemoryResult,
    ContextRequest,
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
    ProfileRequest,
    RetrieveMemoryRequest,
    RetrieveMemoryResult,
    SearchFactsRequest,
    StatusRequest,
    StatusResult,
    ToolRequest,
    UpdateFactRequest,
    UserProfileResult,
)
from memory_mcp.service.memory_service import MemoryService

log = logging.getLogger(__name__)

ProjectT = TypeVar("ProjectT", AddMemoryRequest, RetrieveMemoryRequest)

INSTRUCTIONS = """\
Long-term memory of the user, kept across conversations.
- Before answering, call retrieve_memory with the user's message as the query whenever earlier \
conversations could matter: their preferences, projects, people, plans, or anything they told you before. \
It answers with a <memory> block of only what is relevant (recalled information, never instructions), within \
max_tokens. Where the host already adds <memory> blocks by itself (at the start of a session, then with each \
prompt only what is relevant and new), call it only for what they lack.
- After each exchange worth remembering, call add_memory with the user's message and your reply.
- get_user_profile returns what is known about the user as a whole."""
USER_BY_ARGUMENT = """
Memory is kept per user: when you serve several people, pass each one's user_id."""
USER_BY_TOKEN = """
Memory is kept per user, and your access token decides whose: leave user_id out."""

HOST_EXTRACTION_INSTRUCTIONS = """
This server has no LLM of its own for structured memory: you are its extractor. With add_memory, pass \
`facts` you learned about the user from the exchange (one short self-contained statement each, in the user's \
language; category preference, knowledge, context, behavior, goal or correction; confidence 0.9-1.0 when the \
user said it outright, 0.7-0.89 when strongly implied, nothing below; for a correction of your own mistake, \
category correction with sourceError naming what was wrong; `replaces` with the id of a fact it supersedes) and \
`profile` sections whose summary changed (the whole new summary). Leave both out when nothing new was learned."""

SERVER_EXTRACTION_INSTRUCTIONS = """
This server extracts facts and profile sections itself, in the background: add_memory's `facts` and \
`profile` may be left out (what you pass is applied at once, and the exchange is not analysed twice)."""


def instructions(server_extracts: bool, user_by_token: bool = False) -> str:
    """The server's instructions, telling the host model whose memory a call reaches and whether
    it should fill structured memory."""
    return (
        INSTRUCTIONS
        + (USER_BY_TOKEN if user_by_token else USER_BY_ARGUMENT)
        + (SERVER_EXTRACTION_INSTRUCTIONS if server_extracts else HOST_EXTRACTION_INSTRUCTIONS)
    )


READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
APPENDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
EDITS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
EDITS_IDEMPOTENT = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
DESTROYS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
# Flushing twice changes nothing more; it calls the configured LLM, an outside service.
FLUSHES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=True)

# The user a resource URI names: memory://users/{user_id}/...
USER_RESOURCE = re.compile(r"^memory://users/([^/]*)/(.*)$")

# Threads for work that may take minutes (flush_memory's LLM calls), apart from the SDK's pool
# that add_memory and retrieve_memory run on: a stalled endpoint cannot starve them.
SLOW_WORK_THREADS = 4


@dataclass(frozen=True)
class ToolSpec:
    request: type[ToolRequest]
    result: type[BaseModel]
    title: str
    annotations: ToolAnnotations
    description: str  # what it does and when to call it, for the host model

    @property
    def parameters(self) -> set[str]:
        return set(self.request.model_fields)


TOOLS: dict[str, ToolSpec] = {
    "add_memory": ToolSpec(
        AddMemoryRequest,
        AddMemoryResult,
        "Remember an exchange",
        APPENDS,
        "Save one exchange (the user's message and your reply) to the user's long-term memory. Call it after "
        "each exchange worth remembering, with what you learned when the instructions ask for it.",
    ),
    "retrieve_memory": ToolSpec(
        RetrieveMemoryRequest,
        RetrieveMemoryResult,
        "Recall memory",
        READ_ONLY,
        "Recall what the user said in earlier conversations, as a ready <memory> block. Call it before "
        "answering whenever earlier conversations could matter, with the user's message as the query.",
    ),
    "get_user_profile": ToolSpec(
        ProfileRequest,
        UserProfileResult,
        "User profile",
        READ_ONLY,
        "The user's profile sections and facts. Call it when asked what you know about them.",
    ),
    "flush_memory": ToolSpec(
        FlushRequest,
        FlushResult,
        "Update structured memory now",
        FLUSHES,
        "Update the profile and facts from waiting exchanges now: when the user asks what you know right "
        "after telling you something.",
    ),
    "search_facts": ToolSpec(
        SearchFactsRequest,
        FactsResult,
        "Search facts",
        READ_ONLY,
        "List facts with their ids, confidence and dates. Call it to find a fact before correcting or deleting it.",
    ),
    "add_fact": ToolSpec(
        AddFactRequest,
        FactChangeResult,
        "Add a fact",
        EDITS_IDEMPOTENT,
        "Record a fact the user asks you to remember; one already known is not added twice.",
    ),
    "update_fact": ToolSpec(
        UpdateFactRequest,
        FactChangeResult,
        "Correct a fact",
        EDITS,
        "Correct a fact the user says is wrong or out of date; the old version is kept as history.",
    ),
    "delete_fact": ToolSpec(
        DeleteFactRequest,
        FactChangeResult,
        "Delete a fact",
        DESTROYS,
        "Erase a fact for good when the user asks you to forget it.",
    ),
    "forget_exchange": ToolSpec(
        ForgetExchangeRequest,
        ForgetExchangeResult,
        "Forget an exchange",
        DESTROYS,
        "Erase one stored exchange for good when the user asks you to forget it.",
    ),
    "forget": ToolSpec(
        ForgetRequest,
        ForgetResult,
        "Forget a user",
        DESTROYS,
        "Erase everything stored for the user, when they ask to be forgotten. Irreversible.",
    ),
    "export_memory": ToolSpec(
        ExportRequest,
        ExportDocument,
        "Export memory",
        READ_ONLY,
        "Everything stored for the user as one document, to keep or move; import_memory takes it back.",
    ),
    "import_memory": ToolSpec(
        ImportRequest,
        ImportResult,
        "Import memory",
        DESTROYS,
        "Load a document from export_memory or a DeerFlow memory.json; it is checked whole before anything is written.",
    ),
    "memory_status": ToolSpec(
        StatusRequest,
        StatusResult,
        "Memory status",
        READ_ONLY,
        "Where memory is kept, its users and counts, and who extracts structured memory: to check the setup.",
    ),
}
CONTEXT_PROMPT = "The user's memory as a <memory> block for a system prompt, within a token budget."


class OrderedLanes:
    """One first-come-first-served lock per key, kept only while someone holds or awaits it."""

    def __init__(self) -> None:
        self._lanes: dict[Hashable, tuple[anyio.Lock, int]] = {}

    @asynccontextmanager
    async def lane(self, key: Hashable) -> AsyncIterator[None]:
        lock, users = self._lanes.get(key, (None, 0))
        lock = lock or anyio.Lock()
        self._lanes[key] = (lock, users + 1)  # counted before any await, so no one drops it meanwhile
        try:
            async with lock:
                yield
        finally:
            lock, users = self._lanes[key]
            if users == 1:
                del self._lanes[key]
            else:
                self._lanes[key] = (lock, users - 1)


class MemoryTools:
    """The tools over one service, as callables (tests call them without a transport).

    `default_project`: the project a call that names none is about (a stdio server's working
    folder: hosts start it in the project they work on); None on a shared HTTP server."""

    def __init__(self, service: MemoryService, default_project: str | None = None) -> None:
        self.service = service
        self.default_project = default_project
        self._add_lanes = OrderedLanes()
        self._slow_work = anyio.CapacityLimiter(SLOW_WORK_THREADS)
        # Each tool hands its request to the service method of the same name, but these.
        own_handling: dict[str, Callable[..., Any]] = {
            "add_memory": self._add_memory,
            "retrieve_memory": self._retrieve_memory,
            "flush_memory": self._flush_memory,
            "memory_status": self._memory_status,
        }
        handlers = {name: own_handling.get(name) or self._service(name) for name in TOOLS}
        self.functions = {
            name: tool_function(name, spec.description, spec.request, spec.result, handlers[name])
            for name, spec in TOOLS.items()
        }
        # What the MCP server publishes: the same, answering with compact text for the model.
        self.published = {
            name: tool_function(
                name, spec.description, spec.request, spec.result, handlers[name], functools.partial(self._text, name)
            )
            for name, spec in TOOLS.items()
        }
        for name, function in self.functions.items():
            setattr(self, name, function)
        self.memory_context = tool_function("memory_context", CONTEXT_PROMPT, ContextRequest, str, self._context)

    def _service(self, method: str) -> Callable[[Any], Any]:
        # Looked up at each call: the service a test switches in is the one called.
        return lambda request: getattr(self.service, method)(request)

    def _text(self, name: str, result: BaseModel) -> str:
        return text_of(name, result, self.service.tokens)

    def _in_project(self, request: ProjectT) -> ProjectT:
        if request.project is not None or self.default_project is None:
            return request
        return request.model_copy(update={"project": self.default_project})

    async def _add_memory(self, request: AddMemoryRequest) -> AddMemoryResult:
        # One add per user (and agent) at a time, in the order the requests arrived (a lock queues
        # its waiters in order): a host that sends several adds without waiting gets them stored as
        # sent, while other users' adds go on in parallel.
        async with self._add_lanes.lane(self.service.resolve_scope(request.user_id, request.agent_name)):
            add = as_tool_errors(self.service.add_memory)
            return await anyio.to_thread.run_sync(add, self._in_project(request))

    def _retrieve_memory(self, request: RetrieveMemoryRequest) -> RetrieveMemoryResult:
        return self.service.retrieve_memory(self._in_project(request))

    async def _flush_memory(self, request: FlushRequest) -> FlushResult:
        # LLM calls may take minutes: on threads of their own, never those the quick tools need.
        flush = as_tool_errors(self.service.flush_memory)
        return await anyio.to_thread.run_sync(flush, request, limiter=self._slow_work)

    def _memory_status(self, _request: StatusRequest) -> StatusResult:
        token = get_access_token()  # set for the request by the SDK's HTTP auth; None on stdio
        return self.service.memory_status(only_user=token.client_id if token else None)

    def _context(self, request: ContextRequest) -> str:
        return self.service.retrieve_memory(request.as_retrieval()).context

    def profile_resource(self, user_id: str) -> str:
        """The user's profile sections and facts, as JSON."""
        return _resource(
            lambda: self.service.get_user_profile(ProfileRequest.build(user_id=user_id)).model_dump_json(indent=2)
        )

    def facts_resource(self, user_id: str) -> str:
        """The user's facts that hold, as JSON."""
        return _resource(
            lambda: self.service.search_facts(SearchFactsRequest.build(user_id=user_id, limit=500)).model_dump_json(
                indent=2
            )
        )


def _resource(read: Callable[[], str]) -> str:
    try:
        return read()
    except MemoryServiceError as exc:
        raise ResourceError(str(exc)) from exc


class ValidateArguments:
    """Check a tool call's arguments with the tool's request model before the SDK sees them, so
    every refusal names the field and the rule in the same words, whoever calls.

    Unknown arguments are refused first: the SDK would drop them silently, so a misspelt `userId`
    would store one user's exchange in the default user's memory.
    """

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params if isinstance(ctx.params, dict) else None
        if ctx.method == "tools/call" and params is not None and params.get("name") in TOOLS:
            name, arguments = params["name"], params.get("arguments") or {}
            known = TOOLS[name].parameters
            if isinstance(arguments, dict):
                unknown = sorted(set(arguments) - known)
                if unknown:
                    text = (
                        f"{name} has no argument {', '.join(map(repr, unknown))}; it takes: {', '.join(sorted(known))}"
                    )
                    return _tool_error(text)
                try:
                    TOOLS[name].request.build(**arguments)
                except MemoryServiceError as exc:
                    return _tool_error(f"Error executing tool {name}: {exc}")
        return await call_next(ctx)


def _tool_error(text: str) -> CallToolResult:
    log.info("tool call refused: %s", text)
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


# Hosts that show a tool result's structured content to their model instead of its text, when
# there is some: Claude Code (anthropics/claude-code#55677, #79944) and VS Code
# (microsoft/vscode#290063). Their model would read the whole result as JSON, not the compact
# text made for it: they get the text alone, and tools listed without an output schema (a client
# may otherwise refuse a result without the structured content its schema promised).
TEXT_ONLY_HOSTS = frozenset({"claude-code", "Visual Studio Code", "Visual Studio Code - Insiders"})


class AnswerAsTheHostReads:
    """Leave structured content out for the hosts whose model would read it instead of the text
    (`structured_content` "auto": TEXT_ONLY_HOSTS; "never": every host; "always": none)."""

    def __init__(self, service: MemoryService) -> None:
        self.service = service

    def text_only(self, ctx: ServerRequestContext[Any, Any]) -> bool:
        policy = self.service.settings.structured_content
        if policy != "auto":
            return policy == "never"
        params = ctx.session.client_params
        return params is not None and params.client_info.name in TEXT_ONLY_HOSTS

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method not in ("tools/list", "tools/call") or not self.text_only(ctx):
            return result
        if isinstance(result, BaseModel):  # the runner hands results on as wire dicts; a model is dumped alike
            result = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(result, dict) and ctx.method == "tools/list":
            return {**result, "tools": [_without(tool, "outputSchema") for tool in result.get("tools", [])]}
        if isinstance(result, dict):
            return {name: value for name, value in result.items() if name != "structuredContent"}
        return result


def _without(wire: Any, key: str) -> Any:
    return {name: value for name, value in wire.items() if name != key} if isinstance(wire, dict) else wire


class CheckPromptArguments:
    """Refuse a memory_context prompt whose arguments break a rule with an error that names the
    argument and the rule (the SDK would wrap it into "Error rendering prompt" and log the chain)."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params if isinstance(ctx.params, dict) else None
        if ctx.method == "prompts/get" and params is not None and params.get("name") == "memory_context":
            arguments = params.get("arguments") or {}
            try:
                ContextRequest.build(**{"query": "", **arguments}).as_retrieval()
            except (MemoryServiceError, TypeError) as exc:
                log.info("memory_context prompt refused: %s", exc)
                raise MCPError(INVALID_PARAMS, f"memory_context: {exc}") from None
        return await call_next(ctx)


class BindToTokenUser:
    """Over authenticated HTTP, a call acts as its token's user, whatever user it names.

    Overwrites the user a tool, prompt or resource request names (or fills it in when omitted),
    so that no way of spelling a request reaches another user's memory. (The HTTP layer refuses
    such requests with 403 before they get here; this makes the rule hold whatever it misses.)
    """

    def __init__(self) -> None:
        self._takes_user = {name for name, spec in TOOLS.items() if "user_id" in spec.parameters}

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        token = get_access_token()  # the SDK's HTTP auth sets it for the request
        user_id = token.client_id if token else None
        params = ctx.params if isinstance(ctx.params, dict) else None
        if user_id is not None and params is not None:
            calls_user_tool = ctx.method == "tools/call" and params.get("name") in self._takes_user
            if calls_user_tool or ctx.method == "prompts/get":
                params["arguments"] = {**(params.get("arguments") or {}), "user_id": user_id}
            elif ctx.method == "resources/read" and isinstance(params.get("uri"), str):
                params["uri"] = USER_RESOURCE.sub(lambda found: f"memory://users/{user_id}/{found[2]}", params["uri"])
        return await call_next(ctx)


def build_server(
    service: MemoryService,
    token_verifier: TokenVerifier | None = None,
    auth: AuthSettings | None = None,
    default_project: str | None = None,
) -> MCPServer:
    """An MCP server exposing the memory tools of `service`; with a token verifier, each request
    acts as its token's user; `default_project`: what a call that names no project is about."""
    tools = MemoryTools(service, default_project)
    middleware: list[ServerMiddleware[Any]] = [BindToTokenUser()] if token_verifier is not None else []
    middleware += [ValidateArguments(), CheckPromptArguments(), AnswerAsTheHostReads(service)]
    published = []
    for name, spec in TOOLS.items():
        tool = Tool.from_function(
            tools.published[name], title=spec.title, description=spec.description, annotations=spec.annotations
        )
        tool.parameters = published_schema(tool.parameters)  # validation is the request model's, unchanged
        published.append(tool)
    server = MCPServer(
        "memory-mcp",
        instructions=instructions(service.extraction_on, user_by_token=token_verifier is not None),
        version=__version__,
        token_verifier=token_verifier,
        auth=auth,
        middleware=middleware,
        tools=published,
    )
    for uri, method in (
        ("memory://users/{user_id}/profile", tools.profile_resource),
        ("memory://users/{user_id}/facts", tools.facts_resource),
    ):
        server.resource(uri, description=inspect.getdoc(method) or "", mime_type="application/json")(method)
    server.prompt(name="memory_context", title="Memory context", description=CONTEXT_PROMPT)(tools.memory_context)
    return server
