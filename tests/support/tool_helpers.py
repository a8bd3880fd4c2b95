"""The MCP tool methods over one service, callable synchronously from tests (no transport)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import anyio

from memory_mcp.mcp.server import MemoryTools
from memory_mcp.service.memory_service import MemoryService


class _Synchronous:
    """The tool methods of `tools`, called synchronously whether each is a plain or an async method."""

    def __init__(self, tools: Any) -> None:
        self._tools = tools

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._tools, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            if inspect.isawaitable(result):

                async def finish() -> Any:
                    return await result

                return anyio.run(finish)
            return result

        return call


class Tools:
    """The MCP tool methods over one service (the same code the stdio server runs, no transport)."""

    def __init__(self, service: MemoryService) -> None:
        self.service = service
        self.memory = self.own = _Synchronous(MemoryTools(service))
