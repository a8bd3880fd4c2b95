"""A host's hook run as the host runs it (`memory-mcp hook EVENT` with its JSON on stdin), and
what the hooks stored, read back through the core."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from command_line import Outcome, cli

from memory_mcp.base.settings import Settings
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope


def hook(home: Path, event: str, payload: dict[str, Any], *flags: str, **options: Any) -> Outcome:
    return cli(home, "hook", event, *flags, stdin=json.dumps(payload), **options)


def stored(home: Path, user_id: str = "default") -> list[tuple[str, str, str | None]]:
    """Each stored exchange as (prompt, reply, thread)."""
    service = MemoryService(Settings(data_storage_path=home))
    try:
        pages = service.store.read_pages(Scope(user_id)).pages
        return [(page.user_input, page.agent_response, page.thread_id) for page in pages]
    finally:
        service.close()
