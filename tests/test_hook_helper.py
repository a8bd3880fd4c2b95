"""The hook helper: after one prompt hook, the next ones are answered by the process it left
behind, exactly as the hook would answer them itself, seeing every change other processes make,
and it goes away when idle or told to. Run as Claude Code runs hooks: each a process of its own."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from claude_code_session import Transcript, coding_session, text
from command_line import cli
from hook_helpers import answering_badly, helper_processes, helper_socket_of, prompt_hook
from waiting import wait_until

import memory_mcp

pytestmark = pytest.mark.integration

QUESTION = "Which dataframe library should the CSV reader use?"


@pytest.fixture
def transcript(tmp_path: Path) -> Transcript:
    session = Transcript(tmp_path / "claude" / "projects" / "-work-app" / "session.jsonl")
    coding_session(session)
    return session


@pytest.fixture
def remembered(home: Path, transcript: Transcript) -> Transcript:
    """A session stored by the Stop hook; heat does not reorder, so answers can be compared."""
    home.mkdir(parents=True)
    (home / "config.json").write_text(json.dumps({"heat_ranking_weight": 0}), encoding="utf-8")
    outcome = cli(home, "hook", "stop", stdin=json.dumps(transcript.stop_input()))
    assert (outcome.code, outcome.stderr) == (0, "")
    return transcript


def asked(transcript: Transcript, prompt: str) -> dict[str, object]:
    """A prompt as the first of a new session in the transcript's project: each is given the
    same (a session is never given anything twice, nor its own exchanges)."""
    return {**transcript.prompt_input(prompt), "session_id": f"session-{uuid.uuid4()}"}


def helper_ready(home: Path) -> None:
    wait_until(helper_socket_of(home).exists, timeout=30, what="the hook helper")


def test_the_next_prompt_hooks_are_answered_by_the_helper_as_the_hook_itself_would(
    home: Path, remembered: Transcript
) -> None:
    event = asked(remembered, QUESTION)
    first, by_helper = prompt_hook(home, event)
    assert (first.code, first.stderr, by_helper) == (0, "", False)
    assert "We use Polars here, never pandas." in json.loads(first.stdout)["hookSpecificOutput"]["additionalContext"]

    helper_ready(home)
    for _ in range(3):
        again, by_helper = prompt_hook(home, asked(remembered, QUESTION))
        assert (again.code, again.stdout, again.stderr, by_helper) == (0, first.stdout, "", True)
    same_session, by_helper = prompt_hook(home, event)
    assert (same_session.stdout, by_helper) == ("", True), "nothing twice in a session, helper or not"
    assert len(helper_processes(home)) == 1

    # Nothing remembered for this user: nothing printed, by the helper as by the hook.
    nobody, by_helper = prompt_hook(home, event, "--user", "nobody")
    assert (nobody.code, nobody.stdout, nobody.stderr, by_helper) == (0, "", "", True)
    broken, by_helper = prompt_hook(home, event, "--max-tokens", "many")
    assert (broken.code, broken.stdout, by_helper) == (0, "", True)
    assert "--max-tokens: invalid int value: 'many'" in broken.stderr


def test_the_helper_sees_what_other_processes_store_and_forget(home: Path, remembered: Transcript) -> None:
    prompt_hook(home, asked(remembered, QUESTION))
    helper_ready(home)

    remembered.prompt("Which shell do we script in?")
    remembered.reply(text("Fish, never bash."))
    cli(home, "hook", "stop", stdin=json.dumps(remembered.stop_input(last_message="Fish, never bash.")))
    found, by_helper = prompt_hook(home, asked(remembered, "Which shell for scripts?"))
    assert by_helper and "Fish, never bash." in found.stdout

    assert cli(home, "forget", "default", "--yes").code == 0
    after, by_helper = prompt_hook(home, asked(remembered, "Which shell for scripts?"))
    assert (after.code, after.stdout, after.stderr, by_helper) == (0, "", "", True), "forget is final"


def test_each_request_is_read_with_its_own_flags_environment_and_folder(
    home: Path, remembered: Transcript, tmp_path: Path
) -> None:
    prompt_hook(home, asked(remembered, QUESTION))
    helper_ready(home)
    project = tmp_path / "repo"
    project.mkdir()
    session = Transcript(tmp_path / "second.jsonl", session_id="s2", cwd=str(project))
    session.prompt("What is the staging host called?")
    session.reply(text("It is called kestrel."))
    stored = cli(home, "hook", "stop", stdin=json.dumps(session.stop_input(last_message="It is called kestrel.")))
    assert stored.code == 0

    elsewhere = {**asked(session, "What is the staging host called?"), "cwd": str(tmp_path)}
    in_project, by_helper = prompt_hook(home, elsewhere, CLAUDE_PROJECT_DIR=str(project))
    [line] = [line for line in in_project.stdout.split("\\n") if "kestrel" in line]
    assert by_helper and "· repo]" not in line, "the requester's $CLAUDE_PROJECT_DIR, not the helper's"
    from_app, by_helper = prompt_hook(home, asked(remembered, "What is the staging host called?"))
    [line] = [line for line in from_app.stdout.split("\\n") if "kestrel" in line]
    assert by_helper and "· repo] User:" in line, "asked from another project: labelled with its project"

    other_user = tmp_path / "other.json"
    other_user.write_text(json.dumps({"user_id": "someone-else"}), encoding="utf-8")
    theirs, by_helper = prompt_hook(home, asked(session, "Polars?"), "--config", other_user.name)
    default, _ = prompt_hook(home, asked(session, "Polars?"))
    assert by_helper and theirs.stdout == "" and "Polars" in default.stdout, "--config read from the requester's folder"


def test_a_hook_asking_for_help_is_answered_as_the_command_would_and_the_helper_stays(
    home: Path, remembered: Transcript
) -> None:
    prompt_hook(home, asked(remembered, QUESTION))
    helper_ready(home)
    [helper] = helper_processes(home)

    told, by_helper = prompt_hook(home, asked(remembered, QUESTION), "--help")

    assert by_helper and told.code == 0 and "usage:" in told.stdout
    assert told.stdout == cli(home, "hook", "prompt", "--help").stdout
    answered, by_helper = prompt_hook(home, asked(remembered, QUESTION))
    assert by_helper and "Polars" in answered.stdout and helper_processes(home) == [helper]


def test_a_helper_idle_past_its_memory_still_answers_as_the_hook_would_then_exits(
    home: Path, remembered: Transcript
) -> None:
    """Idle for hook_helper_idle_minutes, the helper lets go of the memory it loaded; a prompt
    during hook_helper_linger_minutes after that is still answered by it, reading memory anew."""
    settings = {"hook_helper_idle_minutes": 0.02, "hook_helper_linger_minutes": 0.25}
    (home / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    first, _ = prompt_hook(home, asked(remembered, QUESTION))
    helper_ready(home)
    time.sleep(3)  # past the 1.2 s after which it lets go, well within the 15 s it lingers

    again, by_helper = prompt_hook(home, asked(remembered, QUESTION))
    assert (again.code, again.stdout, again.stderr, by_helper) == (0, first.stdout, "", True)
    assert "Polars" in again.stdout
    wait_until(lambda: not helper_processes(home), timeout=60, what="the lingering helper to exit")


def test_an_idle_helper_exits_and_so_does_one_whose_socket_is_removed(home: Path, remembered: Transcript) -> None:
    settings = {"hook_helper_idle_minutes": 0.05, "hook_helper_linger_minutes": 0}
    (home / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    prompt_hook(home, asked(remembered, QUESTION))
    helper_ready(home)
    wait_until(lambda: not helper_processes(home), timeout=60, what="the idle helper to exit")
    assert not helper_socket_of(home).exists()

    (home / "config.json").write_text(json.dumps({"hook_helper_idle_minutes": 60}), encoding="utf-8")
    prompt_hook(home, asked(remembered, QUESTION))
    helper_ready(home)
    helper_socket_of(home).unlink()
    wait_until(lambda: not helper_processes(home), timeout=30, what="the helper to see its socket gone")

    (home / "config.json").write_text(json.dumps({"hook_helper_idle_minutes": 0}), encoding="utf-8")
    outcome, _ = prompt_hook(home, asked(remembered, QUESTION))
    assert "Polars" in outcome.stdout and not helper_processes(home), "0: no helper"


def test_a_dead_helpers_socket_is_replaced_and_of_hooks_starting_at_once_one_helper_stays(
    home: Path, remembered: Transcript, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = helper_socket_of(home)
    dead.parent.mkdir(mode=0o700)
    monkeypatch.chdir(dead.parent)  # the full path may be too long for a socket address
    with socket.socket(socket.AF_UNIX) as listener:  # bound, then closed: nobody listens there
        listener.bind(dead.name)
    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(lambda _: prompt_hook(home, asked(remembered, QUESTION)), range(4)))
    assert all("Polars" in outcome.stdout and outcome.stderr == "" for outcome, _ in outcomes)
    helper_ready(home)
    wait_until(lambda: len(helper_processes(home)) == 1, timeout=30, what="one helper left")
    again, by_helper = prompt_hook(home, asked(remembered, QUESTION))
    assert by_helper and again.stdout == outcomes[0][0].stdout


def test_a_run_folder_others_may_enter_is_never_used(home: Path, remembered: Transcript) -> None:
    run = helper_socket_of(home).parent
    run.mkdir(mode=0o700)
    run.chmod(0o755)
    outcome, by_helper = prompt_hook(home, asked(remembered, QUESTION))
    assert "Polars" in outcome.stdout and not by_helper
    again, by_helper = prompt_hook(home, asked(remembered, QUESTION))
    assert (again.stdout, by_helper) == (outcome.stdout, False)
    assert not helper_socket_of(home).exists() and not helper_processes(home)


def test_a_helper_whose_code_changed_hands_over_to_one_on_the_new_code(home: Path, remembered: Transcript) -> None:
    first, _ = prompt_hook(home, asked(remembered, QUESTION))
    helper_ready(home)
    [old] = helper_processes(home)
    os.utime(Path(memory_mcp.__file__).parent / "base" / "phrases.py")  # as an upgrade or an edit would
    answered, by_helper = prompt_hook(home, asked(remembered, QUESTION))
    assert (answered.stdout, answered.stderr, by_helper) == (first.stdout, "", False)
    wait_until(lambda: old not in helper_processes(home), timeout=30, what="the old helper to exit")
    helper_ready(home)
    again, by_helper = prompt_hook(home, asked(remembered, QUESTION))
    assert (again.stdout, by_helper) == (first.stdout, True)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (
            b"{not json",
            "the hook helper's answer could not be read (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
        ),
        (b'{"stdout": 5, "stderr": ""}', "the hook helper's answer is not what a hook prints (ignored)"),
        (b"[1, 2]", "the hook helper's answer is not what a hook prints (ignored)"),
        (b'{"stdout": "x", "stderr": "", "extra": 1}', "the hook helper's answer is not what a hook prints (ignored)"),
        (None, "the hook helper gave no answer within 10 s"),
    ],
)
def test_a_helper_answer_of_garbage_or_the_wrong_shape_or_trickling_in_costs_nothing_but_a_line(
    home: Path, remembered: Transcript, monkeypatch: pytest.MonkeyPatch, answer: bytes | None, said: str
) -> None:
    """A wrong shape used to end the hook with a traceback (exit 1); bytes trickling in held the
    prompt for as long as they came (the limit was per read): one deadline for the whole answer."""
    with answering_badly(helper_socket_of(home), answer):
        started = time.monotonic()
        outcome, by_helper = prompt_hook(home, asked(remembered, QUESTION))
        took = time.monotonic() - started
    assert (outcome.code, outcome.stdout, by_helper) == (0, "", True)
    [line] = outcome.stderr.splitlines()
    assert line == f"memory-mcp hook prompt: {said}"
    assert took < 20, "one deadline for the whole answer"


@pytest.mark.slow
def test_with_local_embeddings_the_helper_answers_every_prompt_after_the_first(
    home: Path, remembered: Transcript
) -> None:
    """The helper is a new process that loads the embedding model itself: one forked from a hook
    that had run the model hung in it for ever, and every later prompt waited 10 s for nothing."""
    (home / "config.json").write_text(json.dumps({"embeddings": {"backend": "local"}}), encoding="utf-8")
    first, by_helper = prompt_hook(home, asked(remembered, QUESTION))
    assert (first.code, first.stderr, by_helper) == (0, "", False) and "Polars" in first.stdout
    helper_ready(home)
    for _ in range(3):
        again, by_helper = prompt_hook(home, asked(remembered, QUESTION))
        assert (again.code, again.stderr, by_helper) == (0, "", True)
        assert "Polars" in again.stdout
