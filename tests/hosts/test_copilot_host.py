"""memory-mcp in the real GitHub Copilot CLI (npm, pinned), installed as a user installs it
(`memory-mcp install copilot`), talking to a scripted Responses API on 127.0.0.1 that records what
the model is sent.

Copilot CLI runs offline with a model of the user's own (COPILOT_OFFLINE, COPILOT_PROVIDER_*): no
GitHub login, no network, no key. It loads the hooks of ~/.copilot/hooks/memory-mcp.json and the
MCP server of ~/.copilot/mcp-config.json, as a user's `copilot -p` does. It gives the model a
sessionStart hook's `additionalContext` as a user message of its own before the prompt, and logs
the session (the prompt as typed, the reply) in events.jsonl, which the Stop hook reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from host_clis import COPILOT, HostCli, installed_in_home
from memory_blocks import BLOCK, texts
from scripted_responses import ScriptedResponses, input_texts

# The first test of a clean checkout installs the pinned CLI from npm (up to 600 s) before it runs.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

MODEL = "gpt-5.4"  # a GPT-5 model Copilot CLI knows, which it talks to over the Responses API
REPLY = "Noted: pnpm it is, and vitest for the tests."


@dataclass
class CopilotCli(HostCli):
    """Copilot CLI with memory-mcp installed in a home of its own."""

    api: ScriptedResponses

    def environment(self) -> dict[str, str]:
        return super().environment() | {
            "COPILOT_HOME": str(self.user_home / ".copilot"),
            "COPILOT_OFFLINE": "true",
            "COPILOT_AUTO_UPDATE": "false",
            "COPILOT_PROVIDER_BASE_URL": self.api.base_url,
            "COPILOT_PROVIDER_WIRE_API": "responses",
            "COPILOT_MODEL": MODEL,
            # The binary unpacks itself (some 235 MB) into the cache on its first run: once, in .hosts/.
            "XDG_CACHE_HOME": str(self.executable.parents[2] / ".cache"),
        }

    def run(self, prompt: str, project: Path) -> list[dict[str, Any]]:
        """`copilot -p PROMPT` in `project`; the requests the model was sent meanwhile."""
        return self.run_cli(["-p", prompt, "--trust-folder"], project)


def memory_blocks(requests: list[dict[str, Any]]) -> list[str]:
    """Every <memory> block anywhere in the requests: instructions, messages, tool definitions."""
    return [found for request in requests for text in texts(request) for found in BLOCK.findall(text)]


@pytest.fixture
def copilot(tmp_path: Path, home: Path) -> Iterator[CopilotCli]:
    executable, user_home = installed_in_home(COPILOT, "copilot", tmp_path, home)
    api = ScriptedResponses(respond=lambda request: REPLY).start()
    try:
        yield CopilotCli(executable, user_home, home, api)
    finally:
        api.stop()


def test_a_turn_is_stored_from_the_session_log_and_starts_the_next_session_as_a_user_message(
    copilot: CopilotCli,
) -> None:
    shop = copilot.project("webshop")
    said = "In this repo we use pnpm, never npm, and the tests run with vitest."
    first = copilot.run(said, shop)
    assert first and not memory_blocks(first), "nothing remembered yet"
    assert copilot.stored() == [(said, REPLY, str(shop))], "the exchange, from the log, with its project"

    asked = "Which package manager should I use to add a dependency?"
    later = copilot.run(asked, shop)
    [block] = memory_blocks(later)
    assert "we use pnpm, never npm" in block, "the earlier session's exchange, before the model"
    users = input_texts(later[0], "user")
    [at] = [n for n, text in enumerate(users) if BLOCK.search(text)]
    assert at < max(n for n, text in enumerate(users) if asked in text), "given before the prompt"
    tools = [tool.get("name") for tool in later[0].get("tools") or []]
    assert "memory-mcp-retrieve_memory" in tools, "the MCP server entry ran: its tools reach the model"
    assert [prompt for prompt, _, _ in copilot.stored()] == [said, asked], "each turn once, as the user typed it"
