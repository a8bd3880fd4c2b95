"""Claude Code's hooks, run as Claude Code runs them: `memory-mcp hook prompt|stop` in its own
process, the documented hook JSON on stdin, a realistic session transcript on disk."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from claude_code_session import Transcript, coding_session, text
from command_line import Outcome, cli
from scripted_llm import SCRIPTED_MODEL, ScriptedLLM, reply
from update_helpers import fact, update
from waiting import wait_until

from memory_mcp.base.settings import Settings
from memory_mcp.models import AddFactRequest
from memory_mcp.recall.token_count import TokenCounter
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

pytestmark = pytest.mark.integration


def hook(home: Path, event: str, payload: dict[str, Any] | str, *flags: str, **env: str) -> Outcome:
    stdin = payload if isinstance(payload, str) else json.dumps(payload)
    return cli(home, "hook", event, *flags, stdin=stdin, env=env or None)


def stored(home: Path, scope: Scope) -> list[tuple[str, str, str | None]]:
    service = MemoryService(Settings(data_storage_path=home))
    try:
        return [(p.user_input, p.agent_response, p.thread_id) for p in service.store.read_pages(scope).pages]
    finally:
        service.close()


@pytest.fixture
def transcript(tmp_path: Path) -> Transcript:
    session = Transcript(tmp_path / "claude" / "projects" / "-work-app" / "session.jsonl")
    coding_session(session)
    return session


def test_stop_stores_each_exchange_once_in_the_sessions_thread(home: Path, transcript: Transcript) -> None:
    first = hook(home, "stop", transcript.stop_input())
    assert (first.code, first.stdout, first.stderr) == (0, "", "")
    expected = [
        (
            "Why does the parser drop the last line of the CSV? We use Polars here, never pandas.",
            (
                "The slice `[:-1]` drops the last line when the file has no trailing newline.\n\n"
                "Use `splitlines()` instead."
            ),
            transcript.session_id,
        ),
        ("Thanks. Remember that our CI runs on Python 3.11.", "Noted: CI runs on Python 3.11.", transcript.session_id),
    ]
    assert stored(home, Scope("default")) == expected

    again = hook(home, "stop", transcript.stop_input())
    assert (again.code, again.stdout) == (0, "")
    assert stored(home, Scope("default")) == expected, "the same transcript twice stores nothing new"

    transcript.prompt("And the TSV reader?")
    transcript.reply(text("It has the same slice; fixed there too."))
    hook(home, "stop", transcript.stop_input(last_message="It has the same slice; fixed there too."))
    assert stored(home, Scope("default")) == [
        *expected,
        ("And the TSV reader?", "It has the same slice; fixed there too.", transcript.session_id),
    ]


def test_stop_takes_the_final_reply_from_the_hook_when_the_transcript_lags(home: Path, tmp_path: Path) -> None:
    session = Transcript(tmp_path / "session.jsonl")
    session.prompt("Which port does the dev server use?")
    hook(home, "stop", session.stop_input(last_message="Port 5173."))
    assert stored(home, Scope("default")) == [("Which port does the dev server use?", "Port 5173.", session.session_id)]


def test_the_newest_turn_waits_until_its_final_reply_is_certain(home: Path, transcript: Transcript) -> None:
    """While another Stop hook keeps Claude going, or when Claude Code sends no last message, the
    newest reply may not be the last word: the finished turns are stored, the newest one later."""
    first_prompt = "Why does the parser drop the last line of the CSV? We use Polars here, never pandas."
    for event in (transcript.stop_input(stop_hook_active=True), transcript.stop_input(sends_last_message=False)):
        outcome = hook(home, "stop", event)
        assert (outcome.code, outcome.stdout, outcome.stderr) == (0, "", "")
        assert [said for said, _, _ in stored(home, Scope("default"))] == [first_prompt]

    hook(home, "stop", transcript.stop_input())
    assert stored(home, Scope("default"))[-1][:2] == (
        "Thanks. Remember that our CI runs on Python 3.11.",
        "Noted: CI runs on Python 3.11.",
    )


def test_a_huge_paste_is_stored_shortened_and_keeps_nothing_else_out(home: Path, tmp_path: Path) -> None:
    session = Transcript(tmp_path / "session.jsonl")
    session.prompt("Here is the whole log: " + "x" * 150_000)
    session.reply(text("The log shows a timeout."))
    session.prompt("What next?")
    session.reply(text("Raise the timeout."))
    outcome = hook(home, "stop", session.stop_input())
    assert (outcome.code, outcome.stderr) == (0, "")
    [(huge, _, _), (after, _, _)] = stored(home, Scope("default"))
    assert len(huge) == Settings().max_text_chars and huge.endswith(" […]") and after == "What next?"


def context_of(outcome: Outcome, event: str = "UserPromptSubmit") -> str:
    """The additional context a hook printed ("" when it printed nothing)."""
    assert (outcome.code, outcome.stderr) == (0, "")
    if not outcome.stdout:
        return ""
    output = json.loads(outcome.stdout)
    assert output["hookSpecificOutput"]["hookEventName"] == event
    context: str = output["hookSpecificOutput"]["additionalContext"]
    assert context.startswith("<memory>") and context.rstrip().endswith("</memory>")
    return context


@pytest.fixture
def next_session(tmp_path: Path, transcript: Transcript) -> Transcript:
    """A later session in the same project as `transcript`."""
    return Transcript(tmp_path / "next.jsonl", session_id="next-session", cwd=transcript.cwd)


def test_a_later_session_is_given_what_an_earlier_one_said_as_additional_context(
    home: Path, transcript: Transcript, next_session: Transcript
) -> None:
    assert hook(home, "prompt", transcript.prompt_input("How do I read the CSV?")).stdout == "", "nothing stored yet"
    hook(home, "stop", transcript.stop_input())

    context = context_of(hook(home, "prompt", next_session.prompt_input("Which dataframe library for the CSV?")))
    assert "We use Polars here, never pandas." in context
    assert "## Lately in app" in context, "a session without a digest gets it with its first prompt"


def test_a_session_is_never_given_its_own_exchanges_nor_anything_twice(
    home: Path, transcript: Transcript, next_session: Transcript
) -> None:
    hook(home, "stop", transcript.stop_input())
    assert hook(home, "prompt", transcript.prompt_input("Which dataframe library for the CSV?")).stdout == "", (
        "the session's own exchanges: the model has them"
    )
    first = context_of(hook(home, "prompt", next_session.prompt_input("Which dataframe library for the CSV?")))
    assert "Polars" in first
    again = hook(home, "prompt", next_session.prompt_input("And which dataframe library for the TSV?"))
    assert "Polars" not in again.stdout, "given once in a session"


@pytest.mark.parametrize("prompt", ["ok", "continue", "yes do it", "Thanks!", "go ahead"])
def test_a_prompt_with_nothing_to_recall_gets_nothing(
    home: Path, transcript: Transcript, next_session: Transcript, prompt: str
) -> None:
    hook(home, "stop", transcript.stop_input())
    context_of(hook(home, "session-start", next_session.start_input()), "SessionStart")
    assert hook(home, "prompt", next_session.prompt_input(prompt)).stdout == ""


def test_session_start_gives_the_digest_once_and_again_after_a_compaction(
    home: Path, transcript: Transcript, next_session: Transcript
) -> None:
    assert hook(home, "session-start", next_session.start_input()).stdout == "", "nothing stored yet"
    hook(home, "stop", transcript.stop_input())

    digest = context_of(hook(home, "session-start", next_session.start_input()), "SessionStart")
    assert "## Lately in app" in digest and "Polars" in digest
    assert TokenCounter("tiktoken").count(digest) <= Settings().memory.digest_tokens
    assert "Polars" not in hook(home, "prompt", next_session.prompt_input("Polars or pandas?")).stdout, (
        "the digest gave it already"
    )
    resumed = hook(home, "session-start", next_session.start_input("resume"))
    assert resumed.stdout == "", "a resumed session holds what it was given"
    compacted = context_of(hook(home, "session-start", next_session.start_input("compact")), "SessionStart")
    assert "Polars" in compacted, "after a compaction the model holds nothing given before"


def test_another_projects_exchange_is_labelled_with_its_project_or_left_out(home: Path, tmp_path: Path) -> None:
    webshop = Transcript(tmp_path / "webshop.jsonl", session_id="shop-1", cwd=str(tmp_path / "code" / "webshop"))
    webshop.prompt("In this repo we use pnpm, never npm, and the tests run with vitest.")
    webshop.reply(text("Noted: pnpm and vitest."))
    hook(home, "stop", webshop.stop_input())
    api = Transcript(tmp_path / "api.jsonl", session_id="api-1", cwd=str(tmp_path / "code" / "python-api"))

    unrelated = context_of(hook(home, "prompt", api.prompt_input("Add a test for the invoice total")))
    assert "pnpm" not in unrelated, "another project's exchange, not clearly relevant"
    asked = context_of(hook(home, "prompt", api.prompt_input("Do we use pnpm or npm, and vitest for tests?")))
    [line] = [line for line in asked.splitlines() if "pnpm" in line]
    assert " · webshop] User:" in line, "labelled with its project"


def test_max_tokens_bounds_the_block_and_the_digest_has_a_budget_of_its_own(home: Path, tmp_path: Path) -> None:
    earlier = Transcript(tmp_path / "earlier.jsonl", session_id="earlier")
    for turn in range(12):
        earlier.prompt(f"Parser question {turn}: the CSV reader and Polars dataframes, part {turn} " + "detail " * 40)
        earlier.reply(text(f"Parser answer {turn}: use Polars scan_csv for part {turn} " + "because " * 40))
    hook(home, "stop", earlier.stop_input())
    later = Transcript(tmp_path / "later.jsonl", session_id="later")
    counter = TokenCounter("tiktoken")
    digest = context_of(hook(home, "session-start", later.start_input()), "SessionStart")
    assert 0 < counter.count(digest) <= Settings().memory.digest_tokens
    small = hook(home, "prompt", later.prompt_input("Polars dataframe CSV parser part?"), "--max-tokens", "120")
    assert 0 < counter.count(context_of(small)) <= 120


def test_user_and_agent_come_from_the_config_unless_flags_name_them(
    home: Path, transcript: Transcript, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"user_id": "ana", "assistant_id": "coder"}), encoding="utf-8")
    hook(home, "stop", transcript.stop_input(), "--config", str(config))
    hook(home, "stop", transcript.stop_input(), "--config", str(config), "--user", "ben", "--agent", "reviewer")
    assert len(stored(home, Scope("ana", "coder"))) == 2
    assert len(stored(home, Scope("ben", "reviewer"))) == 2


@pytest.mark.parametrize(
    ("event", "stdin", "flags", "problem"),
    [
        ("prompt", "{not json", (), "JSONDecodeError"),
        ("stop", '{"transcript_path": 5}', (), "ValidationError"),
        ("stop", None, (), "FileNotFoundError"),
        ("prompt", None, ("--config", "/nonexistent/config.json"), "config"),
        ("prompt", None, ("--user", "../etc"), "user_id"),
        ("prompt", None, ("--no-such-flag",), None),
    ],
)
def test_any_failure_prints_nothing_exits_0_and_says_why_in_one_line(
    home: Path, transcript: Transcript, event: str, stdin: str | None, flags: tuple[str, ...], problem: str | None
) -> None:
    hook(home, "stop", transcript.stop_input())  # something is stored: the prompt hook would print
    payload = transcript.prompt_input("Polars?") if event == "prompt" else transcript.stop_input()
    if event == "stop" and stdin is None:
        payload = {**payload, "transcript_path": str(transcript.path.with_name("gone.jsonl"))}
    outcome = hook(home, event, stdin if stdin is not None else payload, *flags)
    assert (outcome.code, outcome.stdout) == (0, "")
    if problem is None:
        assert "unrecognized arguments: --no-such-flag" in outcome.stderr  # argparse's own words
    else:
        [line] = outcome.stderr.splitlines()
        assert line.startswith(f"memory-mcp hook {event}: ") and problem in line


def test_a_data_home_that_names_no_one_gives_nothing_and_exits_0(home: Path, transcript: Transcript) -> None:
    """Before the hook even looks for a helper: `~someone` with no such account cannot be expanded."""
    outcome = hook(home, "prompt", transcript.prompt_input("Polars?"), MEMORY_MCP_HOME="~no-such-account-here/memory")

    assert (outcome.code, outcome.stdout) == (0, "")
    [line] = outcome.stderr.splitlines()
    assert line.startswith("memory-mcp hook prompt: ")


def test_what_stop_stores_is_analysed_after_the_quiet_time_without_holding_up_the_hook(
    home: Path, transcript: Transcript, tmp_path: Path
) -> None:
    llm = ScriptedLLM(default=reply(update([fact("Uses Polars, never pandas", confidence=0.95)]), delay=3.0)).start()
    try:
        config = tmp_path / "config.json"
        config.write_text(json.dumps({"memory": {"debounce_seconds": 0}}), encoding="utf-8")
        outcome = hook(
            home,
            "stop",
            transcript.stop_input(),
            "--config",
            str(config),
            OPENAI_BASE_URL=llm.base_url,
            MEMORY_MCP_LLM_MODEL=SCRIPTED_MODEL,
        )
        assert (outcome.code, outcome.stdout, outcome.stderr) == (0, "", "")
        assert all(answer is None for answer in llm.answered), "the hook did not wait for the LLM"

        def facts() -> list[str]:
            service = MemoryService(Settings(data_storage_path=home))
            try:
                return [f.content for f in service.store.read_document(Scope("default")).facts]
            finally:
                service.close()

        wait_until(lambda: facts() == ["Uses Polars, never pandas"], timeout=30, what="the deferred update")
        assert len(llm.requests) == 1, "one update for the session's two exchanges"
    finally:
        llm.stop()


@pytest.mark.parametrize(
    ("flags", "config"),
    [
        (("--max-tokens", "8000"), {}),
        ((), {"memory": {"max_injection_tokens": 8000, "digest_tokens": 4000}}),  # documented ranges, no flag
    ],
)
def test_a_block_always_fits_what_claude_code_keeps_never_cut(
    home: Path, tmp_path: Path, flags: tuple[str, ...], config: dict[str, Any]
) -> None:
    home.mkdir(exist_ok=True)
    (home / "config.json").write_text(json.dumps(config), encoding="utf-8")
    session = Transcript(tmp_path / "session.jsonl")
    for turn in range(30):
        session.prompt(f"Garden plan, part {turn}: " + "tomatoes/basil[courgettes]{x}=1; " * 40)
        session.reply(text(f"Noted part {turn}: " + "water_them(morning)->ok; " * 60))
    hook(home, "stop", session.stop_input())
    later = Transcript(tmp_path / "later.jsonl", session_id="later")
    for event, payload in (
        ("session-start", later.start_input()),
        ("prompt", later.prompt_input("What is in the garden plan: tomatoes, basil, courgettes?")),
    ):
        outcome = hook(home, event, payload, *(flags if event == "prompt" else ()))
        context = context_of(outcome, "SessionStart" if event == "session-start" else "UserPromptSubmit")
        assert 1000 < len(context) <= 10_000


def test_a_bad_hook_command_line_never_exits_2_whatever_comes_before_hook(home: Path) -> None:
    """Exit status 2 makes Claude Code drop the prompt: options before `hook` must not change that."""
    outcome = cli(home, "--log-level", "INFO", "hook", "prompt", "--no-such-flag", stdin="{}")
    assert (outcome.code, outcome.stdout) == (0, "")
    assert outcome.stderr.splitlines() == ["memory-mcp: error: unrecognized arguments: --no-such-flag"]


def test_stop_hooks_of_one_session_at_the_same_instant_store_each_exchange_once(home: Path, tmp_path: Path) -> None:
    session = Transcript(tmp_path / "session.jsonl")
    for turn in range(30):
        session.prompt(f"Question {turn}")
        session.reply(text(f"Answer {turn}"))
    event = json.dumps(session.stop_input())
    for _ in range(3):
        with ThreadPoolExecutor(max_workers=4) as pool:
            outcomes = list(pool.map(lambda _: hook(home, "stop", event), range(4)))
        assert all((outcome.code, outcome.stdout) == (0, "") for outcome in outcomes)
    said = [said for said, _, _ in stored(home, Scope("default"))]
    assert said == [f"Question {turn}" for turn in range(30)], "each exchange once, in order"


def test_forget_leaves_no_trace_of_what_sessions_were_given(
    home: Path, transcript: Transcript, next_session: Transcript
) -> None:
    hook(home, "stop", transcript.stop_input())
    context_of(hook(home, "session-start", next_session.start_input()), "SessionStart")
    assert list((home / "run" / "sessions").rglob("*.json")), "the session's ledger: ids of what it was given"
    assert cli(home, "forget", "default", "--yes").code == 0
    assert not list((home / "run" / "sessions").rglob("*")), "forget erases the user's ledgers"


def test_a_fact_about_one_project_is_given_there_and_elsewhere_only_when_clearly_relevant(
    home: Path, tmp_path: Path
) -> None:
    shop, api = tmp_path / "code" / "webshop", tmp_path / "code" / "python-api"
    service = MemoryService(Settings(data_storage_path=home))
    try:
        for content, project in (
            ("This repo uses pnpm, never npm", str(shop)),
            ("Prefers short answers", None),
        ):
            service.add_fact(AddFactRequest.build(content=content, confidence=0.95, project=project))
    finally:
        service.close()
    in_shop = Transcript(tmp_path / "shop.jsonl", session_id="shop", cwd=str(shop))
    in_api = Transcript(tmp_path / "api.jsonl", session_id="api", cwd=str(api))

    shop_digest = context_of(hook(home, "session-start", in_shop.start_input()), "SessionStart")
    assert "| webshop] This repo uses pnpm" in shop_digest and "Prefers short answers" in shop_digest
    api_digest = context_of(hook(home, "session-start", in_api.start_input()), "SessionStart")
    assert "pnpm" not in api_digest and "Prefers short answers" in api_digest, "another project's fact stays out"
    asked = context_of(hook(home, "prompt", in_api.prompt_input("Does the repo use pnpm or npm?")))
    assert "| webshop] This repo uses pnpm" in asked, "clearly relevant: given, labelled with its project"


def test_with_injection_off_no_hook_gives_anything(
    home: Path, transcript: Transcript, next_session: Transcript
) -> None:
    hook(home, "stop", transcript.stop_input())
    (home / "config.json").write_text(json.dumps({"memory": {"injection_enabled": False}}), encoding="utf-8")
    assert hook(home, "session-start", next_session.start_input()).stdout == ""
    assert hook(home, "prompt", next_session.prompt_input("Which dataframe library for the CSV?")).stdout == ""


def test_stop_stores_no_secret_pasted_in_the_session(home: Path, tmp_path: Path) -> None:
    session = Transcript(tmp_path / "claude" / "projects" / "-work-app" / "secrets.jsonl")
    key = "sk-proj-" + "Qw7" * 16 + "T3BlbkFJ" + "pL2" * 16
    session.prompt(f"Use OPENAI_API_KEY={key} for the tests <private>and my PIN is zorbquill</private>")
    session.reply(text("Set it in the CI secrets rather than in the repo."))
    done = hook(home, "stop", session.stop_input(last_message="Set it in the CI secrets rather than in the repo."))
    assert (done.code, done.stderr) == (0, "")
    ((said, _, _),) = stored(home, Scope("default"))
    assert said == "Use OPENAI_API_KEY=[redacted: openai token] for the tests "
    held = b"".join(path.read_bytes() for path in home.rglob("*") if path.is_file())
    assert key.encode() not in held and b"zorbquill" not in held
