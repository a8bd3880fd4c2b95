"""The dashboard's pages that show memory without changing it, and the pages its gates answer with."""

from __future__ import annotations

from typing import Any, get_args

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from memory_mcp.base.clock import now
from memory_mcp.dashboard.charts import weekly
from memory_mcp.dashboard.context import Memory, dashboard_of, path, refusal, render, service_of
from memory_mcp.dashboard.gate import viewer
from memory_mcp.models import ExportRequest, ProfileRequest, RetrieveMemoryRequest, SearchFactsRequest
from memory_mcp.models.stored import FactCategory
from memory_mcp.recall.terms import index_terms
from memory_mcp.service.memory_service import MemoryService

FACT_CATEGORIES: tuple[str, ...] = get_args(FactCategory)
RECENT_EXCHANGES = 20
BROWSED_EXCHANGES = 200  # per page of a browse by thread or day
MAX_FACTS_SHOWN = 500  # the most search_facts gives at once; memory.max_facts is at most 500 too
SEARCH_RESULTS = 20
SESSIONS_SHOWN = 12


async def home(request: Request) -> Response:
    return RedirectResponse(path(request, "users"), status_code=303)


async def users(request: Request) -> Response:
    service = service_of(request)
    status = service.memory_status(only_user=viewer(request))
    healthy = [user for user in status.users if not user.problem]
    agents = {
        user.user_id: [(name, service.scope_summary(user.user_id, name)) for name in user.agents] for user in healthy
    }
    last = {
        (user.user_id, name): _last_activity(service, user.user_id, name)
        for user in healthy
        for name in [None, *user.agents]
    }
    return render(request, "users.html", summary=status, last_activity=last, agents=agents)


async def user(request: Request, memory: Memory) -> Response:
    return await memory_page(request, memory)


async def memory_page(
    request: Request, memory: Memory, status: int = 200, failed: str | None = None, **values: Any
) -> Response:
    """The page of one memory; after a refused change (`failed` names the form), with the
    reason beside that form and what was typed still in it."""
    service = service_of(request)
    profile = service.get_user_profile(
        ProfileRequest.build(
            user_id=memory.user_id,
            agent_name=memory.agent_name,
            include_knowledge=True,
            include_assistant_knowledge=True,
        )
    )
    said = service.exchange_times(memory.user_id, memory.agent_name)
    everything = SearchFactsRequest.build(
        user_id=memory.user_id, agent_name=memory.agent_name, include_superseded=True, limit=MAX_FACTS_SHOWN
    )
    history = [fact for fact in service.search_facts(everything).facts if fact.validTo]
    status_of = service.memory_status(only_user=memory.user_id)
    agents = status_of.users[0].agents if memory.agent_name is None and status_of.users else []
    sessions = service.sessions(memory.user_id, memory.agent_name)
    dashboard_of(request).warmer.start(memory)
    return render(
        request,
        "user.html",
        status=status,
        memory=memory,
        profile=profile,
        history=sorted(history, key=lambda fact: fact.validTo or "", reverse=True),
        over_time=weekly(
            {
                "exchanges": said,
                "facts added": (fact.createdAt for fact in [*(profile.facts or []), *history]),
                "facts superseded": (fact.validTo or "" for fact in history),
            },
            now().date(),
        ),
        categories=FACT_CATEGORIES,
        recent=list(reversed(service.latest_pages(memory.user_id, memory.agent_name, RECENT_EXCHANGES))),
        status_of=status_of,
        summary=service.scope_summary(memory.user_id, memory.agent_name),
        sessions=sessions[:SESSIONS_SHOWN],
        archived={view.name for view in sessions if view.archived},
        agents=[(name, service.scope_summary(memory.user_id, name)) for name in agents],
        failed=failed,
        **values,
    )


async def search(request: Request, memory: Memory) -> Response:
    service = service_of(request)
    query = request.query_params.get("q", "").strip()
    exchanges, facts = [], []
    if query:
        exchanges = service.search_exchanges(
            RetrieveMemoryRequest.build(
                user_id=memory.user_id, agent_name=memory.agent_name, query=query, max_results=SEARCH_RESULTS
            )
        )
        facts = service.search_facts(
            SearchFactsRequest.build(user_id=memory.user_id, agent_name=memory.agent_name, query=query)
        ).facts
    return render(
        request,
        "search.html",
        memory=memory,
        query=query,
        terms=set(index_terms(query)),
        exchanges=exchanges,
        facts=facts,
        archived=service.archived_sessions(memory.user_id, memory.agent_name),
    )


async def exchanges(request: Request, memory: Memory) -> Response:
    service = service_of(request)
    thread, day = request.query_params.get("thread"), request.query_params.get("day")
    project = request.query_params.get("project")  # "" for the exchanges without one
    chosen, total = service.find_pages(
        memory.user_id,
        memory.agent_name,
        lambda exchange: (
            (thread is None or exchange.thread_id == thread)
            and (day is None or exchange.timestamp.startswith(day))
            and (project is None or exchange.project == (project or None))
        ),
        BROWSED_EXCHANGES,
    )
    return render(
        request,
        "exchanges.html",
        memory=memory,
        thread=thread,
        day=day,
        project=project,
        exchanges=chosen,
        total=total,
        archived=service.archived_sessions(memory.user_id, memory.agent_name),
    )


async def exchange(request: Request, memory: Memory) -> Response:
    service = service_of(request)
    page_id = request.path_params["page_id"]
    found, _ = service.find_pages(memory.user_id, memory.agent_name, lambda p: p.page_id == page_id, 1)
    if not found:
        return refusal(request, 404, f"{memory.label} has no exchange {page_id}")
    return render(
        request,
        "exchange_page.html",
        memory=memory,
        exchange=found[0],
        archived=service.archived_sessions(memory.user_id, memory.agent_name),
    )


async def export(request: Request, memory: Memory) -> Response:
    exported = service_of(request).export_memory(
        ExportRequest.build(user_id=memory.user_id, agent_name=memory.agent_name)
    )
    name = memory.user_id if memory.agent_name is None else f"{memory.user_id}-{memory.agent_name}"
    return Response(
        exported.model_dump_json(indent=2),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="memory-{name}.json"'},
    )


def _last_activity(service: MemoryService, user_id: str, agent_name: str | None) -> str:
    """When the memory's newest exchange was added ("" with none)."""
    latest = service.latest_pages(user_id, agent_name, 1)
    return latest[0].timestamp if latest else ""


# --- what the gates answer with (gate.py) ---------------------------------------------------


def ask_for_token(request: Request, status: int, problem: str | None) -> Response:
    return render(request, "token.html", status=status, problem=problem)


def welcome(request: Request, onward: str) -> Response:
    return render(request, "welcome.html", onward=onward)


def refuse_stranger(request: Request) -> Response:
    message = (
        "This dashboard answers only the account that started it. Open the address it printed when "
        "it started (the one ending in ?key=…); after a restart, the new one it printed."
    )
    return render(request, "missing.html", status=403, heading="Not allowed", message=message, locked=True)
