"""The streamable-HTTP server: the SDK's transport, bearer tokens, a health check, a clean stop.

With authentication on, a caller acts as the user its token was issued for, and only as them:
a request that names another user is refused here with 403 before the SDK sees it (and the MCP
layer, server.BindToTokenUser, binds whatever gets through to the token's user).

The server is stateless (each POST stands alone, JSON in and out), so any number of instances
behind a load balancer can answer any request, with no session affinity.

Whoever can reach the port can open connections without a token: the connection itself is bounded
(http_limits.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from mcp.server.auth.settings import AuthSettings
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_mcp import __version__
from memory_mcp.base.errors import MemoryServiceError, StorageError
from memory_mcp.base.settings import HttpSettings
from memory_mcp.dashboard.app import create_app
from memory_mcp.mcp.http_limits import (
    ACCEPT_FAILED,
    INVALID_REQUEST,
    KEEP_ALIVE_SECONDS,
    LOG_REPEAT_SECONDS,
    MAX_REQUEST_HEAD_BYTES,
    NO_WEBSOCKETS,
    SERVER_BUSY,
    SHORT_OF_FILES,
    UNSUPPORTED_UPGRADE,
    BoundedH11Protocol,
    Hush,
    Listener,
    open_more_files,
)
from memory_mcp.mcp.local_peer import OwnerOnly, accounts_told_apart
from memory_mcp.mcp.server import USER_RESOURCE, build_server
from memory_mcp.mcp.token_verifier import MEMORY_SCOPE, RegistryTokenVerifier
from memory_mcp.service.access import TokenRegistry, bearer_user
from memory_mcp.service.memory_service import MemoryService

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
HEALTH_PATH = "/health"
DASHBOARD_PATH = "/dashboard"
# Where hosts' hooks ask when they run against this server, and the app that answers them (made by
# the hosts layer, above this one, for the service and the tokens).
HooksApp = tuple[str, Callable[[MemoryService, TokenRegistry | None], ASGIApp]]
# Longest body the identity check reads; the SDK refuses larger ones itself (413).
MAX_CHECKED_BODY_BYTES = 4 * 1024 * 1024
# Time open requests get to finish once a stop is asked for, before pending updates are drained.
GRACEFUL_SHUTDOWN_SECONDS = 30
# A load balancer's probe gets an answer within this, whatever the storage does.
HEALTH_DEADLINE_SECONDS = 2


class HttpSetupError(Exception):
    """The HTTP server cannot start as set up (open to anyone where that is not allowed, a busy port);
    the message says what to do."""


def auth_required(http: HttpSettings, registry: TokenRegistry) -> bool:
    """Whether requests need a token from the start, from the settings and issued tokens (a server
    started without, on loopback with auth 'auto', needs them once a token is issued)."""
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


def run_http(service: MemoryService, http: HttpSettings, hooks: HooksApp | None = None) -> None:
    """Start the service's background work once the setup is known to be allowed, and serve until
    SIGINT/SIGTERM; then finish open requests (the caller's `service.close()` drains updates).
    `hooks` makes the app hosts' hooks ask at /hooks/ (the hosts layer's, handed down)."""
    assert http.tokens_file is not None  # load_settings fills in the default
    registry = TokenRegistry(http.tokens_file)
    if auth_required(http, registry):
        app, access = build_http_app(service, registry, http.host, hooks), f"bearer tokens from {registry.path}"
    elif http.auth == "auto":
        app = open_until_tokens(service, registry, http.host, hooks)
        access = "no authentication until a token is issued"
    else:
        app, access = OwnerOnly(build_http_app(service, None, http.host, hooks)), "no authentication (loopback only)"
    if not auth_required(http, registry):
        access += (
            ", this account only"
            if accounts_told_apart()
            else "; every account on this machine can reach it (issue a token to tell them apart)"
        )
    listening = _bound_socket(http.host, http.port)  # a busy port fails here, before anything says it listens
    open_more_files()
    service.start()
    log.info("listening on http://%s:%d%s; %s", http.host, http.port, MCP_PATH, access)
    logging.getLogger("mcp.server.streamable_http").setLevel(logging.WARNING)  # a line per request otherwise
    hush = Hush(
        (ACCEPT_FAILED, INVALID_REQUEST, UNSUPPORTED_UPGRADE, NO_WEBSOCKETS, SERVER_BUSY, SHORT_OF_FILES),
        LOG_REPEAT_SECONDS,
    )
    for name in ("asyncio", "uvicorn.error", __name__):
        logging.getLogger(name).addFilter(hush)
    config = uvicorn.Config(
        app,
        host=http.host,
        port=http.port,
        loop="asyncio",  # uvloop would accept in C, past Listener.accept
        http=BoundedH11Protocol,
        ws="none",  # nothing here speaks WebSocket, and an upgraded connection would escape the bound
        h11_max_incomplete_event_size=MAX_REQUEST_HEAD_BYTES,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    uvicorn.Server(config).run(sockets=[listening])


def _bound_socket(host: str, port: int) -> Listener:
    """A listening socket on host:port, or an error naming the address that cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listening = Listener(family, socket.SOCK_STREAM)
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


def build_http_app(
    service: MemoryService, registry: TokenRegistry | None, host: str, hooks: HooksApp | None = None
) -> ASGIApp:
    """The ASGI app: MCP at /mcp, GET /health, the dashboard at /dashboard, hosts' hooks at /hooks,
    and with a registry, tokens on every MCP request, dashboard page and hook (each token sees its
    own user alone)."""
    mcp = _mcp_app(service, registry, host, ReadinessCheck(service))
    return _with_dashboard(service, registry, host, mcp, hooks)


def open_until_tokens(
    service: MemoryService, registry: TokenRegistry, host: str, hooks: HooksApp | None = None
) -> ASGIApp:
    """The app of a loopback server started without tokens: open to the account that started it
    until a token is issued, then tokens on every request, as a restart would have it."""
    readiness = ReadinessCheck(service)
    open_mcp = _mcp_app(service, None, host, readiness)
    guarded_mcp = _mcp_app(service, registry, host, readiness)

    @asynccontextmanager
    async def both_started(_app: object) -> AsyncIterator[None]:
        async with open_mcp.router.lifespan_context(open_mcp), guarded_mcp.router.lifespan_context(guarded_mcp):
            yield

    return TokensTurnAuthOn(
        registry,
        OwnerOnly(_with_dashboard(service, None, host, open_mcp, hooks)),
        _with_dashboard(service, registry, host, guarded_mcp, hooks),
        Router(lifespan=both_started),
    )


def _mcp_app(service: MemoryService, registry: TokenRegistry | None, host: str, readiness: ReadinessCheck) -> Starlette:
    """The SDK's app: MCP at /mcp (with a registry, behind its tokens) and GET /health."""
    if registry is None:
        server = build_server(service)
    else:
        server = build_server(service, token_verifier=RegistryTokenVerifier(registry), auth=token_auth_settings(host))

    async def health(request: Request) -> Response:
        return _health(service, await readiness.error())

    server.custom_route(HEALTH_PATH, methods=["GET"], include_in_schema=False)(health)
    return server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True, json_response=True, host=host)


def _with_dashboard(
    service: MemoryService, registry: TokenRegistry | None, host: str, mcp: ASGIApp, hooks: HooksApp | None
) -> ASGIApp:
    """`mcp` with the dashboard at /dashboard (and the hooks' app at /hooks), and with a registry,
    the 403 check in front of MCP."""
    # Without tokens the server listens on loopback only, and the dashboard answers loopback names
    # only; with tokens it answers any name, since every page then needs a token.
    dashboard = create_app(service, allowed_hosts=None if registry is None else ["*"], tokens=registry)
    app = AtPath(DASHBOARD_PATH, dashboard, RefuseOtherUsers(mcp, registry) if registry is not None else mcp)
    if hooks is None:
        return app
    path, hooks_app = hooks
    return AtPath(path, hooks_app(service, registry), app)


def token_auth_settings(host: str) -> AuthSettings:
    """The SDK's auth settings for tokens this server checks itself (no OAuth flow is offered)."""
    return AuthSettings(
        issuer_url=f"http://{host}",  # required by the SDK; tokens are issued out of band here
        resource_server_url=None,
        required_scopes=[MEMORY_SCOPE],
    )


class TokensTurnAuthOn:
    """ASGI: requests go to `open_app` until a token is issued, then to `guarded_app` for good.

    `memory-mcp token add` must protect a running server at once, as the README promises; revoking
    every token later does not open it again (only a restart decides afresh). While no token is
    issued, a request costs one stat of the tokens file."""

    def __init__(self, registry: TokenRegistry, open_app: ASGIApp, guarded_app: ASGIApp, lifespan: Router) -> None:
        self.registry = registry
        self.open_app = open_app
        self.guarded_app = guarded_app
        self.lifespan = lifespan  # starts and stops both apps
        self._guarded = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(scope, receive, send)
        elif self._tokens_issued():
            await self.guarded_app(scope, receive, send)
        else:
            await self.open_app(scope, receive, send)

    def _tokens_issued(self) -> bool:
        if not self._guarded:
            try:
                self._guarded = self.registry.issued()
            except StorageError as exc:
                log.error("%s; every request needs a token from now on, and none is accepted until it is fixed", exc)
                self._guarded = True  # fail closed: a damaged file may well hold tokens
            else:
                if self._guarded:
                    log.warning("a token was issued in %s: every request needs a token from now on", self.registry.path)
        return self._guarded


class ReadinessCheck:
    """`service.check_ready()` with a deadline, for the health check.

    A database that accepts connections and never answers would otherwise hold each probe for as
    long as the driver waits (10 s and more), past a load balancer's own timeout. One check runs at a
    time, in a daemon thread of its own, and probes that come meanwhile wait for that one: a hung
    database costs one thread, not one per probe, and cannot hold up the process when it stops."""

    def __init__(self, service: MemoryService) -> None:
        self.service = service
        self._running: Future[str | None] | None = None  # touched by the event loop's thread only

    async def error(self) -> str | None:
        """None when memory can be stored; otherwise why not, within HEALTH_DEADLINE_SECONDS."""
        if self._running is None or self._running.done():
            self._running = Future()
            threading.Thread(target=self._check, args=(self._running,), name="health check", daemon=True).start()
        waiting = asyncio.wrap_future(self._running)
        done, _ = await asyncio.wait({waiting}, timeout=HEALTH_DEADLINE_SECONDS)
        return waiting.result() if done else f"storage not ready within {HEALTH_DEADLINE_SECONDS} s"

    def _check(self, outcome: Future[str | None]) -> None:
        # The future holds a message, never an exception: a waiter gone past its deadline leaves
        # nothing unretrieved behind; an unexpected error is still reported by the thread itself.
        error: str | None = "the storage check failed; the server's log says why"
        try:
            self.service.check_ready()
            error = None
        except MemoryServiceError as exc:
            error = str(exc)
        finally:
            outcome.set_result(error)


def _health(service: MemoryService, error: str | None) -> Response:
    """200 when memory can be stored, 503 (with the reason) when the storage cannot be reached."""
    body: dict[str, Any] = {
        "version": __version__,
        "storage": service.settings.storage.backend,
        "structured_memory": "on" if service.extraction_on else "off",
    }
    if error is not None:
        return JSONResponse({"status": "unavailable", "error": error, **body}, status_code=503)
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


# --- what a connection may cost ------------------------------------------------------------


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
        read = await _read_body(receive)
        if read is None:
            return  # the caller is gone, or was cut off for sending too slowly: no one to answer
        body, complete = read
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


async def _read_body(receive: Receive) -> tuple[bytes, bool] | None:
    """The request body up to MAX_CHECKED_BODY_BYTES (complete=False if it is longer than that), or
    None if the connection closed before the body was whole."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
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
