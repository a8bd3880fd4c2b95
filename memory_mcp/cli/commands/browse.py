"""Commands that look at memory without changing it: `users`, `show`, `search`."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from memory_mcp.base.projects import project_name
from memory_mcp.cli.commands.checks import require_stored
from memory_mcp.cli.commands.output import console, emit, print_json
from memory_mcp.models import Page, ProfileRequest, RetrieveMemoryRequest, SearchFactsRequest
from memory_mcp.service.memory_service import MemoryService


def users(service: MemoryService, args: argparse.Namespace) -> int:
    result = service.memory_status()
    return emit(args, result, lambda: console().status(result))


def show(service: MemoryService, args: argparse.Namespace) -> int:
    require_stored(service, args.user, args.agent)
    profile = service.get_user_profile(
        ProfileRequest.build(user_id=args.user, agent_name=args.agent, include_knowledge=args.facts)
    )
    if args.project is None:
        pages = service.latest_pages(profile.user_id, profile.agent_name, args.pages)
    else:
        newest, _ = service.find_pages(profile.user_id, profile.agent_name, in_project(args.project), args.pages)
        pages = newest[::-1]
    if args.json:
        return print_json(
            {"profile": profile.model_dump(mode="json"), "pages": [p.model_dump(mode="json") for p in pages]}
        )
    console().profile(profile, pages)
    return 0


def search(service: MemoryService, args: argparse.Namespace) -> int:
    require_stored(service, args.user, args.agent)
    identity = {"user_id": args.user, "agent_name": args.agent}
    pages = service.search_exchanges(RetrieveMemoryRequest.build(query=args.query, max_results=args.limit, **identity))
    if args.project is not None:
        pages = [page for page in pages if in_project(args.project)(page)]
    facts = service.search_facts(SearchFactsRequest.build(query=args.query, limit=args.limit, **identity))
    if args.json:
        return print_json(
            {"pages": [page.model_dump(mode="json") for page in pages], "facts": facts.model_dump(mode="json")["facts"]}
        )
    console().search(args.query, pages, facts)
    return 0


def in_project(project: str) -> Callable[[Page], bool]:
    """Whether an exchange belongs to `project`: its whole path, or its folder's name."""
    return lambda page: page.project is not None and project in (page.project, project_name(page.project))
