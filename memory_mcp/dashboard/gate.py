"""Who is looking: the local dashboard's owner, or behind bearer tokens the user a token acts for.

`memory-mcp dashboard` listens on 127.0.0.1, which every account on the machine can reach, so it
answers only requests carrying the key it printed when it started: opened once with `?key=`, the
address sets a cookie that only this browser holds and only this dashboard's pages send
(SameSite=Strict, HttpOnly); any other request gets 403, whatever its Origin says.

Behind bearer tokens, a browser sends no Authorization header when it follows a link, so a page
asked for without one is answered with a page that asks for the token; the page's script keeps the
token in the tab's session storage and fetches each page with the header. The token is never in a
URL or a cookie, so no other site can make a browser act with it: the header is the proof a change
was meant.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from memory_mcp.service.access import TokenRegistry, bearer_user

VIEWER = "viewer"  # request.state.viewer: the user a token acts for (absent without tokens)
PUBLIC_PREFIX = "/static/"
OWNER_KEY = "key"  # the query parameter of the address `memory-mcp dashboard` prints


def viewer(request: Request) -> str | None:
    """The user the request's token acts for; None when the dashboard runs without tokens."""
    return getattr(request.state, VIEWER, None)


def is_asset(scope: Scope) -> bool:
    """Whether the request is for one of the package's own files (style and script): public,
    so that a refusal is a readable page too."""
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    return path.removeprefix(root_path).startswith(PUBLIC_PREFIX)


class OwnerGate:
    """ASGI: let through requests with the owner's cookie, and the assets; trade the printed key
    for that cookie; refuse the rest.

    `welcome(request, onward)` renders the page that takes the browser on to `onward` (the address
    without its key); `refuse(request)` the 403 page that says to open the printed address."""

    def __init__(
        self,
        app: ASGIApp,
        key: str,
        welcome: Callable[[Request, str], Response],
        refuse: Callable[[Request], Response],
    ) -> None:
        self.app = app
        self.key = key.encode()
        self.welcome = welcome
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_asset(scope):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        # Cookies ignore ports: a name of its own keeps two dashboards on one machine apart.
        cookie = f"memory-mcp-owner-{(scope.get('server') or ('', 0))[1]}"
        given = request.query_params.get(OWNER_KEY)
        if given is not None and scope["method"] in ("GET", "HEAD") and self.holds(given):
            response = self.welcome(request, _without_key(request))
            response.headers["Referrer-Policy"] = "no-referrer"  # its address holds the key
            path = scope.get("root_path") or "/"
            response.set_cookie(cookie, self.key.decode(), path=path, httponly=True, samesite="strict")
        elif self.holds(request.cookies.get(cookie, "")):
            await self.app(scope, receive, send)
            return
        else:
            response = self.refuse(request)
        await response(scope, receive, send)

    def holds(self, given: str) -> bool:
        """Whether `given` is the key, compared in constant time (a guess learns nothing from timing)."""
        return hmac.compare_digest(given.encode(), self.key)


def _without_key(request: Request) -> str:
    """The request's own address, root-relative, without the key: where the welcome leads (one
    leading slash: "//host" would lead to another site)."""
    rest = request.url.remove_query_params(OWNER_KEY)
    return "/" + rest.path.lstrip("/") + (f"?{rest.query}" if rest.query else "")


class TokenGate:
    """ASGI: let through requests with a known bearer token (noting its user), and the assets.

    `ask_for_token(request, status, problem)` renders the page that asks for a token: 200 for a
    page opened without one, 401 for a token that is unknown or revoked."""

    def __init__(
        self, app: ASGIApp, tokens: TokenRegistry, ask_for_token: Callable[[Request, int, str | None], Response]
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.ask_for_token = ask_for_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_asset(scope):
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization")
        if header is None:
            opened = scope["method"] in ("GET", "HEAD")
            problem = None if opened else "This change carried no token: open the page again and give your token."
            await self.ask_for_token(Request(scope), 200 if opened else 401, problem)(scope, receive, send)
            return
        user = bearer_user(self.tokens, header)
        if user is None:
            problem = "That token is not accepted: it is unknown or was revoked (memory-mcp token list shows them)."
            await self.ask_for_token(Request(scope), 401, problem)(scope, receive, send)
            return
        scope.setdefault("state", {})[VIEWER] = user
        await self.app(scope, receive, send)
