"""The streamable-HTTP server: the SDK's transport, bearer tokens, a health check, a clean stop.

With authentication on, a caller acts as the user its token was issued for, and only as them:
a request that names another user is refused here with 403 before the SDK sees it (and the MCP
layer, server.BindToTokenUser, binds whatever gets through to the token's user).

The server is stateless (each POST stands alone, JSON in and out), so any number of instances
behind a load balancer can answer any request, with no session affinity.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

import anyio.to_thread
import uvicorn
from mcp.server.auth.settings import AuthSettings
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_mcp import __version__
from memory_mcp.access import MEMORY_SCOPE, RegistryTokenVerifier, TokenRegistry, bearer_user
from memory_mcp.config import HttpSettings
from memory_mcp.dashboard import create_app
from memory_mcp.errors import MemoryServiceError
from memory_mcp.server import USER_RESOURCE, build_server
from memory_mcp.service import MemoryService

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
HEALTH_PATH = "/health"
DASHBOARD_PATH = "/dashboard"
# Longest body the identity check reads; the SDK refuses larger ones itself (413).
MAX_CHECKED_BODY_BYTES = 4 * 1024 * 1024
# Time open requests get to finish once a stop is asked for, before pending updates are drained.
GRACEFUL_SHUTDOWN_SECONDS = 30


class HttpSetupError(Exception):
    """The HTTP server cannot start as set up (open to anyone where that is not allowed, a busy port);
    the message says what to do."""


def auth_required(http: HttpSettings, registry: TokenRegistry) -> bool:
    """Whether requests need a token: decided once at start, from the settings and issued tokens."""
    if http.auth == "none":
        if not http.on_loopback:
            raise HttpSetupError(
                f"http.auth is 'none' but the server would listen on {http.host}: without authentication "
                "it may listen on loopback (127.0.0.1, localhost, ::1) only"
            )
        return False
    issued = bool(registry.records())
    needed = http.auth == "tokens" or not http.on_loopback or issued
    if needed and not issued:
        raise HttpSetupError(
            f"authentication is required (listening on {http.host}, http.auth {http.auth!r}) but no token is issued "
            f"in {registry.path}: create one with `memory-mcp token add USER_ID`"
        )
    return needed


def run_http(service: MemoryService, http: HttpSettings) -> None:
    """Start the service's background work once the setup is known to be allowed, and serve until
    SIGINT/SIGTERM; then finish open requests (the caller's `service.close()` drains updates)."""
    assert http.tokens_file is not None  # load_settings fills in the default
    registry = TokenRegistry(http.tokens_file)
    with_auth = auth_required(http, registry)
    app = build_http_app(service, registry if with_auth else None, http.host)
    listening = _bound_socket(http.host, http.port)  # a busy port fails here, before anything says it listens
    service.start()
    log.info(
        "listening on http://%s:%d%s; %s",
        http.host,
        http.port,
        MCP_PATH,
        f"bearer tokens from {registry.path}" if with_auth else "no authentication (loopback only)",
    )
    logging.getLogger("mcp.server.streamable_http").setLevel(logging.WARNING)  # a line per request otherwise
    config = uvicorn.Config(
        app,
        host=http.host,
        port=http.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    uvicorn.Server(config).run(sockets=[listening])


def _bound_socket(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or an error naming the address that cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listening = socket.socket(family, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((host, port))
    except OSError as exc:
        listening.close()
        raise HttpSetupError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (choose another port with --port)"
        ) from None
    listening.listen(2048)
    return listening


def build_http_app(service: MemoryService, registry: TokenRegistry | None, host: str) -> ASGIApp:
    """The ASGI app: MCP at /mcp, GET /health, the dashboard at /dashboard, and with a registry,
    tokens on every MCP request and every dashboard page (each token sees its own user alone)."""
    if registry is None:
        server = build_server(service)
    else:
        server = build_server(service, token_verifier=RegistryTokenVerifier(registry), auth=token_auth_settings(host))

    async def health(request: Request) -> Response:
        return await anyio.to_thread.run_sync(_health, service)

    server.custom_route(HEALTH_PATH, methods=["GET"], include_in_schema=False)(health)
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True, json_response=True, host=host)
    # Without tokens the server listens on loopback only, and the dashboard answers loopback names
    # only; with tokens it answers any name, since every page then needs a token.
    dashboard = create_app(service, allowed_hosts=None if registry is None else ["*"], tokens=registry)
    return AtPath(DASHBOARD_PATH, dashboard, RefuseOtherUsers(app, registry) if registry is not None else app)


def token_auth_settings(host: str) -> AuthSettings:
    """The SDK's auth settings for tokens this server checks itself (no OAuth flow is offered)."""
    return AuthSettings(
        issuer_url=f"http://{host}",  # required by the SDK; tokens are issued out of band here
        resource_server_url=None,
        required_scopes=[MEMORY_SCOPE],
    )


def _health(service: MemoryService) -> Response:
    """200 when memory can be stored, 503 (with the reason) when the storage cannot be reached."""
    body: dict[str, Any] = {
        "version": __version__,
        "storage": service.settings.storage.backend,
        "structured_memory": "on" if service.extraction_on else "off",
    }
    try:
        service.check_ready()
    except MemoryServiceError as exc:
        return JSONResponse({"status": "unavailable", "error": str(exc), **body}, status_code=503)
    return JSONResponse({"status": "ok", **body})


class AtPath:
    """ASGI: requests under `prefix` go to `inner` (which sees `prefix` as its root path, so its
    links carry it), everything else to `outer`; `prefix` itself is redirected to `prefix/`."""

    def __init__(self, prefix: str, inner: ASGIApp, outer: ASGIApp) -> None:
        self.prefix = prefix
        self.inner = inner
        self.outer = outer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        root = scope.get("root_path", "")
        path = scope.get("path", "").removeprefix(root)
        if scope["type"] != "http" or not (path == self.prefix or path.startswith(self.prefix + "/")):
            await self.outer(scope, receive, send)
        elif path == self.prefix:
            await RedirectResponse(root + self.prefix + "/", status_code=307)(scope, receive, send)
        else:
            await self.inner({**scope, "root_path": root + self.prefix}, receive, send)


# --- who may touch whose memory -------------------------------------------------------------


def named_users(message: Any) -> Iterator[str]:
    """User ids a JSON-RPC message (or batch) asks about, wherever the protocol lets one be named."""
    for item in message if isinstance(message, list) else [message]:
        params = item.get("params") if isinstance(item, dict) else None
        if not isinstance(params, dict):
            continue
        arguments = params.get("arguments")
        if isinstance(arguments, dict) and isinstance(arguments.get("user_id"), str) and arguments["user_id"]:
            yield arguments["user_id"]
        uri = params.get("uri")
        match = USER_RESOURCE.match(uri) if isinstance(uri, str) else None
        if match:
            yield match.group(1)


class RefuseOtherUsers:
    """ASGI: answer 403 to an authenticated request that names a user other than its token's.

    Runs in front of the SDK, which would otherwise answer 200 with an error inside; a clear
    HTTP status is what a product's backend and its logs expect from a refused identity.
    """

    def __init__(self, app: ASGIApp, registry: TokenRegistry) -> None:
        self.app = app
        self.registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        token_user = bearer_user(self.registry, Headers(scope=scope).get("authorization"))
        if token_user is None:  # no or unknown token: the SDK answers 401
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive)
        if complete:
            try:
                message = json.loads(body)
            except ValueError:
                message = None  # the SDK answers malformed JSON itself
            others = sorted(set(named_users(message)) - {token_user})
            if others:
                await _forbidden(scope, receive, send, token_user, others[0])
                return
        await self.app(scope, _replay(body, complete, receive), send)


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    """The request body up to MAX_CHECKED_BODY_BYTES; complete=False if it is longer than that."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True
        if size > MAX_CHECKED_BODY_BYTES:
            return b"".join(chunks), False


def _replay(body: bytes, complete: bool, receive: Receive) -> Receive:
    """A receive that hands the app the bytes already read, then the rest of the request."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": not complete}
        return await receive()

    return replay


async def _forbidden(scope: Scope, receive: Receive, send: Send, token_user: str, other: str) -> None:
    response = JSONResponse(
        {
            "error": "forbidden",
            "error_description": f"this token acts for user {token_user!r} and cannot read or write the memory "
            f"of user {other!r}; omit user_id (your own user is implied) or use that user's token",
        },
        status_code=403,
    )
    await response(scope, receive, send)
