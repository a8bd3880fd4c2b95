"""The layering, checked by parsing imports, so that it cannot erode.

Data flows one way: the edges (MCP server, HTTP, stdio, command line) call the service, the
service uses the core (recall, context, updates, rules, portability), the core uses the store,
and everything may use the foundations (models, config, errors, ids, clock, text and token
helpers). A module imports only from its own layer or below.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from project import PACKAGE
from project import PROJECT_ROOT as ROOT

LAYERS: dict[str, list[str]] = {
    "foundation": [
        "errors",
        "ids",
        "clock",
        "environment",
        "config",
        "models",
        "page_sequence",
        "terms",
        "periods",
        "tokens",
        "facts",
        "signals",
        "pending",
        "sessions",
        "wording",
        "projects",
        "relevance",
        "redaction",
    ],
    "store": ["store"],
    "core": [
        "retrieval",
        "index_snapshot",
        "context",
        "rules",
        "reply",
        "prompts",
        "llm",
        "host_memory",
        "updater",
        "queue",
        "recall",
        "update_runner",
        "fact_edits",
        "portability",
        "embeddings",
        "retention",
        "found",
        "session_ledger",
    ],
    "service": ["service"],
    "edges": [
        "tool_functions",
        "tool_text",
        "server",
        "stdio",
        "access",
        "local_peer",
        "http_limits",
        "http_server",
        "hook_relay",
        "hook_helper",
        "injection",
        "quiet_update",
        "hooks",
        "host_setup",
        "console",
        "dashboard",
        "cli",
        "launch",
        "__main__",
    ],
}
RANK = {module: rank for rank, modules in enumerate(LAYERS.values()) for module in modules}
# Outside libraries only one place may use: the MCP SDK at the edge, each driver in its module.
ONLY_IN = {
    "mcp": {"tool_functions.py", "server.py", "stdio.py", "access.py", "http_server.py"},
    "openai": {"llm.py", "embeddings.py"},  # the chat endpoint's client, and the embeddings endpoint's
    "psycopg": {"store/postgres_store.py", "store/migrations.py"},
    "psycopg_pool": {"store/postgres_store.py"},
}


def imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
            if node.module == "memory_mcp":
                modules.update(f"memory_mcp.{alias.name}" for alias in node.names)
    return modules


def top_module(path: Path) -> str:
    """The name a module is listed under in LAYERS: its file, or its package."""
    relative = path.relative_to(PACKAGE)
    return relative.parts[0].removesuffix(".py")


SOURCES = [path for path in sorted(PACKAGE.rglob("*.py")) if path.name != "__init__.py" or path.parent != PACKAGE]


def test_every_module_has_a_layer() -> None:
    unplaced = sorted({top_module(path) for path in SOURCES} - set(RANK))
    assert unplaced == [], f"modules in no layer of LAYERS: {unplaced}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.relative_to(PACKAGE).as_posix())
def test_a_module_imports_only_from_its_layer_or_below(path: Path) -> None:
    own = RANK[top_module(path)]
    upward = []
    for module in imported_modules(path):
        if module.startswith("memory_mcp."):
            target = module.split(".")[1]
            if target in RANK and RANK[target] > own:
                upward.append(module)
    assert upward == [], f"{path.relative_to(PACKAGE)} imports from a higher layer: {sorted(upward)}"


def test_outside_libraries_are_used_where_they_belong() -> None:
    misplaced = []
    for path in SOURCES:
        where = path.relative_to(PACKAGE).as_posix()
        for module in imported_modules(path):
            library = module.split(".")[0]
            if library in ONLY_IN and where not in ONLY_IN[library]:
                misplaced.append(f"{where} imports {module}")
    assert misplaced == []


def test_the_console_renders_results_and_nothing_else() -> None:
    imported = {m for m in imported_modules(PACKAGE / "console.py") if m.startswith("memory_mcp")}
    # projects: how a project is named to a person (a folder's name), nothing that reads memory.
    assert imported <= {"memory_mcp.models", "memory_mcp.access", "memory_mcp.wording", "memory_mcp.projects"}, imported


def test_the_command_line_reaches_memory_only_through_the_service() -> None:
    text = (PACKAGE / "cli.py").read_text(encoding="utf-8")
    assert ".store." not in text and "service.store" not in text
    imported = {m for m in imported_modules(PACKAGE / "cli.py") if m.startswith("memory_mcp.store")}
    assert imported == set(), imported


def test_the_commands_first_step_loads_the_standard_library_alone() -> None:
    """A prompt hook answered by the helper costs what `launch` imports: nothing heavy may creep in."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, memory_mcp.launch; print(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    ours = {name for name in loaded if name.split(".")[0] == "memory_mcp"}
    assert ours == {"memory_mcp", "memory_mcp.launch", "memory_mcp.hook_relay", "memory_mcp.environment"}
    others = {name.split(".")[0] for name in loaded} - set(sys.stdlib_module_names) - {"memory_mcp"}
    assert {name for name in others if not name.startswith("_")} == set(), others


def test_the_readme_shows_these_layers_top_down() -> None:
    """The README's layout table is read by newcomers first: it must name the layers as they are."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text.split("<!-- layers:start -->")[1].split("<!-- layers:end -->")[0]
    rows = re.findall(r"^\| (\w+) \| ((?:`[\w.]+` ?)+) \|", table, flags=re.MULTILINE)
    documented = {layer: re.findall(r"`([\w.]+)`", modules) for layer, modules in rows}
    assert list(documented) == list(reversed(LAYERS))
    assert documented == LAYERS
