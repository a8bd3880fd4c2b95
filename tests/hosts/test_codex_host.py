"""memory-mcp in the real Codex CLI (npm, pinned), installed as a user installs it, talking to a
scripted Responses API on 127.0.0.1 that records what the model is sent.

Codex runs a hook only once the user has trusted it (/hooks in its TUI); `codex exec` is run with
`--dangerously-bypass-hook-trust`, which stands for that review. No network, no key.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from host_clis import CODEX, HostCli, installed_in_home
from memory_blocks import BLOCK
from scripted_responses import ScriptedResponses, input_texts

from memory_mcp.base.settings import Settings
from memory_mcp.recall.token_count import TokenCounter
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

pytestmark = pytest.mark.integration

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


def stored_exchanges(home: Path) -> list[tuple[str, str, str | None]]:
    service = MemoryService(Settings(data_storage_path=home))
    try:
        scope = service.resolve_scope(None, None)
        pages = service.store.read_pages(Scope(scope.user_id, scope.agent_name)).pages
        return [(page.user_input, page.agent_response, page.project) for page in pages]
    finally:
        service.close()


@pytest.fixture
def codex(tmp_path: Path, home: Path) -> Iterator[Codex]:
    executable, user_home = installed_in_home(CODEX, "codex", tmp_path, home)
    api = ScriptedResponses(respond=lambda request: "Noted: pnpm it is, and vitest for the tests.").start()
    config = user_home / ".codex" / "config.toml"  # the provider before the server table install wrote
    config.write_text(
        PROVIDER.format(base_url=api.base_url) + "\n" + config.read_text(encoding="utf-8"), encoding="utf-8"
    )
    try:
        yield Codex(executable, user_home, home, api)
    finally:
        api.stop()


def test_a_turn_is_stored_once_and_reaches_a_later_session_as_developer_context(codex: Codex) -> None:
    shop = codex.project("webshop")
    said = "In this repo we use pnpm, never npm, and the tests run with vitest."
    first = codex.run(said, shop)
    assert first and not developer_blocks(first), "nothing remembered yet"
    [server] = [entry for entry in codex.servers() if entry["name"] == "memory-mcp"]
    assert server["enabled"] and server["transport"]["type"] == "stdio", "Codex reads the server install added"
    [(prompt, reply, project)] = stored_exchanges(codex.memory_home)
    assert (prompt, reply) == (said, "Noted: pnpm it is, and vitest for the tests.")
    assert project is not None and project.endswith("webshop")

    later = codex.run("Which package manager should I use to add a dependency?", shop)
    given = developer_blocks(later)
    assert any("we use pnpm, never npm" in block for block in given), "the earlier turn, before the model"
    assert all(len(block) <= 9_000 for block in given), "within what Codex keeps inline"
    assert not any("Warning: truncated output" in text for request in later for text in input_texts(request))
    assert TokenCounter("tiktoken").count("\n".join(given)) <= Settings().memory.max_injection_tokens + 400
    assert len(stored_exchanges(codex.memory_home)) == 2, "each turn once"
