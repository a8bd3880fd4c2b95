"""Two real hosts at once on one memory: Gemini CLI and Codex CLI (npm, pinned), each installed as
a user installs it, run side by side in one project with sharing on
(`shared_process_idle_minutes` in the data folder's config). One process holds the memory for both
hosts' servers and prompt hooks, and what each host was told reaches the other's next turn.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from codex_cli import Codex, codex_installed, developer_blocks
from gemini_cli import GeminiCli, gemini_installed, hook_contexts
from hook_helpers import gone, shared_processes
from waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TOLD_GEMINI = "Our staging database is called heron-staging and it lives in Frankfurt."
TOLD_CODEX = "In this repo we use pnpm, never npm, and the tests run with vitest."


@pytest.fixture
def hosts(tmp_path: Path, home: Path) -> Iterator[tuple[GeminiCli, Codex]]:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.json").write_text(json.dumps({"shared_process_idle_minutes": 10}), encoding="utf-8")
    with gemini_installed(tmp_path / "gemini", home) as gemini, codex_installed(tmp_path / "codex", home) as codex:
        yield gemini, codex
    for pid in shared_processes(home):
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda pid=pid: gone(pid), 30, "the shared process to exit")


def test_gemini_and_codex_at_once_share_one_memory_process_and_each_others_turns(
    hosts: tuple[GeminiCli, Codex], home: Path, tmp_path: Path
) -> None:
    gemini, codex = hosts
    shop = tmp_path / "code" / "webshop"
    (shop / ".git").mkdir(parents=True)
    with ThreadPoolExecutor(max_workers=2) as pool:
        first_runs = [pool.submit(gemini.run, TOLD_GEMINI, shop), pool.submit(codex.run, TOLD_CODEX, shop)]
        for run in first_runs:
            assert run.result(), "each host's model was asked"
    serving = shared_processes(home)
    assert len(serving) == 1, "one process holds the memory for both hosts"
    assert not list(home.glob("run/hook-helper-*")), "and no hook helper beside it"
    [log] = home.glob("run/shared-*.log")
    assert log.read_text().count(f"a session from {shop}") == 2, "each host's MCP server relayed to it"

    asked_gemini = gemini.run("Which package manager should I use to add a dependency?", shop)
    assert "we use pnpm, never npm" in "\n".join(hook_contexts(asked_gemini)), "Codex's turn, before Gemini's model"
    asked_codex = codex.run("Which staging database do we have, and where does it live?", shop)
    assert any("heron-staging" in block for block in developer_blocks(asked_codex)), "Gemini's turn, before Codex's"
    assert shared_processes(home) == serving, "the same process served every session and hook"
