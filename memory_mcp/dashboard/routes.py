"""The dashboard's addresses: which handler answers which URL and method, and the check every page
of one memory passes first.

A user's memory lives at /users/{user_id}, and each of their agents' at
/users/{user_id}/agents/{agent_name}, with the same pages below both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from memory_mcp.base.errors import InvalidInput, NotFound
from memory_mcp.dashboard import changes, pages
from memory_mcp.dashboard.context import AGENT_ROUTE, Memory, Page, refusal, service_of
from memory_mcp.dashboard.gate import viewer

STATIC = Path(__file__).parent / "static"
USER_ROOT = "/users/{user_id}"
AGENT_ROOT = "/users/{user_id}/agents/{agent_name}"
# Below a memory's root: path, handler, methods, route name.
PAGES_OF_A_MEMORY: list[tuple[str, Page, list[str], str]] = [
    ("", pages.user, ["GET"], "user"),
    ("/search", pages.search, ["GET"], "search"),
    ("/exchanges", pages.exchanges, ["GET"], "exchanges"),
    ("/exchanges/{page_id}", pages.exchange, ["GET"], "exchange"),
    ("/exchanges/{page_id}/forget", changes.forget_exchange, ["POST"], "forget_exchange"),
    ("/facts", changes.add_fact, ["POST"], "add_fact"),
    ("/facts/{fact_id}", changes.edit_fact, ["POST"], "edit_fact"),
    ("/facts/{fact_id}/delete", changes.delete_fact, ["POST"], "delete_fact"),
    ("/export", pages.export, ["GET"], "export"),
    ("/forget", changes.forget, ["POST"], "forget"),
    ("/flush", changes.flush, ["POST"], "flush"),
    ("/import", changes.import_preview, ["POST"], "import_preview"),
    ("/import/apply", changes.import_apply, ["POST"], "import_apply"),
]


def routes() -> list[BaseRoute]:
    """Every address the dashboard answers, the package's own assets included."""
    of_memories = [
        Route(root + address, of_memory(handler), methods=methods, name=prefix + name)
        for root, prefix in ((USER_ROOT, ""), (AGENT_ROOT, AGENT_ROUTE))
        for address, handler, methods, name in PAGES_OF_A_MEMORY
    ]
    return [
        Route("/", pages.home),
        Route("/users", pages.users),
        *of_memories,
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]


def of_memory(handler: Page) -> Callable[[Request], Awaitable[Response]]:
    """The route for a page of one memory: refused for another user than the token's (before
    anything says whether that user exists), 404 when nothing is stored."""

    async def route(request: Request) -> Response:
        memory = Memory(request.path_params["user_id"], request.path_params.get("agent_name"))
        looking = viewer(request)
        if looking is not None and looking != memory.user_id:
            return refusal(request, 403, f"This token acts for {looking}; it cannot open another user's memory.")
        try:
            stored = service_of(request).is_stored(memory.user_id, memory.agent_name)
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
