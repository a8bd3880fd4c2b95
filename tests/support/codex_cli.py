"""The real Codex CLI (npm, pinned) with memory-mcp installed as a user installs it
(`memory-mcp install codex`), its model a custom provider (`wire_api = "responses"`) pointed at a
scripted Responses API on 127.0.0.1 that records what the model is sent."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host_clis import CODEX, HostCli, installed_in_home
from memory_blocks import BLOCK
from scripted_responses import ScriptedResponses, input_texts

PROVIDER = """\
model = "scripted-model"
model_provider = "scripted"

[model_providers.scripted]
name = "Scripted"
base_url = "{base_url}"
wire_api = "responses"
env_key = "SCRIPTED_API_KEY"
"""


@dataclass
class Codex(HostCli):
    """Codex installed with memory-mcp (`memory-mcp install codex`) in a home of its own."""

    api: ScriptedResponses

    def environment(self) -> dict[str, str]:
        return super().environment() | {"SCRIPTED_API_KEY": "not-a-key"}

    def servers(self) -> list[dict[str, Any]]:
        """The MCP servers Codex reads from its config (`codex mcp list --json`). Whether the model's
        first request lists their tools depends on how soon each server answers, so the config is
        what is checked."""
        listed = subprocess.run(
            [str(self.executable), "mcp", "list", "--json"],
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert listed.returncode == 0, listed.stderr[-2000:]
        servers: list[dict[str, Any]] = json.loads(listed.stdout)
        return servers

    def run(self, prompt: str, project: Path) -> list[dict[str, Any]]:
        """`codex exec PROMPT` in `project`; the requests the model was sent meanwhile."""
        return self.run_cli(["exec", "--skip-git-repo-check", "--dangerously-bypass-hook-trust", prompt], project)


def developer_blocks(requests: list[dict[str, Any]]) -> list[str]:
    """The <memory> blocks the hooks put before the model (Codex sends them as developer messages)."""
    return [
        found for request in requests for text in input_texts(request, "developer") for found in BLOCK.findall(text)
    ]


@contextmanager
def codex_installed(tmp_path: Path, memory_home: Path) -> Iterator[Codex]:
    """Codex in a home of its own under `tmp_path`, memory-mcp installed, its model scripted."""
    executable, user_home = installed_in_home(CODEX, "codex", tmp_path, memory_home)
    api = ScriptedResponses(respond=lambda request: "Noted: pnpm it is, and vitest for the tests.").start()
    config = user_home / ".codex" / "config.toml"  # the provider before the server table install wrote
    config.write_text(
        PROVIDER.format(base_url=api.base_url) + "\n" + config.read_text(encoding="utf-8"), encoding="utf-8"
    )
    try:
        yield Codex(executable, user_home, memory_home, api)
    finally:
        api.stop()
