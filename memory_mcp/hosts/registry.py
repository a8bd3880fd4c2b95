"""The hosts memory-mcp serves hooks for, and which one called: named by `--host`, or recognised
by what its payload and environment carry (one hook command serves every host)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memory_mcp.base.errors import InvalidInput
from memory_mcp.hosts.claude_code.adapter import ClaudeCode
from memory_mcp.hosts.cline.adapter import Cline
from memory_mcp.hosts.codex.adapter import Codex
from memory_mcp.hosts.copilot.adapter import Copilot
from memory_mcp.hosts.cursor.adapter import Cursor
from memory_mcp.hosts.events import HostAdapter
from memory_mcp.hosts.gemini.adapter import Gemini
from memory_mcp.hosts.vscode.adapter import VSCode
from memory_mcp.hosts.windsurf.adapter import Windsurf

# In the order they are tried: the most particular first, Claude Code (which claims any payload)
# last. Copilot CLI runs the hooks of Claude Code's and VS Code's settings files too, and is told
# apart by its environment, so it comes before them.
ADAPTERS: tuple[HostAdapter, ...] = (
    Gemini(),
    Codex(),
    Copilot(),
    Cursor(),
    Windsurf(),
    Cline(),
    VSCode(),
    ClaudeCode(),
)
HOST_NAMES = tuple(adapter.name for adapter in ADAPTERS)


def adapter_for(name: str | None, payload: Mapping[str, Any], environ: Mapping[str, str]) -> HostAdapter:
    """The adapter `name` names, or the first that recognises the payload."""
    if name is not None:
        for adapter in ADAPTERS:
            if adapter.name == name:
                return adapter
        raise InvalidInput(f"--host must be one of {', '.join(HOST_NAMES)} (got {name!r})")
    return next(adapter for adapter in ADAPTERS if adapter.recognises(payload, environ))
