"""One memory, whichever host wrote it: a turn one host's Stop stored reaches another host's next
prompt, each hook run as its host runs it (`memory-mcp hook ...` in its own process, payloads in
the shapes Gemini CLI 0.61.0, Codex CLI 0.171.0 and Claude Code 2.1.332 send)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from command_line import cli

pytestmark = pytest.mark.integration

TOLD = "Our staging database is called heron-staging and it lives in Frankfurt."
REPLY = "Noted: heron-staging, in Frankfurt."
QUESTION = "Which staging database do we have, and where does it live?"


def context_given(home: Path, payload: dict[str, object], env: dict[str, str]) -> str:
    outcome = cli(home, "hook", "prompt", stdin=json.dumps(payload), env=env)
    assert (outcome.code, outcome.stderr) == (0, ""), outcome.stderr
    answer = json.loads(outcome.stdout)
    assert answer["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    context: str = answer["hookSpecificOutput"]["additionalContext"]
    return context


def test_what_gemini_stored_reaches_codex_and_claude_codes_next_sessions(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "infra"
    folder.mkdir()
    where = {"CLAUDE_PROJECT_DIR": str(folder)}
    after_agent = {
        "session_id": "gem-1",
        "transcript_path": str(tmp_path / "session-gem-1.jsonl"),
        "cwd": str(folder),
        "hook_event_name": "AfterAgent",
        "timestamp": "2026-11-27T11:49:53.998Z",
        "prompt": TOLD,
        "prompt_response": REPLY,
        "stop_hook_active": False,
    }
    stored = cli(home, "hook", "stop", stdin=json.dumps(after_agent), env={**where, "GEMINI_SESSION_ID": "gem-1"})
    assert (stored.code, stored.stderr) == (0, "")

    codex_prompt = {
        "session_id": "codex-2",
        "turn_id": "turn-1",
        "transcript_path": str(tmp_path / "rollout-2026-11-27T12-00-00-codex-2.jsonl"),
        "cwd": str(folder),
        "hook_event_name": "UserPromptSubmit",
        "model": "gpt-5",
        "permission_mode": "default",
        "prompt": QUESTION,
    }
    assert "heron-staging" in context_given(home, codex_prompt, where)

    claude_prompt = {
        "session_id": "claude-3",
        "transcript_path": str(tmp_path / "claude-3.jsonl"),
        "cwd": str(folder),
        "hook_event_name": "UserPromptSubmit",
        "prompt": QUESTION,
    }
    assert "heron-staging" in context_given(home, claude_prompt, where)
