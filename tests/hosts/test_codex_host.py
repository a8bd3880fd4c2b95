"""memory-mcp in the real Codex CLI (npm, pinned), installed as a user installs it, talking to a
scripted Responses API on 127.0.0.1 that records what the model is sent.

Codex runs a hook only once the user has trusted it (/hooks in its TUI); `codex exec` is run with
`--dangerously-bypass-hook-trust`, which stands for that review. No network, no key.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from codex_cli import Codex, codex_installed, developer_blocks
from scripted_responses import input_texts

from memory_mcp.base.settings import Settings
from memory_mcp.recall.token_count import TokenCounter
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

# The first test of a clean checkout installs the pinned CLI from npm (up to 600 s) before it runs.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


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
    with codex_installed(tmp_path, home) as cli:
        yield cli


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
