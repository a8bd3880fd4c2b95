"""Layering rules, checked by parsing imports: data flows server/cli -> service -> store."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "memory_mcp"


def imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
    return modules


def modules_under(relative: str) -> list[Path]:
    target = PACKAGE / relative
    return sorted(target.rglob("*.py")) if target.is_dir() else [target]


FORBIDDEN = [
    # (layer, prefixes it must not import)
    ("store", ("mcp", "memory_mcp.server", "memory_mcp.cli", "memory_mcp.service")),
    ("retrieval.py", ("mcp", "memory_mcp.server", "memory_mcp.cli", "memory_mcp.service", "memory_mcp.store")),
    ("service.py", ("mcp", "memory_mcp.server", "memory_mcp.cli")),
    *[
        (module, ("mcp", "memory_mcp.server", "memory_mcp.cli", "memory_mcp.service"))
        for module in ("queue.py", "updater.py", "prompts.py", "signals.py", "pending.py", "llm.py")
    ],
    ("models.py", ("mcp", "memory_mcp.server", "memory_mcp.cli", "memory_mcp.service", "memory_mcp.store")),
    ("config.py", ("mcp", "memory_mcp.server", "memory_mcp.cli", "memory_mcp.service", "memory_mcp.store")),
    ("access.py", ("memory_mcp.server", "memory_mcp.cli", "memory_mcp.service", "memory_mcp.http_server")),
    ("server.py", ("memory_mcp.cli", "memory_mcp.http_server")),
]


@pytest.mark.parametrize(("layer", "forbidden"), FORBIDDEN, ids=[layer for layer, _ in FORBIDDEN])
def test_layers_import_only_downwards(layer: str, forbidden: tuple[str, ...]) -> None:
    for path in modules_under(layer):
        bad = {m for m in imported_modules(path) if any(m == f or m.startswith(f + ".") for f in forbidden)}
        assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


def test_the_llm_client_is_only_reached_through_llm_py() -> None:
    importers = sorted(
        path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py") if "openai" in imported_modules(path)
    )
    assert importers == ["llm.py"]


def test_only_config_reads_the_environment() -> None:
    readers = [
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "os.environ" in path.read_text(encoding="utf-8") or "getenv" in path.read_text(encoding="utf-8")
    ]
    assert readers == ["config.py"]
