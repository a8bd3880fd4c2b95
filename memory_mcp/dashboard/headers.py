"""What every dashboard answer forbids: being framed by another page (a framed page can be clicked
through by someone who cannot see it), and, for every page, being kept in a cache (a page shows
memory, or asks for a token; a shared proxy or the browser's disk must not keep either)."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_mcp.dashboard.gate import is_asset


class Forbidding:
    """ASGI: adds `X-Frame-Options: DENY`, `Content-Security-Policy: frame-ancestors 'none'` (the
    same for older and newer browsers) to every answer, and `Cache-Control: no-store` to all but
    the package's own assets."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        asset = is_asset(scope)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["X-Frame-Options"] = "DENY"
                headers["Content-Security-Policy"] = "frame-ancestors 'none'"
                if not asset:
                    headers["Cache-Control"] = "no-store"
            await send(message)

        await self.app(scope, receive, sending)
