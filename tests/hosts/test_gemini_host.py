"""memory-mcp in the real Gemini CLI (npm, pinned), installed as a user installs it
(`memory-mcp install gemini`), talking to a scripted Gemini API on 127.0.0.1 that records what
the model is sent.

Each test asserts on the requests Gemini CLI made, and on what memory stored after the run.
No network, no key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from gemini_cli import GeminiCli, gemini_installed, hook_contexts
from scripted_gemini import user_texts

# The first test of a clean checkout installs the pinned CLI from npm (up to 600 s) before it runs.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture
def gemini(tmp_path: Path, home: Path) -> Iterator[GeminiCli]:
    with gemini_installed(tmp_path, home) as cli:
        yield cli


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
