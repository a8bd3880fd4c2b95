"""What every dashboard handler reads: the service and templates its app was made with, whose
memory a page is about, how an address is written and how a page is answered."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.templating import Jinja2Templates

from memory_mcp.dashboard.past_conversations import Held
from memory_mcp.service.memory_service import MemoryService

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
            return path(request, name, user_id=self.user_id, **params)
        return path(request, AGENT_ROUTE + name, user_id=self.user_id, agent_name=self.agent_name, **params)


# A page of one memory: what a route below a memory's root hands on once that memory is found.
Page = Callable[[Request, Memory], Awaitable[Response]]


class Warmer:
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


@dataclass(frozen=True)
class Dashboard:
    """What the app factory sets on `app.state.dashboard` for every handler (and gate page) to read."""

    service: MemoryService
    templates: Jinja2Templates
    warmer: Warmer
    held: Held = field(default_factory=Held)  # exports of past conversations previewed, awaiting Import


def dashboard_of(request: Request) -> Dashboard:
    """The dashboard the request reached (the app sets it before any middleware runs)."""
    dashboard: Dashboard = request.app.state.dashboard
    return dashboard


def service_of(request: Request) -> MemoryService:
    """The service behind the dashboard the request reached."""
    return dashboard_of(request).service


def path(request: Request, name: str, **params: Any) -> URL:
    """The root-relative address of page `name`: never built from the Host header, which the
    client chooses (behind tokens any Host is answered, and a page must not load a script from it)."""
    return URL(request.url_for(name, **params).path)


def render(request: Request, name: str, status: int = 200, **values: Any) -> HTMLResponse:
    """Template `name` filled with `values`, as the answer to `request`."""
    return dashboard_of(request).templates.TemplateResponse(request, name, values, status_code=status)


def refusal(request: Request, status: int, message: str) -> HTMLResponse:
    """The page that says why a request was not answered: 400, 403 or 404."""
    heading = {400: "Cannot be shown", 403: "Not allowed"}.get(status, "Not found")
    return render(request, "missing.html", status=status, heading=heading, message=message)
