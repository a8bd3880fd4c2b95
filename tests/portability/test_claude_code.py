"""Reading a Claude Code transcript: the person's prompts and the assistant's final answers, and
nothing of the tool chatter, thinking, sub-agents or the harness's own lines."""

from __future__ import annotations

from pathlib import Path

from claude_code_session import Transcript, coding_session, text, tool_use

from memory_mcp.portability.claude_code_transcript import session_exchanges


def test_a_coding_session_becomes_its_two_exchanges_with_final_answers_only(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "session.jsonl")
    coding_session(transcript)

    pages = session_exchanges(transcript.path, transcript.session_id, transcript.last_reply)

    assert [(p.user_input, p.agent_response) for p in pages] == [
        (
            "Why does the parser drop the last line of the CSV? We use Polars here, never pandas.",
            (
                "The slice `[:-1]` drops the last line when the file has no trailing newline.\n\n"
                "Use `splitlines()` instead."
            ),
        ),
        ("Thanks. Remember that our CI runs on Python 3.11.", "Noted: CI runs on Python 3.11."),
    ]
    assert {p.thread_id for p in pages} == {transcript.session_id}
    assert [p.timestamp for p in pages] == sorted(p.timestamp for p in pages)
    assert all(p.timestamp.endswith("Z") for p in pages)


def test_page_ids_follow_the_prompt_lines_so_a_resumed_copy_of_the_session_adds_nothing(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "session.jsonl")
    coding_session(transcript)
    first = session_exchanges(transcript.path, transcript.session_id, transcript.last_reply)
    again = session_exchanges(transcript.path, transcript.session_id, transcript.last_reply)
    resumed = session_exchanges(transcript.path, "resumed-session", transcript.last_reply)

    assert [p.page_id for p in first] == [p.page_id for p in again] == [p.page_id for p in resumed]
    assert len({p.page_id for p in first}) == 2
    copied = tmp_path / "elsewhere" / "copied.jsonl"
    copied.parent.mkdir()
    copied.write_bytes(transcript.path.read_bytes())
    assert [p.page_id for p in session_exchanges(copied, "other-session", transcript.last_reply)] == [
        p.page_id for p in first
    ], "same line ids, same pages: ids come from the lines, never from where they were read"
    other = Transcript(tmp_path / "other.jsonl", session_id="other-session")
    coding_session(other)
    assert {p.page_id for p in session_exchanges(other.path, "other-session", other.last_reply)}.isdisjoint(
        p.page_id for p in first
    ), "another session's lines, other pages"


def test_the_newest_turn_waits_for_its_final_reply(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "session.jsonl")
    coding_session(transcript)
    pages = session_exchanges(transcript.path, transcript.session_id)
    assert [p.user_input for p in pages] == [
        "Why does the parser drop the last line of the CSV? We use Polars here, never pandas."
    ], "without the final reply the newest turn may hold a reply given on the way"


def test_the_stop_hooks_last_message_stands_for_a_reply_the_transcript_does_not_hold_yet(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "session.jsonl")
    transcript.prompt("What is the capital of Japan?")
    assert session_exchanges(transcript.path, transcript.session_id) == [], "no answer yet: nothing to store"

    [page] = session_exchanges(transcript.path, transcript.session_id, final_reply="Tokyo.")
    assert (page.user_input, page.agent_response) == ("What is the capital of Japan?", "Tokyo.")


def test_a_turn_that_ended_in_a_tool_call_keeps_the_text_said_before_it(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "session.jsonl")
    transcript.prompt("Run the tests")
    transcript.reply(text("Running them now."), tool_use("toolu_9", "Bash", command="pytest"), message_id="m1")
    transcript.prompt("Stop, that is enough")
    transcript.reply(text("Stopped."), message_id="m2")

    pages = session_exchanges(transcript.path, transcript.session_id, "Stopped.")
    assert [p.agent_response for p in pages] == ["Running them now.", "Stopped."]


def test_ide_context_around_a_prompt_is_not_what_the_person_said(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "session.jsonl")
    transcript.prompt("<ide_opened_file>The user opened parser.py</ide_opened_file>\nRename parse to read_rows")
    transcript.reply(text("Renamed."))
    transcript.prompt("<system-reminder>Only a reminder</system-reminder>")
    transcript.reply(text("(nothing to say)"))
    transcript.prompt("Thanks")
    transcript.reply(text("You're welcome."))

    [page, _] = session_exchanges(transcript.path, transcript.session_id, "You're welcome.")
    assert (page.user_input, page.agent_response) == ("Rename parse to read_rows", "Renamed.")


def test_unreadable_lines_and_unknown_line_types_are_skipped(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "session.jsonl")
    transcript.raw("not json at all")
    transcript.raw('{"type": "summary", "summary": "Parser fix", "leafUuid": "x"}')
    transcript.raw('{"type": "file-history-snapshot", "snapshot": {}}')
    transcript.raw("[1, 2, 3]")
    transcript.prompt("Hello")
    transcript.raw('{"type": "assistant", "message": "not an object"}')
    transcript.reply(text("Hi!"))

    [page] = session_exchanges(transcript.path, transcript.session_id, "Hi!")
    assert (page.user_input, page.agent_response) == ("Hello", "Hi!")


def test_a_prompt_that_quotes_a_harness_marker_is_still_the_persons(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "session.jsonl")
    transcript.prompt("Why does my script print <bash-stdout> literally?")
    transcript.reply(text("It echoes the tag as text."))
    [page] = session_exchanges(transcript.path, transcript.session_id, "It echoes the tag as text.")
    assert page.user_input == "Why does my script print <bash-stdout> literally?"
