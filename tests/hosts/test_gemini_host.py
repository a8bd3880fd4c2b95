"""memory-mcp in the real Gemini CLI (npm, pinned), installed as a user installs it
(`memory-mcp install gemini`), talking to a scripted Gemini API on 127.0.0.1 that records what
the model is sent.

Each test asserts on the requests Gemini CLI made, and on what memory stored after the run.
No network, no key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from host_clis import GEMINI, HostCli, installed_in_home
from scripted_gemini import ScriptedGemini, user_texts

from memory_mcp.base.settings import Settings
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

pytestmark = pytest.mark.integration

MODEL = "gemini-2.5-flash"  # named, so Gemini CLI makes no routing call before the turn
# What the user's own settings hold before installing: the API-key login a scripted API needs.
USERS_SETTINGS = {"security": {"auth": {"selectedType": "gemini-api-key"}}, "ui": {"theme": "GitHub"}}


@dataclass
class GeminiCli(HostCli):
    """Gemini CLI with memory-mcp installed in a home of its own."""

    api: ScriptedGemini

    def environment(self) -> dict[str, str]:
        return super().environment() | {
            "GEMINI_CLI_HOME": str(self.user_home),
            "GOOGLE_GEMINI_BASE_URL": self.api.base_url,
            "GEMINI_API_KEY": "test-not-a-key",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",  # hooks run only in a trusted folder
        }

    def run(self, prompt: str, project: Path) -> list[dict[str, Any]]:
        """`gemini -m MODEL -p PROMPT` in `project`; the requests the model was sent meanwhile."""
        return self.run_cli(["-m", MODEL, "-p", prompt], project)

    def stored(self) -> list[tuple[str, str, str | None]]:
        service = MemoryService(Settings(data_storage_path=self.memory_home))
        try:
            pages = service.store.read_pages(Scope("default")).pages
            return [(page.user_input, page.agent_response, page.project) for page in pages]
        finally:
            service.close()


def hook_contexts(requests: list[dict[str, Any]]) -> list[str]:
    """What hooks gave the model: the user parts Gemini CLI wraps in <hook_context>."""
    return [
        text[text.index("<hook_context>") : text.index("</hook_context>")]
        for request in requests
        for text in user_texts(request)
        if "<hook_context>" in text
    ]


@pytest.fixture
def gemini(tmp_path: Path, home: Path) -> Iterator[GeminiCli]:
    settings = {".gemini/settings.json": json.dumps(USERS_SETTINGS)}
    executable, user_home = installed_in_home(GEMINI, "gemini", tmp_path, home, files=settings)
    api = ScriptedGemini(respond=lambda request: "Noted.").start()
    try:
        yield GeminiCli(executable, user_home, home, api)
    finally:
        api.stop()


def test_what_one_run_was_told_reaches_the_model_in_the_next_and_each_exchange_is_stored(gemini: GeminiCli) -> None:
    shop = gemini.project("webshop")
    first = gemini.run("In this repo we use pnpm, never npm, and the tests run with vitest.", shop)
    assert first and not hook_contexts(first), "nothing remembered yet"
    assert gemini.stored() == [
        ("In this repo we use pnpm, never npm, and the tests run with vitest.", "Noted.", str(shop))
    ], "the exchange, with the project it was said in"

    later = gemini.run("Which package manager should I use to add a dependency?", shop)
    given = "\n".join(hook_contexts(later))
    assert "we use pnpm, never npm" in given, "the earlier run's exchange, before the model"
    assert "&lt;memory&gt;" in given, "the memory block (Gemini CLI escapes a hook's angle brackets)"
    assert [prompt for prompt, _, _ in gemini.stored()] == [
        "In this repo we use pnpm, never npm, and the tests run with vitest.",
        "Which package manager should I use to add a dependency?",
    ], "stored once, as the user typed it: without the context Gemini CLI put before it"


def test_a_prompt_gets_what_is_relevant_from_another_project_labelled_and_the_server_is_connected(
    gemini: GeminiCli,
) -> None:
    gemini.run("In this repo we use pnpm, never npm, and the tests run with vitest.", gemini.project("webshop"))
    asked = gemini.run("Do we use pnpm or npm, and vitest for tests?", gemini.project("python-api"))
    [request] = asked
    *_, prompt, context = user_texts(request)
    assert prompt == "Do we use pnpm or npm, and vitest for tests?"
    assert context.startswith("<hook_context>&lt;memory&gt;"), "BeforeAgent's context, after the prompt"
    [line] = [line for line in context.splitlines() if "we use pnpm, never npm" in line]
    assert " · webshop] User:" in line, "labelled with its project"
    assert "instructions provided by the tool server 'memory-mcp'" in json.dumps(request), "the MCP server entry ran"
    assert [prompt for prompt, _, _ in gemini.stored()][-1] == "Do we use pnpm or npm, and vitest for tests?"
