"""Commands that bring stored memory up to date: `flush` (extraction now) and `embed` (the vectors
exchanges lack)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from memory_mcp.base.phrases import plural
from memory_mcp.cli.commands.checks import require_stored
from memory_mcp.cli.commands.output import console, print_json
from memory_mcp.models import FlushRequest
from memory_mcp.service.memory_service import MemoryService


def flush(service: MemoryService, args: argparse.Namespace) -> int:
    if args.user:
        require_stored(service, args.user, args.agent)
    users = [args.user] if args.user else service.list_users()
    results = [
        service.flush_memory(FlushRequest.build(user_id=user, agent_name=args.agent, retry_failed=args.retry_failed))
        for user in users
    ]
    if args.json:
        return print_json([result.model_dump(mode="json") for result in results])
    for result in results:
        console().change(result)
    if not results:
        console().out.print("no users: nothing to flush")
    return 0 if all(not result.errors for result in results) else 1


def embed(service: MemoryService, args: argparse.Namespace) -> int:
    if args.user:
        require_stored(service, args.user, args.agent)

    began = time.monotonic()

    def progress(scope: Any, done: int, total: int) -> None:
        # Tens of thousands of exchanges take hours on a laptop's CPU: say how long is left.
        elapsed = time.monotonic() - began
        left = f", about {duration(elapsed * (total - done) / done)} left" if done < total else ""
        print(f"\r{scope.describe()}: {done}/{total} embedded{left}\033[K", end="", file=sys.stderr, flush=True)

    stored = 0
    try:
        for user in [args.user] if args.user else service.list_users():
            began = time.monotonic()
            added = service.embed_missing(user, args.agent, progress)
            stored += added
            if added:
                print(file=sys.stderr)  # after the progress line
    except KeyboardInterrupt:
        print(f"\nstopped after {plural(stored, 'exchange')}: run it again to go on", file=sys.stderr)
        return 130
    print(f"{plural(stored, 'exchange')} embedded")
    return 0


def duration(seconds: float) -> str:
    """A rough span of time, as a person reads it: 40 s, 12 min, 3 h 10 min."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"
