"""Copilot CLI's and VS Code's hooks through the real `memory-mcp hook` command, with payloads and a
session log in the shapes Copilot CLI 1.0.102 writes (captured from it; VS Code's agent is
documented to send its camelCase fields and keep the same kind of log): the session's digest at
its start in each host's answer shape, every finished exchange of the log stored once at the stop."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from claude_code_session import Transcript, text
from command_line import Outcome
from hook_calls import hook, stored

pytestmark = pytest.mark.integration

TOLD = "Our API returns money as integer cents, never floats."
REPLY = "Understood: amounts are integer cents throughout."


class SessionLog:
    """A session's events.jsonl as Copilot writes it: each prompt, the agent's messages on the way
    (a tool call between them), its final answer."""

    def __init__(self, folder: Path, session_id: str) -> None:
        self.path = folder / "session-state" / session_id / "events.jsonl"
        self.path.parent.mkdir(parents=True)
        self.session_id, self.turns = session_id, 0
        self._write("session.start", {"sessionId": session_id, "copilotVersion": "1.0.102"})

    def _write(self, kind: str, data: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as log:
            log.write(
                json.dumps(
                    {"type": kind, "data": data, "id": f"e{self.turns}", "timestamp": "2026-11-27T12:04:50.676Z"}
                )
                + "\n"
            )

    def turn(self, prompt: str, reply: str) -> None:
        self.turns += 1
        message = f"m-{self.turns}"
        self._write(
            "user.message",
            {"content": prompt, "transformedContent": f"<current_datetime/>\n\n{prompt}", "messageId": message},
        )
        self._write(
            "assistant.message", {"messageId": f"a-{self.turns}", "content": "", "toolRequests": [{"name": "view"}]}
        )
        self._write("tool.execution_complete", {"toolCallId": "t1", "success": True})
        self._write("assistant.message", {"messageId": f"b-{self.turns}", "content": reply, "toolRequests": []})
        self._write("assistant.turn_end", {"turnId": str(self.turns - 1)})


COPILOT = {"COPILOT_CLI": "1", "COPILOT_HOOK_DIR": "/home/dev/.copilot/hooks"}


def copilot_stop(log: SessionLog, shop: Path, camel: bool = True) -> dict[str, Any]:
    if camel:  # agentStop
        return {
            "sessionId": log.session_id,
            "timestamp": 1795781090821,
            "cwd": str(shop),
            "transcriptPath": str(log.path),
            "stopReason": "end_turn",
            "stop_hook_active": False,
        }
    return {
        "hook_event_name": "Stop",
        "session_id": log.session_id,
        "timestamp": "2026-11-27T12:04:50.821Z",
        "cwd": str(shop),
        "transcript_path": str(log.path),
        "stop_reason": "end_turn",
        "stop_hook_active": False,
    }


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    folder = tmp_path / "code" / "payments"
    folder.mkdir(parents=True)
    return folder


def test_copilot_stores_each_finished_exchange_once_and_starts_the_next_session_with_it(
    home: Path, shop: Path, tmp_path: Path
) -> None:
    log = SessionLog(tmp_path / ".copilot", "6b03532d-5211-4483-b04a-6b3fffe7d342")
    log.turn(TOLD, REPLY)
    assert hook(home, "stop", copilot_stop(log, shop), env=COPILOT) == Outcome(0, "", "")
    assert stored(home) == [(TOLD, REPLY, log.session_id)], "the final answer, not the message before the tool call"
    log.turn("And currencies?", "ISO 4217 codes, upper case.")
    for camel in (True, False):  # agentStop, and Stop as the VS Code-named hook gets it
        assert hook(home, "stop", copilot_stop(log, shop, camel), env=COPILOT) == Outcome(0, "", "")
    assert [exchange[0] for exchange in stored(home)] == [TOLD, "And currencies?"], "each stored once"

    start = {
        "sessionId": "next-session",
        "timestamp": 1795781089962,
        "cwd": str(shop),
        "source": "new",
        "initialPrompt": "hi",
    }
    answer = hook(home, "session-start", start, env=COPILOT)
    assert (answer.code, answer.stderr) == (0, "")
    context = json.loads(answer.stdout)
    assert list(context) == ["additionalContext"], "Copilot reads the top-level field only"
    assert context["additionalContext"].startswith("<memory>") and TOLD in context["additionalContext"]


def test_a_continued_stop_leaves_the_newest_reply_for_the_final_one(home: Path, shop: Path, tmp_path: Path) -> None:
    log = SessionLog(tmp_path / ".copilot", "s-continued")
    log.turn(TOLD, "Working on it")
    hook(home, "stop", {**copilot_stop(log, shop), "stop_hook_active": True}, env=COPILOT)
    assert stored(home) == []
    hook(home, "stop", copilot_stop(log, shop), env=COPILOT)
    assert stored(home) == [(TOLD, "Working on it", "s-continued")]


def test_vscode_starts_sessions_with_memory_and_stores_at_stop(home: Path, shop: Path, tmp_path: Path) -> None:
    log = SessionLog(tmp_path / "vscode", "vs-session-1")
    log.turn(TOLD, REPLY)
    common = {
        "timestamp": "2026-11-27T12:00:00.000Z",
        "cwd": str(shop),
        "sessionId": log.session_id,
        "transcript_path": str(log.path),
    }
    assert hook(home, "stop", {**common, "hookEventName": "Stop", "stop_hook_active": False}) == Outcome(0, "", "")
    assert stored(home) == [(TOLD, REPLY, log.session_id)]

    prompt = {
        **common,
        "sessionId": "vs-session-2",
        "hookEventName": "UserPromptSubmit",
        "prompt": "How are amounts kept?",
    }
    assert hook(home, "prompt", prompt) == Outcome(0, "", ""), "VS Code's prompt hook cannot inject"
    start = hook(
        home, "session-start", {**common, "sessionId": "vs-session-2", "hookEventName": "SessionStart", "source": "new"}
    )
    answer = json.loads(start.stdout)
    assert answer["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert TOLD in answer["hookSpecificOutput"]["additionalContext"]


def test_vscode_reads_a_claude_code_transcript_when_it_keeps_no_copilot_log(
    home: Path, shop: Path, tmp_path: Path
) -> None:
    """VS Code's transcript format is not a stable API: one that is not Copilot's log is read as a
    Claude Code transcript, each finished turn stored once; the newest waits for the next Stop,
    since its reply may still grow."""
    transcript = Transcript(tmp_path / "vscode" / "vs-claude-1.jsonl", session_id="vs-claude-1", cwd=str(shop))
    transcript.prompt(TOLD)
    transcript.reply(text(REPLY), message_id="m1")
    transcript.prompt("And dates?")
    transcript.reply(text("ISO 8601, in UTC."), message_id="m2")
    stop = {
        "hookEventName": "Stop",
        "sessionId": "vs-claude-1",
        "timestamp": "2026-11-27T12:00:00.000Z",
        "cwd": str(shop),
        "transcript_path": str(transcript.path),
        "stop_hook_active": False,
    }
    assert hook(home, "stop", stop) == Outcome(0, "", "")
    assert stored(home) == [(TOLD, REPLY, "vs-claude-1")]
    transcript.prompt("Thanks.")
    transcript.reply(text("You're welcome."), message_id="m3")
    assert hook(home, "stop", stop) == Outcome(0, "", "")
    assert stored(home) == [(TOLD, REPLY, "vs-claude-1"), ("And dates?", "ISO 8601, in UTC.", "vs-claude-1")]


def test_vscode_running_claude_codes_hook_and_its_own_gives_a_start_its_digest_once(
    home: Path, shop: Path, tmp_path: Path
) -> None:
    """With both `install claude-code` and `install vscode`, VS Code runs two session-start hooks
    for one event, at once: one of them answers with the digest, the other with nothing; the next
    start (another stamp) has it again."""
    log = SessionLog(tmp_path / "vscode", "vs-session-1")
    log.turn(TOLD, REPLY)
    stop = {"timestamp": "2026-11-27T12:00:00.000Z", "cwd": str(shop), "sessionId": log.session_id}
    assert hook(home, "stop", {**stop, "hookEventName": "Stop", "transcript_path": str(log.path)}).code == 0
    start = {**stop, "sessionId": "vs-session-2", "hookEventName": "SessionStart", "source": "new"}

    def starts(stamp: str) -> list[Outcome]:
        sent = {**start, "timestamp": stamp}
        with ThreadPoolExecutor(2) as pool:  # the hook as install claude-code writes it, and as install vscode does
            return list(pool.map(lambda flags: hook(home, "session-start", sent, *flags), [[], ["--host", "vscode"]]))

    answers = starts("2026-11-27T12:05:00.000Z")
    assert [outcome.code for outcome in answers] == [0, 0]
    assert sorted(TOLD in outcome.stdout for outcome in answers) == [False, True], answers
    assert sum(TOLD in outcome.stdout for outcome in starts("2026-11-27T12:30:00.000Z")) == 1, "a later start has it"
