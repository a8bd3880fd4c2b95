"""memory-mcp in the real Claude Code CLI (npm, pinned), installed as a user installs it, talking to
a scripted Anthropic Messages API on 127.0.0.1 that records what the model is sent.

Each test asserts on the requests Claude Code made: what memory put before the model, and what
it did not. No network, no key.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from command_line import cli
from host_clis import CLAUDE_CODE, host_command
from memory_blocks import blocks
from scripted_anthropic import Reply, ScriptedAnthropic, ToolCall, last_tool_results

from memory_mcp.base.settings import Settings
from memory_mcp.models import AddMemoryRequest
from memory_mcp.recall.token_count import TokenCounter
from memory_mcp.service.memory_service import MemoryService

# The first test of a clean checkout installs the pinned CLI from npm (up to 600 s) before it runs.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

RETRIEVE = "mcp__memory-mcp__retrieve_memory"


@dataclass
class ClaudeCode:
    """Claude Code installed with memory-mcp (`memory-mcp install claude-code`) in a home of its own."""

    executable: Path
    user_home: Path
    memory_home: Path
    api: ScriptedAnthropic

    def project(self, name: str) -> Path:
        folder = self.user_home / "code" / name
        (folder / ".git").mkdir(parents=True, exist_ok=True)
        return folder

    def run(self, prompt: str, project: Path, *flags: str) -> list[dict[str, Any]]:
        """`claude -p PROMPT FLAGS` in `project`; the requests the model was sent meanwhile."""
        before = len(self.api.requests)
        environment = {
            "PATH": os.environ["PATH"],
            "HOME": str(self.user_home),
            "MEMORY_MCP_HOME": str(self.memory_home),
            "ANTHROPIC_BASE_URL": self.api.base_url,
            "ANTHROPIC_API_KEY": "sk-ant-test-not-a-key",
            "ENABLE_TOOL_SEARCH": "false",  # MCP tools listed to the model directly
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        done = subprocess.run(
            [str(self.executable), "-p", prompt, *flags],
            cwd=project,
            env=environment,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return self.api.requests[before:]


@pytest.fixture
def claude(tmp_path: Path, home: Path) -> Iterator[ClaudeCode]:
    executable = host_command(CLAUDE_CODE)
    user_home = tmp_path / "user"
    user_home.mkdir()
    installed = cli(home, "install", "claude-code", env={"HOME": str(user_home)})
    assert installed.code == 0, installed.stderr
    api = ScriptedAnthropic().start()
    try:
        yield ClaudeCode(executable, user_home, home, api)
    finally:
        api.stop()


def test_what_one_session_was_told_reaches_the_next_and_a_continued_session_never_gets_its_own_back(
    claude: ClaudeCode,
) -> None:
    shop = claude.project("webshop")
    first = claude.run("In this repo we use pnpm, never npm, and the tests run with vitest.", shop)
    assert not any(blocks(request) for request in first), "nothing remembered yet"

    later = claude.run("Which package manager should I use to add a dependency?", shop)
    given = "\n".join(block for request in later for block in blocks(request))
    assert "we use pnpm, never npm" in given, "the earlier session's exchange, before the model"

    continued = claude.run("And how do I run the tests?", shop, "--continue")
    newest = "\n".join(blocks(continued[-1], after_prompt="And how do I run the tests?"))
    assert "Which package manager should I use" not in newest, "its own exchange: the model has it"
    assert "we use pnpm, never npm" not in newest, "given once in the session"


def test_a_bare_ok_costs_nothing_and_another_projects_exchange_is_labelled_or_absent(claude: ClaudeCode) -> None:
    shop, api = claude.project("webshop"), claude.project("python-api")
    claude.run("In this repo we use pnpm, never npm, and the tests run with vitest.", shop)
    claude.run("Add a test for the invoice total.", api)
    ok = claude.run("ok", api, "--continue")
    assert sum(len(block) for block in blocks(ok[-1], after_prompt="ok")) <= 300, "a bare ok: a few hundred at most"
    unrelated = "\n".join(
        block for request in claude.run("Add a test for the invoice total", api) for block in blocks(request)
    )
    assert "pnpm" not in unrelated, "another project's exchange, not clearly relevant: absent"
    asked = "\n".join(
        block
        for request in claude.run("Do we use pnpm or npm, and vitest for tests?", api)
        for block in blocks(request)
    )
    [line] = [line for line in asked.splitlines() if "we use pnpm, never npm" in line]
    assert " · webshop] User:" in line, "labelled with its project"


def test_retrieve_memorys_result_reaches_the_model_whole(claude: ClaudeCode) -> None:
    """25 long exchanges: the result used to be 46,632 tokens of JSON, which Claude Code replaced
    with "Output too large" and a 2 KB preview, so the model never reached the block."""
    service = MemoryService(Settings(data_storage_path=claude.memory_home))
    try:
        for number in range(25):
            service.add_memory(
                AddMemoryRequest.build(
                    user_input=f"Invoice note {number}: " + " ".join(f"line{number}-{n}" for n in range(400)),
                    agent_response=f"Invoice answer {number}: " + " ".join(f"total{number}-{n}" for n in range(400)),
                )
            )
    finally:
        service.close()

    def respond(request: dict[str, Any]) -> Reply:
        if last_tool_results(request):
            return "Here is what memory holds."
        if any(tool.get("name") == RETRIEVE for tool in request.get("tools", [])):
            return ToolCall(RETRIEVE, {"query": "What do the invoice notes say?"})
        return "No memory tool."

    claude.api.respond = respond
    requests = claude.run("What do my invoice notes say?", claude.project("ledger"), "--allowedTools", RETRIEVE)
    [result] = [result for request in requests for result in last_tool_results(request)]
    assert "Output too large" not in result
    assert result.startswith("<memory>") and "\n</memory>\nExchanges shown: page_" in result
    assert TokenCounter("tiktoken").count(result) <= Settings().memory.max_injection_tokens + 400
