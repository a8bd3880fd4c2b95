"""The distribution as a user installs it: the built wheel in a fresh virtual environment, with
nothing of this checkout on the path, answers --version and serves a stdio session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from project import PROJECT_ROOT
from stdio_helpers import connect_command, ok, run

from memory_mcp import __version__

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

DISTRIBUTION = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]


def _sh(*command: str | Path, cwd: Path | None = None) -> str:
    completed = subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=840, check=False
    )
    assert completed.returncode == 0, f"{command} failed:\n{completed.stdout[-2000:]}\n{completed.stderr[-4000:]}"
    return completed.stdout


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tracked sources: a build writes into its source tree, never into this one."""
    copy = tmp_path_factory.mktemp("sources")
    for name in filter(None, _sh("git", "ls-files", "-z", cwd=PROJECT_ROOT).split("\0")):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROJECT_ROOT / name, copy / name)
    return copy


@pytest.fixture(scope="module")
def fresh_install(sources: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from the sources, installed with its dependencies into a new venv; its
    bin directory."""
    work = tmp_path_factory.mktemp("packaging")
    _sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", work / "dist", sources)
    [wheel] = (work / "dist").glob("*.whl")
    assert wheel.name.startswith(DISTRIBUTION.replace("-", "_") + "-" + __version__)
    _sh(sys.executable, "-m", "venv", work / "venv")
    _sh(work / "venv" / "bin" / "python", "-m", "pip", "install", "--quiet", wheel)
    return work / "venv" / "bin"


def test_the_installed_commands_answer_version(fresh_install: Path) -> None:
    for command in ("memory-mcp", DISTRIBUTION):
        assert _sh(fresh_install / command, "--version").strip() == f"memory-mcp {__version__}"


def test_the_installed_server_serves_a_session_from_outside_the_checkout(fresh_install: Path, tmp_path: Path) -> None:
    async def session() -> tuple[str, list[str]]:
        env = {"HOME": str(tmp_path)}
        async with connect_command([str(fresh_install / "memory-mcp")], env, cwd=tmp_path) as client:
            ok(await client.call_tool("add_memory", {"user_input": "My cat is Miso", "agent_response": "Cute"}))
            recalled = ok(await client.call_tool("retrieve_memory", {"query": "what is my cat called?"}))
            tools = [tool.name for tool in (await client.list_tools()).tools]
            return recalled["context"], tools

    context, tools = run(session, timeout=120)
    assert "My cat is Miso" in context and "add_memory" in tools
    imported_from = _sh(fresh_install / "python", "-c", "import memory_mcp; print(memory_mcp.__file__)", cwd=tmp_path)
    assert str(PROJECT_ROOT) not in imported_from, "the installed copy served, not this checkout"


def test_uvx_runs_the_command_straight_from_the_sources(sources: Path, tmp_path: Path) -> None:
    uvx = Path(sys.executable).with_name("uvx")
    env = {**os.environ, "UV_CACHE_DIR": str(Path(sys.prefix) / "uv-cache")}
    done = subprocess.run(
        [str(uvx), "--from", str(sources), "memory-mcp", "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == f"memory-mcp {__version__}"


def test_the_installed_dashboard_renders_its_pages_from_the_package(fresh_install: Path, tmp_path: Path) -> None:
    script = (
        "from jinja2 import Environment, PackageLoader\n"
        "import importlib.resources as resources\n"
        "env = Environment(loader=PackageLoader('memory_mcp.dashboard'))\n"
        "print(sorted(env.list_templates()))\n"
        "print((resources.files('memory_mcp.dashboard') / 'static' / 'dashboard.css').is_file())\n"
    )
    listed, has_css = _sh(fresh_install / "python", "-c", script, cwd=tmp_path).splitlines()
    assert "users.html" in listed and "search.html" in listed
    assert has_css == "True"


def test_no_tracked_file_is_over_one_megabyte() -> None:
    """Every clone downloads every tracked file: data and wheels come from elsewhere."""
    if not (PROJECT_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=PROJECT_ROOT, capture_output=True, check=True).stdout
    sizes = {name: (PROJECT_ROOT / name).stat().st_size for name in listed.decode().split("\0") if name}
    assert [name for name, size in sizes.items() if size > 1 << 20] == []


def test_the_license_is_the_one_the_package_declares() -> None:
    declared = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["license"]
    assert declared == "MIT" and (PROJECT_ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
