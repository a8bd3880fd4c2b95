"""How a command prints what it did: JSON for scripts (`--json`), or tables for a person."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

from pydantic import BaseModel


def emit(args: argparse.Namespace, result: BaseModel, render: Callable[[], None]) -> int:
    """Print `result` as JSON with `--json`, else as `render` draws it."""
    if args.json:
        return print_json(result.model_dump(mode="json"))
    render()
    return 0


def console() -> ModuleType:
    """The table renderer, imported only by commands that print tables (rich is not light)."""
    from memory_mcp.cli import rendering

    return rendering


def print_json(value: Any) -> int:
    print(json.dumps(value, ensure_ascii=False, indent=2))
    return 0
