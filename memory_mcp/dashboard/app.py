"""The dashboard: a web page over the service, to see, search and correct what is remembered.

Server-rendered: Starlette (it comes with the MCP SDK) and Jinja2 templates, which escape all
they print, so remembered text can never become markup. Every page is a plain HTML document; a
small script keeps a refused form on its page and, behind bearer tokens, fetches every page with
the token. Run locally, it answers only its owner, who opens the address with the key it printed
(gate.py). No page may be framed or cached (headers.py). Every address it writes is root-relative,
never built from the Host header a client chooses. Every read and change goes through
MemoryService, so the dashboard holds no rule of its own, and every asset comes from the package:
it works offline.

A user's memory lives at /users/{user_id}, and each of their agents' at
/users/{user_id}/agents/{agent_name}, with the same pages below both.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from jinja2 import pass_context
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.datastructures import URL, FormData
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from memory_mcp.base.clock import now
from memory_mcp.base.errors import InvalidInput, NotFound
from memory_mcp.base.wording import extraction_said, waiting_said
from memory_mcp.dashboard.charts import weekly
from memory_mcp.dashboard.filters import FILTERS
from memory_mcp.dashboard.gate import OwnerGate, TokenGate, viewer
from memory_mcp.dashboard.headers import Forbidding
from memory_mcp.models import (
    AddFactRequest,
    DeleteFactRequest,
    ExportRequest,
    FlushRequest,
    ForgetExchangeRequest,
    ForgetRequest,
    ImportRequest,
    ProfileRequest,
    RetrieveMemoryRequest,
    SearchFactsRequest,
    UpdateFactRequest,
)
from memory_mcp.models.stored import FactCategory
from memory_mcp.recall.terms import index_terms
from memory_mcp.service.access import TokenRegistry
from memory_mcp.service.memory_service import MemoryService

HERE = Path(__file__).parent
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
FACT_CATEGORIES: tuple[str, ...] = get_args(FactCategory)
RECENT_EXCHANGES = 20
BROWSED_EXCHANGES = 200  # per page of a browse by thread or day
MAX_FACTS_SHOWN = 500  # the most search_facts gives at once; memory.max_facts is at most 500 too
SEARCH_RESULTS = 20
SESSIONS_SHOWN = 12
USER_ROOT = "/users/{user_id}"
AGENT_ROOT = "/users/{user_id}/agents/{agent_name}"
AGENT_ROUTE = "agent_"  # route names below an agent's root begin with this


@dataclass(frozen=True)
class Memory:
    """Whose memory a page is about: a user's own, or one of their agents'."""

    user_id: str
    agent_name: str | None = None

    @property
    def whose(self) -> dict[str, str | None]:
        """The memory as a request names it."""
        return {"user_id": self.user_id, "agent_name": self.agent_name}

    @property
    def label(self) -> str:
        return self.user_id if self.agent_name is None else f"{self.user_id} · agent {self.agent_name}"

    def url(self, request: Request, name: str, **params: Any) -> URL:
        """The address of page `name` of this memory."""
        if self.agent_name is None:
            return _path(request, name, user_id=self.user_id, **params)
        return _path(request, AGENT_ROUTE + name, user_id=self.user_id, agent_name=self.agent_name, **params)


Page = Callable[[Request, Memory], Awaitable[Response]]


def create_app(
    service: MemoryService,
    allowed_hosts: list[str] | None = None,
    tokens: TokenRegistry | None = None,
    owner_key: str | None = None,
) -> Starlette:
    """The dashboard over `service`. `allowed_hosts` (default: loopback names only) are the Host
    headers it answers: a page on another site cannot reach it by renaming itself (DNS rebinding).
    With `tokens`, every page needs a bearer token and shows only its user's memory. With
    `owner_key`, every page needs the cookie that opening `/?key=<owner_key>` sets: other accounts
    on this machine reach 127.0.0.1 too."""
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.filters.update(FILTERS)
    templates.env.globals["url_for"] = _url_for
    templates.env.globals["tokens_on"] = tokens is not None
    templates.env.globals["at"] = _at
    templates.env.globals["extraction_said"] = extraction_said
    templates.env.globals["waiting_said"] = waiting_said
    warming = _Warmer(service)

    def page(request: Request, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, values, status_code=status)

    def refusal(request: Request, status: int, message: str) -> HTMLResponse:
        heading = {400: "Cannot be shown", 403: "Not allowed"}.get(status, "Not found")
        return page(request, "missing.html", status=status, heading=heading, message=message)

    def cross_site(request: Request) -> Response | None:
        """The refusal of a change not sent from the dashboard's own pages (None: it was). A
        bearer token is that proof already (a browser never adds one by itself)."""
        if viewer(request) is not None or _same_origin(request):
            return None
        return refusal(request, 403, "Changes are taken only from this page itself.")

    def of_memory(handler: Page) -> Callable[[Request], Awaitable[Response]]:
        """The route for a page of one memory: refused for another user than the token's (before
        anything says whether that user exists), 404 when nothing is stored."""

        async def route(request: Request) -> Response:
            memory = Memory(request.path_params["user_id"], request.path_params.get("agent_name"))
            looking = viewer(request)
            if looking is not None and looking != memory.user_id:
                return refusal(request, 403, f"This token acts for {looking}; it cannot open another user's memory.")
            try:
                stored = service.is_stored(memory.user_id, memory.agent_name)
            except InvalidInput as exc:
                return refusal(request, 404, str(exc))
            if not stored:
                return refusal(request, 404, f"No memory is stored for {memory.label}.")
            try:
                return await handler(request, memory)
            except InvalidInput as exc:  # a search too long, say: changes say why on their own page
                return refusal(request, 400, str(exc))
            except NotFound as exc:  # forgotten meanwhile
                return refusal(request, 404, str(exc))

        return route

    async def users(request: Request) -> Response:
        status = service.memory_status(only_user=viewer(request))
        healthy = [user for user in status.users if not user.problem]
        agents = {
            user.user_id: [(name, service.scope_summary(user.user_id, name)) for name in user.agents]
            for user in healthy
        }
        last = {
            (user.user_id, name): _last_activity(service, user.user_id, name)
            for user in healthy
            for name in [None, *user.agents]
        }
        return page(request, "users.html", summary=status, last_activity=last, agents=agents)

    def ask_for_token(request: Request, status: int, problem: str | None) -> Response:
        return page(request, "token.html", status=status, problem=problem)

    def welcome(request: Request, onward: str) -> Response:
        return page(request, "welcome.html", onward=onward)

    def refuse_stranger(request: Request) -> Response:
        message = (
            "This dashboard answers only the account that started it. Open the address it printed when "
            "it started (the one ending in ?key=…); after a restart, the new one it printed."
        )
        return page(request, "missing.html", status=403, heading="Not allowed", message=message, locked=True)

    async def memory_page(
        request: Request, memory: Memory, status: int = 200, failed: str | None = None, **values: Any
    ) -> Response:
        """The page of one memory; after a refused change (`failed` names the form), with the
        reason beside that form and what was typed still in it."""
        profile = service.get_user_profile(
            ProfileRequest.build(
                user_id=memory.user_id,
                agent_name=memory.agent_name,
                include_knowledge=True,
                include_assistant_knowledge=True,
            )
        )
        said = service.exchange_times(memory.user_id, memory.agent_name)
        everything = SearchFactsRequest.build(
            user_id=memory.user_id, agent_name=memory.agent_name, include_superseded=True, limit=MAX_FACTS_SHOWN
        )
        history = [fact for fact in service.search_facts(everything).facts if fact.validTo]
        status_of = service.memory_status(only_user=memory.user_id)
        agents = status_of.users[0].agents if memory.agent_name is None and status_of.users else []
        sessions = service.sessions(memory.user_id, memory.agent_name)
        warming.start(memory)
        return page(
            request,
            "user.html",
            status=status,
            memory=memory,
            profile=profile,
            history=sorted(history, key=lambda fact: fact.validTo or "", reverse=True),
            over_time=weekly(
                {
                    "exchanges": said,
                    "facts added": (fact.createdAt for fact in [*(profile.facts or []), *history]),
                    "facts superseded": (fact.validTo or "" for fact in history),
                },
                now().date(),
            ),
            categories=FACT_CATEGORIES,
            recent=list(reversed(service.latest_pages(memory.user_id, memory.agent_name, RECENT_EXCHANGES))),
            status_of=status_of,
            summary=service.scope_summary(memory.user_id, memory.agent_name),
            sessions=sessions[:SESSIONS_SHOWN],
            archived={view.name for view in sessions if view.archived},
            agents=[(name, service.scope_summary(memory.user_id, name)) for name in agents],
            failed=failed,
            **values,
        )

    async def search(request: Request, memory: Memory) -> Response:
        query = request.query_params.get("q", "").strip()
        exchanges, facts = [], []
        if query:
            exchanges = service.search_exchanges(
                RetrieveMemoryRequest.build(
                    user_id=memory.user_id, agent_name=memory.agent_name, query=query, max_results=SEARCH_RESULTS
                )
            )
            facts = service.search_facts(
                SearchFactsRequest.build(user_id=memory.user_id, agent_name=memory.agent_name, query=query)
            ).facts
        return page(
            request,
            "search.html",
            memory=memory,
            query=query,
            terms=set(index_terms(query)),
            exchanges=exchanges,
            facts=facts,
            archived=service.archived_sessions(memory.user_id, memory.agent_name),
        )

    async def exchanges(request: Request, memory: Memory) -> Response:
        thread, day = request.query_params.get("thread"), request.query_params.get("day")
        project = request.query_params.get("project")  # "" for the exchanges without one
        chosen, total = service.find_pages(
            memory.user_id,
            memory.agent_name,
            lambda exchange: (
                (thread is None or exchange.thread_id == thread)
                and (day is None or exchange.timestamp.startswith(day))
                and (project is None or exchange.project == (project or None))
            ),
            BROWSED_EXCHANGES,
        )
        return page(
            request,
            "exchanges.html",
            memory=memory,
            thread=thread,
            day=day,
            project=project,
            exchanges=chosen,
            total=total,
            archived=service.archived_sessions(memory.user_id, memory.agent_name),
        )

    async def exchange(request: Request, memory: Memory) -> Response:
        page_id = request.path_params["page_id"]
        found, _ = service.find_pages(memory.user_id, memory.agent_name, lambda p: p.page_id == page_id, 1)
        if not found:
            return refusal(request, 404, f"{memory.label} has no exchange {page_id}")
        return page(
            request,
            "exchange_page.html",
            memory=memory,
            exchange=found[0],
            archived=service.archived_sessions(memory.user_id, memory.agent_name),
        )

    async def add_fact(request: Request, memory: Memory) -> Response:
        form = await request.form()
        return await changing(
            request,
            memory,
            lambda: service.add_fact(
                AddFactRequest.build(
                    user_id=memory.user_id,
                    agent_name=memory.agent_name,
                    content=form.get("content", ""),
                    category=form.get("category") or "context",
                    confidence=form.get("confidence") or 0.9,
                    pinned=form.get("pinned") == "on",
                    expires_at=form.get("expires_at") or None,
                )
            ),
            failed="add",
            typed=_typed_fact(form),
        )

    async def edit_fact(request: Request, memory: Memory) -> Response:
        fact_id = request.path_params["fact_id"]
        form = await request.form()
        return await changing(
            request,
            memory,
            lambda: service.update_fact(
                UpdateFactRequest.build(
                    user_id=memory.user_id,
                    agent_name=memory.agent_name,
                    fact_id=fact_id,
                    content=form.get("content") or None,
                    category=form.get("category") or None,
                    confidence=form.get("confidence") or None,
                    pinned=form.get("pinned") == "on",
                    expires_at=form.get("expires_at") or "never",
                )
            ),
            failed=fact_id,
            typed=_typed_fact(form),
        )

    async def delete_fact(request: Request, memory: Memory) -> Response:
        fact_id = request.path_params["fact_id"]

        def erase() -> BaseModel:
            return service.delete_fact(DeleteFactRequest.build(fact_id=fact_id, **memory.whose))

        return await changing(request, memory, erase, failed=fact_id)

    async def forget_exchange(request: Request, memory: Memory) -> Response:
        page_id = request.path_params["page_id"]

        def erase() -> BaseModel:
            return service.forget_exchange(ForgetExchangeRequest.build(exchange_id=page_id, **memory.whose))

        return await changing(request, memory, erase, failed="forget_exchange")

    async def flush(request: Request, memory: Memory) -> Response:
        form = await request.form()
        retry = form.get("retry_failed") == "yes"
        return await changing(
            request,
            memory,
            lambda: service.flush_memory(
                FlushRequest.build(user_id=memory.user_id, agent_name=memory.agent_name, retry_failed=retry)
            ),
            failed="flush",
        )

    async def forget(request: Request, memory: Memory) -> Response:
        form = await request.form()

        def change() -> object:
            confirm = str(form.get("confirm", ""))
            return service.forget(
                ForgetRequest.build(user_id=memory.user_id, agent_name=memory.agent_name, confirm=confirm)
            )

        # A user forgotten leaves the list; an agent forgotten leaves its user's page.
        after = _path(request, "users") if memory.agent_name is None else Memory(memory.user_id).url(request, "user")
        return await changing(request, memory, change, failed="forget", after=after)

    async def changing(
        request: Request,
        memory: Memory,
        change: Callable[[], object],
        failed: str,
        after: URL | None = None,
        **values: Any,
    ) -> Response:
        """Make a change through the service, then show the memory's page (303: a reload does
        not repeat it); refused from another site, and on bad input with nothing changed and the
        reason shown beside the form that failed."""
        if (refused := cross_site(request)) is not None:
            return refused
        try:
            change()
        except (InvalidInput, NotFound) as exc:
            return await memory_page(request, memory, status=400, failed=failed, error=str(exc), **values)
        return RedirectResponse(after or memory.url(request, "user"), status_code=303)

    async def export(request: Request, memory: Memory) -> Response:
        exported = service.export_memory(ExportRequest.build(user_id=memory.user_id, agent_name=memory.agent_name))
        name = memory.user_id if memory.agent_name is None else f"{memory.user_id}-{memory.agent_name}"
        return Response(
            exported.model_dump_json(indent=2),
            media_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="memory-{name}.json"'},
        )

    async def import_preview(request: Request, memory: Memory) -> Response:
        """An uploaded document checked and counted against this user's memory; nothing written."""
        if (refused := cross_site(request)) is not None:
            return refused
        form = await request.form()
        upload, mode = form.get("file"), str(form.get("mode", "merge"))
        text = (await upload.read()).decode("utf-8", errors="replace") if hasattr(upload, "read") else ""
        try:
            data = _import_data(text)
            preview = service.preview_import(ImportRequest.build(data=data, mode=mode, user_id=memory.user_id))
        except InvalidInput as exc:
            return page(request, "import.html", status=400, memory=memory, error=str(exc), mode=mode)
        return page(
            request,
            "import.html",
            memory=memory,
            preview=preview,
            document=text,
            mode=mode,
            source=data.get("user_id") if isinstance(data.get("user_id"), str) else None,
            exported_at=data.get("exported_at") if isinstance(data.get("exported_at"), str) else None,
        )

    async def import_apply(request: Request, memory: Memory) -> Response:
        if (refused := cross_site(request)) is not None:
            return refused
        form = await request.form()
        mode = str(form.get("mode", "merge"))
        try:
            data = _import_data(str(form.get("document", "")))
            service.import_memory(ImportRequest.build(data=data, mode=mode, user_id=memory.user_id))
        except InvalidInput as exc:
            return page(request, "import.html", status=400, memory=memory, error=str(exc), mode=mode)
        return RedirectResponse(memory.url(request, "user"), status_code=303)

    async def user(request: Request, memory: Memory) -> Response:
        return await memory_page(request, memory)

    async def home(request: Request) -> Response:
        return RedirectResponse(_path(request, "users"), status_code=303)

    pages_of_a_memory: list[tuple[str, Page, list[str], str]] = [
        ("", user, ["GET"], "user"),
        ("/search", search, ["GET"], "search"),
        ("/exchanges", exchanges, ["GET"], "exchanges"),
        ("/exchanges/{page_id}", exchange, ["GET"], "exchange"),
        ("/exchanges/{page_id}/forget", forget_exchange, ["POST"], "forget_exchange"),
        ("/facts", add_fact, ["POST"], "add_fact"),
        ("/facts/{fact_id}", edit_fact, ["POST"], "edit_fact"),
        ("/facts/{fact_id}/delete", delete_fact, ["POST"], "delete_fact"),
        ("/export", export, ["GET"], "export"),
        ("/forget", forget, ["POST"], "forget"),
        ("/flush", flush, ["POST"], "flush"),
        ("/import", import_preview, ["POST"], "import_preview"),
        ("/import/apply", import_apply, ["POST"], "import_apply"),
    ]
    routes = [
        Route(root + path, of_memory(handler), methods=methods, name=prefix + name)
        for root, prefix in ((USER_ROOT, ""), (AGENT_ROOT, AGENT_ROUTE))
        for path, handler, methods, name in pages_of_a_memory
    ]
    middleware = [
        Middleware(Forbidding),
        Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts or LOOPBACK_HOSTS),
    ]
    if owner_key is not None:
        middleware.append(Middleware(OwnerGate, key=owner_key, welcome=welcome, refuse=refuse_stranger))
    if tokens is not None:
        middleware.append(Middleware(TokenGate, tokens=tokens, ask_for_token=ask_for_token))
    return Starlette(
        routes=[
            Route("/", home),
            Route("/users", users),
            *routes,
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        middleware=middleware,
    )


def _path(request: Request, name: str, **params: Any) -> URL:
    """The root-relative address of page `name`: never built from the Host header, which the
    client chooses (behind tokens any Host is answered, and a page must not load a script from it)."""
    return URL(request.url_for(name, **params).path)


@pass_context
def _url_for(context: Any, name: str, **params: Any) -> URL:
    """In a template: the root-relative address of page or asset `name`."""
    return _path(context["request"], name, **params)


@pass_context
def _at(context: Any, name: str, **params: Any) -> URL:
    """In a template: the address of page `name` of the memory the page is about."""
    memory: Memory = context["memory"]
    return memory.url(context["request"], name, **params)


class _Warmer:
    """Builds a memory's search index in the background once its page is open, so the search a
    person types there next does not wait for it (a few seconds at 10k exchanges)."""

    def __init__(self, service: MemoryService) -> None:
        self.service = service
        self.started: set[Memory] = set()
        self.lock = threading.Lock()

    def start(self, memory: Memory) -> None:
        with self.lock:
            if memory in self.started:
                return
            self.started.add(memory)
        threading.Thread(
            target=self.service.warm_up, args=(memory.user_id, memory.agent_name), name="dashboard-warm-up", daemon=True
        ).start()


def _typed_fact(form: FormData) -> dict[str, Any]:
    """A fact form's values as typed, to put back in the form when the change is refused."""
    return {
        "content": str(form.get("content", "")),
        "category": str(form.get("category", "context")),
        "confidence": str(form.get("confidence", "")),
        "expiresAt": str(form.get("expires_at", "")),
        "pinned": form.get("pinned") == "on",
    }


def _last_activity(service: MemoryService, user_id: str, agent_name: str | None) -> str:
    """When the memory's newest exchange was added ("" with none)."""
    latest = service.latest_pages(user_id, agent_name, 1)
    return latest[0].timestamp if latest else ""


def _same_origin(request: Request) -> bool:
    """Whether a state-changing request comes from a page of this dashboard: browsers name the
    page a form was sent from (Origin), and a page elsewhere cannot pass for this one."""
    origin = request.headers.get("origin")
    if origin is None:
        return request.headers.get("sec-fetch-site") == "same-origin"
    return origin == f"{request.url.scheme}://{request.url.netloc}"


def _import_data(text: str) -> dict[str, Any]:
    """An uploaded document's JSON object; InvalidInput when it is none."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"the file is not JSON ({exc}); nothing was imported") from None
    if not isinstance(data, dict):
        raise InvalidInput("the file holds no JSON object; nothing was imported")
    return data
