"""The real agent hosts' command lines, from npm at pinned versions, for tests that drive them.

Each is installed once into `.hosts/` of the project (ignored by git) with the machine's npm;
tests skip when that cannot be done, or fail with the reason when MEMORY_MCP_REQUIRE_HOSTS=1
(as CI sets it). `installed_in_home` installs memory-mcp into a host in a home of its own, and
`HostCli` runs it there against a scripted model API.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from command_line import cli
from project import PROJECT_ROOT

from memory_mcp.base.settings import Settings
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

HOSTS_FOLDER = PROJECT_ROOT / ".hosts"
REQUIRED = os.environ.get("MEMORY_MCP_REQUIRE_HOSTS") == "1"
# package -> (pinned version, the command it installs)
CLAUDE_CODE = ("@anthropic-ai/claude-code", "2.1.332", "claude")
CODEX = ("@openai/codex", "0.171.0", "codex")  # the package brings its platform binary
GEMINI = ("@google/gemini-cli", "0.61.0", "gemini")
COPILOT = ("@github/copilot", "1.0.102", "copilot")


def host_command(host: tuple[str, str, str]) -> Path:
    """The pinned host CLI's executable, installed with npm if it is not yet; the test skips (or
    fails under MEMORY_MCP_REQUIRE_HOSTS=1) when that cannot be done."""
    package, version, command = host
    prefix = HOSTS_FOLDER / f"{package.replace('/', '+')}@{version}"
    executable = prefix / "node_modules" / ".bin" / command
    if executable.exists():
        return executable
    why = _install(package, version, prefix)
    if why is None and executable.exists():
        return executable
    reason = f"{package}@{version} is not available: {why or 'npm installed no ' + command}"
    if REQUIRED:
        pytest.fail(reason)
    pytest.skip(reason)


def _install(package: str, version: str, prefix: Path) -> str | None:
    npm = shutil.which("npm")
    if npm is None:
        return "no npm on this machine (install Node.js; .ci/run does)"
    prefix.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(prefix), f"{package}@{version}"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return None if done.returncode == 0 else f"npm install failed: {done.stderr.strip()[-500:]}"


def installed_in_home(
    host: tuple[str, str, str], name: str, tmp_path: Path, memory_home: Path, files: Mapping[str, str] = {}
) -> tuple[Path, Path]:
    """The pinned host CLI's executable, and a user home of its own (`tmp_path/user`) in which
    `memory-mcp install NAME` has run, with `files` (the user's own settings, by path in the home)
    written there before."""
    executable = host_command(host)
    user_home = tmp_path / "user"
    user_home.mkdir(parents=True)
    for relative, text in files.items():
        (user_home / relative).parent.mkdir(parents=True, exist_ok=True)
        (user_home / relative).write_text(text, encoding="utf-8")
    installed = cli(memory_home, "install", name, env={"HOME": str(user_home)})
    assert installed.code == 0, installed.stderr
    return executable, user_home


@dataclass
class HostCli:
    """A host CLI with memory-mcp installed in a home of its own, its model a scripted API that
    records each request (`api.requests`)."""

    executable: Path
    user_home: Path
    memory_home: Path
    api: Any

    def project(self, name: str) -> Path:
        folder = self.user_home / "code" / name
        (folder / ".git").mkdir(parents=True, exist_ok=True)
        return folder

    def environment(self) -> dict[str, str]:
        """What the CLI runs with: this home and memory's; a host adds how it reaches the API."""
        return {"PATH": os.environ["PATH"], "HOME": str(self.user_home), "MEMORY_MCP_HOME": str(self.memory_home)}

    def stored(self) -> list[tuple[str, str, str | None]]:
        """Each exchange the default user's memory holds: (prompt, reply, project)."""
        service = MemoryService(Settings(data_storage_path=self.memory_home))
        try:
            pages = service.store.read_pages(Scope("default")).pages
            return [(page.user_input, page.agent_response, page.project) for page in pages]
        finally:
            service.close()

    def run_cli(self, arguments: Sequence[str], project: Path) -> list[dict[str, Any]]:
        """The CLI with `arguments` in `project`, no input; the requests the model was sent meanwhile."""
        before = len(self.api.requests)
        done = subprocess.run(
            [str(self.executable), *arguments],
            cwd=project,
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        sent: list[dict[str, Any]] = self.api.requests[before:]
        return sent
