"""The dashboard: a web page over the service, to see, search and correct what is remembered.

Server-rendered: Starlette (it comes with the MCP SDK) and Jinja2 templates, which escape all
they print, so remembered text can never become markup. Every page is a plain HTML document; a
small script keeps a refused form on its page and, behind bearer tokens, fetches every page with
the token. Run locally, it answers only its owner, who opens the address with the key it printed
(gate.py). No page may be framed or cached (headers.py). Every address it writes is root-relative,
never built from the Host header a client chooses. Every read and change goes through
MemoryService, so the dashboard holds no rule of its own, and every asset comes from the package:
it works offline.

This module makes the app: its handlers are in pages.py (what shows memory) and changes.py (what
changes it), their addresses in routes.py, and what they read is set on `app.state` here
(context.py).
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware

from memory_mcp.dashboard.context import Dashboard, Warmer
from memory_mcp.dashboard.gate import OwnerGate, TokenGate
from memory_mcp.dashboard.headers import Forbidding
from memory_mcp.dashboard.pages import ask_for_token, refuse_stranger, welcome
from memory_mcp.dashboard.routes import routes
from memory_mcp.dashboard.templating import build_templates
from memory_mcp.service.access import TokenRegistry
from memory_mcp.service.memory_service import MemoryService

LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]"]


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
    middleware = [
        Middleware(Forbidding),
        Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts or LOOPBACK_HOSTS),
    ]
    if owner_key is not None:
        middleware.append(Middleware(OwnerGate, key=owner_key, welcome=welcome, refuse=refuse_stranger))
    if tokens is not None:
        middleware.append(Middleware(TokenGate, tokens=tokens, ask_for_token=ask_for_token))
    app = Starlette(routes=routes(), middleware=middleware)
    app.state.dashboard = Dashboard(service, build_templates(tokens_on=tokens is not None), Warmer(service))
    return app
