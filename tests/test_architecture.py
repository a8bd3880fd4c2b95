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

# Each layer is one package, bottom to top; a module imports from its own package or a lower one.
LAYERS: dict[str, str] = {
    "base": "errors, ids, the clock, settings, the environment, shared phrases, projects, the model base",
    "models": "pydantic models at every boundary: stored, requests, results, export",
    "store": "the storage protocol, durable files, page columns; files/ and postgres/ backends",
    "memory": "rules every change obeys: facts, proposals, progress, sessions, signals, redaction",
    "recall": "terms, periods, token counting, ranking, saved index, vectors, the <memory> block",
    "extraction": "queue, runner, updater, prompt, LLM client, reply parsing, host facts, retention",
    "portability": "export documents, importers, backend copy",
    "service": "MemoryService (the tool API) and its parts, tokens, the session ledger",
    "dashboard": "app factory, routes, gate, charts, filters, templates",
    "mcp": "server wiring, tool signatures and text, stdio, HTTP, the SDK token verifier",
    "hosts": "what a host session is given, the prompt helper; one folder per host",
    "cli": "the fast first step, the parser, hooks as commands, the commands, rendering",
    "__main__": "`python -m memory_mcp`",
}
RANK = {package: rank for rank, package in enumerate(LAYERS)}
# Outside libraries only one place may use: the MCP SDK at the edge, each driver in its module.
ONLY_IN = {
    "mcp": {
        "mcp/tool_signatures.py",
        "mcp/server.py",
        "mcp/stdio.py",
        "mcp/token_verifier.py",
        "mcp/http.py",
        "mcp/remote_bridge.py",
    },
    "openai": {"extraction/llm_client.py", "recall/embedders.py"},  # the chat client, the embeddings client
    "psycopg": {"store/postgres/backend.py", "store/postgres/migrations.py"},
    "psycopg_pool": {"store/postgres/backend.py"},
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
    """The layer a module belongs to: its top-level package (or `__main__`)."""
    relative = path.relative_to(PACKAGE)
    return relative.parts[0].removesuffix(".py")


SOURCES = [path for path in sorted(PACKAGE.rglob("*.py")) if path.name != "__init__.py" or path.parent != PACKAGE]


def test_every_module_has_a_layer() -> None:
    unplaced = sorted({top_module(path) for path in SOURCES} - set(RANK))
    assert unplaced == [], f"modules in no layer of LAYERS: {unplaced}"
    loose = sorted(path.name for path in PACKAGE.glob("*.py") if path.name not in {"__init__.py", "__main__.py"})
    assert loose == [], f"modules outside every layer package: {loose}"


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


def test_every_model_is_built_on_first_use() -> None:
    """A model deriving pydantic's BaseModel itself would build its validator at import, which
    every cold hook pays for: they derive base.model.Model."""
    direct = [
        f"{path.relative_to(PACKAGE).as_posix()}: {node.name}"
        for path in SOURCES
        if path != PACKAGE / "base" / "model.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
        and any(isinstance(base, ast.Name) and base.id == "BaseModel" for base in node.bases)
    ]
    assert direct == []


def test_the_console_renders_results_and_nothing_else() -> None:
    imported = {m for m in imported_modules(PACKAGE / "cli" / "rendering.py") if m.startswith("memory_mcp")}
    # projects: how a project is named to a person (a folder's name), nothing that reads memory.
    assert imported <= {
        "memory_mcp.models",
        "memory_mcp.service.access",
        "memory_mcp.base.phrases",
        "memory_mcp.base.projects",
    }, imported


def test_the_command_line_reaches_memory_only_through_the_service() -> None:
    for path in sorted((PACKAGE / "cli").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "service.store" not in text, path
        imported = {m for m in imported_modules(path) if m.startswith("memory_mcp.store")}
        assert imported == set(), (path, imported)


def test_the_commands_first_step_loads_the_standard_library_alone() -> None:
    """A prompt hook answered by the helper costs what `cli.entry` imports: nothing heavy may creep in."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, memory_mcp.cli.entry; print(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    ours = {name for name in loaded if name.split(".")[0] == "memory_mcp"}
    assert ours == {
        "memory_mcp",
        "memory_mcp.cli",
        "memory_mcp.cli.entry",
        "memory_mcp.cli.stdio_relay",
        "memory_mcp.hosts",
        "memory_mcp.hosts.relay",
        "memory_mcp.base",
        "memory_mcp.base.environment",
        "memory_mcp.base.private_sockets",
    }
    others = {name.split(".")[0] for name in loaded} - set(sys.stdlib_module_names) - {"memory_mcp"}
    assert {name for name in others if not name.startswith("_")} == set(), others


def test_the_architecture_guide_shows_these_layers_top_down() -> None:
    """docs/architecture.md's layout table is read by newcomers first: it must name the packages as they are."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split("<!-- layers:start -->")[1].split("<!-- layers:end -->")[0]
    documented = re.findall(r"^\| `([\w]+)/?` \|", table, flags=re.MULTILINE)
    assert documented == [name for name in reversed(LAYERS) if name != "__main__"]


MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def test_no_module_is_longer_than_a_sitting_read() -> None:
    """A module the next engineer reads whole: at most MAX_MODULE_LINES lines."""
    long = {
        path.relative_to(PACKAGE).as_posix(): lines
        for path in SOURCES
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_is_longer_than_a_screen() -> None:
    """A function read at one glance: at most MAX_FUNCTION_LINES lines, decorators included."""
    long = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - first + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE).as_posix()}:{node.lineno} {node.name} ({lines} lines)")
    assert long == [], f"functions over {MAX_FUNCTION_LINES} lines: {long}"
