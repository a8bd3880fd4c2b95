"""The real agent hosts' command lines, from npm at pinned versions, for tests that drive them.

Each is installed once into `.hosts/` of the project (ignored by git) with the machine's npm;
tests skip when that cannot be done, or fail with the reason when MEMORY_MCP_REQUIRE_HOSTS=1
(as CI sets it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from project import PROJECT_ROOT

HOSTS_FOLDER = PROJECT_ROOT / ".hosts"
REQUIRED = os.environ.get("MEMORY_MCP_REQUIRE_HOSTS") == "1"
# package -> (pinned version, the command it installs)
CLAUDE_CODE = ("@anthropic-ai/claude-code", "2.1.332", "claude")
CODEX = ("@openai/codex", "0.171.0", "codex")  # the package brings its platform binary
GEMINI = ("@google/gemini-cli", "0.61.0", "gemini")


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
