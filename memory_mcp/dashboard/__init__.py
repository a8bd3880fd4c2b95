"""The dashboard: a web page over the service, to see, search and correct what is remembered.

Server-rendered: Starlette (it comes with the MCP SDK) and Jinja2 templates, which escape all
they print, so remembered text can never become markup. Every page is a plain HTML document that
works without JavaScript; a little script adds what needs one. Every read and change goes through
MemoryService, so the dashboard holds no rule of its own, and every asset comes from the package:
it works offline.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, get_args

from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from memory_mcp.clock import now
from memory_mcp.dashboard.charts import weekly
from memory_mcp.errors import InvalidInput, NotFound
from memory_mcp.models import (
    AddFactRequest,
    DeleteFactRequest,
    ExportRequest,
    FlushRequest,
    ForgetRequest,
    ImportRequest,
    ProfileRequest,
    RetrieveMemoryRequest,
    SearchFactsRequest,
    UpdateFactRequest,
)
from memory_mcp.models.stored import FactCategory
from memory_mcp.service import MemoryService
from memory_mcp.terms import index_terms

HERE = Path(__file__).parent
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
FACT_CATEGORIES: tuple[str, ...] = get_args(FactCategory)
RECENT_EXCHANGES = 20
BROWSED_EXCHANGES = 200  # per page of a browse by thread or day
MAX_FACTS_SHOWN = 500  # the most search_facts gives at once; memory.max_facts is at most 500 too
SEARCH_RESULTS = 20
_WORDS = re.compile(r"(\w+)")  # split keeping the words, so each can be marked or not
_CAMEL_HUMPS = re.compile(r"(?<=[a-z])(?=[A-Z])")  # where workContext becomes two words


def create_app(service: MemoryService, allowed_hosts: list[str] | None = None) -> Starlette:
    """The dashboard over `service`. `allowed_hosts` (default: loopback names only) are the Host
    headers it answers: a page on another site cannot reach it by renaming itself (DNS rebinding)."""
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.filters["marked"] = _marked  # {{ text | marked(terms) }}
    templates.env.filters["spelled"] = _spelled  # {{ "workContext" | spelled }}: Work context

    def require_stored(user_id: str) -> None:
        if not service.is_stored(user_id):
            raise NotFound(f"no memory is stored for {user_id}")

    def cross_site(request: Request) -> Response | None:
        """The refusal of a change not sent from the dashboard's own pages (None: it was)."""
        if _same_origin(request):
            return None
        return page(request, "missing.html", status=403, message="Changes are taken only from this page itself.")

    def page(request: Request, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, values, status_code=status)

    async def users(request: Request) -> Response:
        status = service.memory_status()
        last = {user.user_id: _last_activity(service, user.user_id) for user in status.users if not user.problem}
        return page(request, "users.html", summary=status, last_activity=last)

    async def user(request: Request) -> Response:
        return await _user_page(request, request.path_params["user_id"])

    async def _user_page(request: Request, user_id: str, status: int = 200, error: str | None = None) -> Response:
        try:
            require_stored(user_id)
            profile = service.get_user_profile(
                ProfileRequest.build(user_id=user_id, include_knowledge=True, include_assistant_knowledge=True)
            )
            stored = service.latest_pages(user_id, None, 10**9)
        except (InvalidInput, NotFound) as exc:
            return page(request, "missing.html", status=404, message=str(exc))
        status_of = service.memory_status(only_user=user_id)
        everything = SearchFactsRequest.build(user_id=user_id, include_superseded=True, limit=MAX_FACTS_SHOWN)
        history = [fact for fact in service.search_facts(everything).facts if fact.validTo]
        return page(
            request,
            "user.html",
            status=status,
            user_id=user_id,
            profile=profile,
            history=sorted(history, key=lambda fact: fact.validTo or "", reverse=True),
            over_time=weekly(
                {
                    "exchanges": (page.timestamp for page in stored),
                    "facts added": (fact.createdAt for fact in [*(profile.facts or []), *history]),
                    "facts superseded": (fact.validTo or "" for fact in history),
                },
                now().date(),
            ),
            categories=FACT_CATEGORIES,
            recent=list(reversed(stored[-RECENT_EXCHANGES:])),
            memory=status_of,
            summary=status_of.users[0] if status_of.users else None,
            error=error,
        )

    async def search(request: Request) -> Response:
        user_id = request.path_params["user_id"]
        query = request.query_params.get("q", "").strip()
        try:
            require_stored(user_id)
            exchanges = (
                service.search_exchanges(
                    RetrieveMemoryRequest.build(user_id=user_id, query=query, max_results=SEARCH_RESULTS)
                )
                if query
                else []
            )
            facts = service.search_facts(SearchFactsRequest.build(user_id=user_id, query=query)).facts if query else []
        except (InvalidInput, NotFound) as exc:
            return page(request, "missing.html", status=404, message=str(exc))
        return page(
            request,
            "search.html",
            user_id=user_id,
            query=query,
            terms=set(index_terms(query)),
            exchanges=exchanges,
            facts=facts,
        )

    async def exchanges(request: Request) -> Response:
        user_id = request.path_params["user_id"]
        thread, day = request.query_params.get("thread"), request.query_params.get("day")
        try:
            require_stored(user_id)
            stored = service.latest_pages(user_id, None, 10**9)
        except (InvalidInput, NotFound) as exc:
            return page(request, "missing.html", status=404, message=str(exc))
        chosen = [
            exchange
            for exchange in reversed(stored)
            if (thread is None or exchange.thread_id == thread) and (day is None or exchange.timestamp.startswith(day))
        ]
        return page(
            request,
            "exchanges.html",
            user_id=user_id,
            thread=thread,
            day=day,
            exchanges=chosen[:BROWSED_EXCHANGES],
            total=len(chosen),
        )

    async def exchange(request: Request) -> Response:
        user_id, page_id = request.path_params["user_id"], request.path_params["page_id"]
        try:
            found = [p for p in service.latest_pages(user_id, None, 10**9) if p.page_id == page_id]
        except InvalidInput as exc:
            return page(request, "missing.html", status=404, message=str(exc))
        if not found:
            return page(request, "missing.html", status=404, message=f"{user_id} has no exchange {page_id}")
        return page(request, "exchange_page.html", user_id=user_id, exchange=found[0])

    async def add_fact(request: Request) -> Response:
        user_id = request.path_params["user_id"]
        form = await request.form()
        return await _changing(
            request,
            user_id,
            lambda: service.add_fact(
                AddFactRequest.build(
                    user_id=user_id,
                    content=form.get("content", ""),
                    category=form.get("category") or "context",
                    confidence=form.get("confidence") or 0.9,
                    pinned=form.get("pinned") == "on",
                    expires_at=form.get("expires_at") or None,
                )
            ),
        )

    async def edit_fact(request: Request) -> Response:
        user_id, fact_id = request.path_params["user_id"], request.path_params["fact_id"]
        form = await request.form()
        return await _changing(
            request,
            user_id,
            lambda: service.update_fact(
                UpdateFactRequest.build(
                    user_id=user_id,
                    fact_id=fact_id,
                    content=form.get("content") or None,
                    category=form.get("category") or None,
                    confidence=form.get("confidence") or None,
                    pinned=form.get("pinned") == "on",
                    expires_at=form.get("expires_at") or "never",
                )
            ),
        )

    async def delete_fact(request: Request) -> Response:
        user_id, fact_id = request.path_params["user_id"], request.path_params["fact_id"]
        return await _changing(
            request, user_id, lambda: service.delete_fact(DeleteFactRequest.build(user_id=user_id, fact_id=fact_id))
        )

    async def _changing(request: Request, user_id: str, change: Callable[[], object]) -> Response:
        """Make a change through the service, then show the user's page again (303: a reload
        does not repeat it); refused from another site, and on bad input with nothing changed."""
        if (refused := cross_site(request)) is not None:
            return refused
        try:
            change()
        except (InvalidInput, NotFound) as exc:
            return await _user_page(request, user_id, status=400, error=str(exc))
        return RedirectResponse(request.url_for("user", user_id=user_id), status_code=303)

    async def export(request: Request) -> Response:
        user_id = request.path_params["user_id"]
        try:
            exported = service.export_memory(ExportRequest.build(user_id=user_id))
        except (InvalidInput, NotFound) as exc:
            return page(request, "missing.html", status=404, message=str(exc))
        return Response(
            exported.model_dump_json(indent=2),
            media_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="memory-{user_id}.json"'},
        )

    async def forget(request: Request) -> Response:
        user_id = request.path_params["user_id"]
        if (refused := cross_site(request)) is not None:
            return refused
        form = await request.form()
        try:
            service.forget(ForgetRequest.build(user_id=user_id, confirm=str(form.get("confirm", ""))))
        except (InvalidInput, NotFound) as exc:
            return await _user_page(request, user_id, status=400, error=str(exc))
        return RedirectResponse(request.url_for("users"), status_code=303)

    async def import_preview(request: Request) -> Response:
        """An uploaded document checked and counted against this user's memory; nothing written."""
        user_id = request.path_params["user_id"]
        if (refused := cross_site(request)) is not None:
            return refused
        form = await request.form()
        upload, mode = form.get("file"), str(form.get("mode", "merge"))
        text = (await upload.read()).decode("utf-8", errors="replace") if hasattr(upload, "read") else ""
        try:
            preview = service.preview_import(_import_request(text, mode, user_id))
        except InvalidInput as exc:
            return page(request, "import.html", status=400, user_id=user_id, error=str(exc), mode=mode)
        return page(request, "import.html", user_id=user_id, preview=preview, document=text, mode=mode)

    async def import_apply(request: Request) -> Response:
        user_id = request.path_params["user_id"]
        if (refused := cross_site(request)) is not None:
            return refused
        form = await request.form()
        mode = str(form.get("mode", "merge"))
        try:
            service.import_memory(_import_request(str(form.get("document", "")), mode, user_id))
        except InvalidInput as exc:
            return page(request, "import.html", status=400, user_id=user_id, error=str(exc), mode=mode)
        return RedirectResponse(request.url_for("user", user_id=user_id), status_code=303)

    async def flush(request: Request) -> Response:
        user_id = request.path_params["user_id"]
        form = await request.form()
        retry = form.get("retry_failed") == "yes"
        return await _changing(
            request, user_id, lambda: service.flush_memory(FlushRequest.build(user_id=user_id, retry_failed=retry))
        )

    async def home(_request: Request) -> Response:
        return RedirectResponse("users", status_code=303)

    return Starlette(
        routes=[
            Route("/", home),
            Route("/users", users),
            Route("/users/{user_id}", user),
            Route("/users/{user_id}/search", search),
            Route("/users/{user_id}/exchanges", exchanges),
            Route("/users/{user_id}/exchanges/{page_id}", exchange),
            Route("/users/{user_id}/facts", add_fact, methods=["POST"]),
            Route("/users/{user_id}/facts/{fact_id}", edit_fact, methods=["POST"]),
            Route("/users/{user_id}/facts/{fact_id}/delete", delete_fact, methods=["POST"]),
            Route("/users/{user_id}/export", export),
            Route("/users/{user_id}/forget", forget, methods=["POST"]),
            Route("/users/{user_id}/flush", flush, methods=["POST"]),
            Route("/users/{user_id}/import", import_preview, methods=["POST"]),
            Route("/users/{user_id}/import/apply", import_apply, methods=["POST"]),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts or LOOPBACK_HOSTS)],
    )


def _marked(text: str, terms: Iterable[str]) -> Markup:
    """`text`, escaped, with the words that match one of the query's index `terms` in <mark>."""
    wanted = set(terms)
    return Markup("").join(
        Markup("<mark>{}</mark>").format(part) if wanted & set(index_terms(part)) else escape(part)
        for part in _WORDS.split(text)
    )


def _last_activity(service: MemoryService, user_id: str) -> str:
    """When the user's newest exchange was added ("" with none)."""
    latest = service.latest_pages(user_id, None, 1)
    return latest[0].timestamp if latest else ""


def _spelled(name: str) -> str:
    """A section's stored name as words: workContext -> Work context."""
    words = _CAMEL_HUMPS.sub(" ", name).lower()
    return words[:1].upper() + words[1:]


def _same_origin(request: Request) -> bool:
    """Whether a state-changing request comes from a page of this dashboard: browsers name the
    page a form was sent from (Origin), and a page elsewhere cannot pass for this one."""
    origin = request.headers.get("origin")
    if origin is None:
        return request.headers.get("sec-fetch-site") == "same-origin"
    return origin == f"{request.url.scheme}://{request.url.netloc}"


def _import_request(text: str, mode: str, user_id: str) -> ImportRequest:
    """The import of an uploaded document into `user_id`; InvalidInput when it is no JSON object."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"the file is not JSON ({exc}); nothing was imported") from None
    if not isinstance(data, dict):
        raise InvalidInput("the file holds no JSON object; nothing was imported")
    return ImportRequest.build(data=data, mode=mode, user_id=user_id)
