"""The HTTP server's side of hooks run against it (remote.py): /hooks/context and /hooks/store,
the same work a local hook does, on the server's memory, for the token's user.

With tokens, the bearer token names the user and a request naming another is refused (403), as
for /mcp; without (a loopback server for its own account), the request names the user, or the
server's default serves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from memory_mcp.hosts.hooks import store_exchanges
from memory_mcp.hosts.injection import HostSession, prompt_block, session_digest
from memory_mcp.hosts.remote import ContextAnswer, ContextRequest, HookRequest, StoreAnswer, StoreRequest
from memory_mcp.service.access import TokenRegistry, bearer_user
from memory_mcp.service.memory_service import MemoryService

MAX_BODY_BYTES = 4 * 1024 * 1024
Endpoint = Callable[[Request], Awaitable[JSONResponse]]


def hooks_app(service: MemoryService, registry: TokenRegistry | None) -> Starlette:
    """The ASGI app serving hooks under the server's /hooks/."""

    def endpoint(model: type[HookRequest], work: Callable[[MemoryService, Any], BaseModel]) -> Endpoint:
        async def handle(request: Request) -> JSONResponse:
            asked = await _read(request, model, registry)
            if isinstance(asked, JSONResponse):
                return asked
            answer = await anyio.to_thread.run_sync(work, service, asked)
            return JSONResponse(answer.model_dump())

        return handle

    return Starlette(
        routes=[
            Route("/context", endpoint(ContextRequest, _context), methods=["POST"]),
            Route("/store", endpoint(StoreRequest, _store), methods=["POST"]),
        ]
    )


def _context(service: MemoryService, asked: ContextRequest) -> ContextAnswer:
    session = HostSession(asked.user_id, asked.agent_name, asked.session_id, asked.project)
    if asked.event == "prompt":
        text = prompt_block(service, session, asked.prompt, asked.max_tokens, asked.max_chars or None)
    else:
        text = session_digest(service, session, asked.max_chars or None, asked.fresh)
    return ContextAnswer(context=text)


def _store(service: MemoryService, sent: StoreRequest) -> StoreAnswer:
    session = HostSession(sent.user_id, sent.agent_name, sent.session_id, sent.project)
    result = store_exchanges(service, sent.pages, session)
    if result.pages_added:
        service.exchanges_arrived(result.user_id, result.agent_name, sent.session_id)
    return StoreAnswer(added=result.pages_added)


async def _read(
    request: Request, model: type[HookRequest], registry: TokenRegistry | None
) -> HookRequest | JSONResponse:
    """The request's body as `model`, its user the token's; or the error response to give."""
    user = None
    if registry is not None:
        user = bearer_user(registry, request.headers.get("authorization"))
        if user is None:
            return JSONResponse({"error": "a valid bearer token is required"}, status_code=401)
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        return JSONResponse({"error": f"the body is over {MAX_BODY_BYTES} bytes"}, status_code=413)
    try:
        parsed = model.model_validate_json(body)
    except ValidationError as exc:
        return JSONResponse({"error": str(exc).splitlines()[0]}, status_code=400)
    if user is not None:
        if parsed.user_id not in (None, user):
            return JSONResponse({"error": f"this token is for {user}, not {parsed.user_id}"}, status_code=403)
        parsed = parsed.model_copy(update={"user_id": user})
    return parsed
