"""Who is looking: behind bearer tokens, every dashboard request but its assets carries one.

A browser sends no Authorization header when it follows a link, so a page asked for without one
is answered with a page that asks for the token; the page's script keeps the token in the tab's
session storage and fetches each page with the header. The token is never in a URL or a cookie,
so no other site can make a browser act with it: the header is the proof a change was meant.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from memory_mcp.access import TokenRegistry, bearer_user

VIEWER = "viewer"  # request.state.viewer: the user a token acts for (absent without tokens)
PUBLIC_PREFIX = "/static/"


def viewer(request: Request) -> str | None:
    """The user the request's token acts for; None when the dashboard runs without tokens."""
    return getattr(request.state, VIEWER, None)


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
        if scope["type"] != "http" or scope["path"].removeprefix(scope.get("root_path", "")).startswith(PUBLIC_PREFIX):
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
