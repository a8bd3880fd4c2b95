"""Past conversations on day one: ChatGPT and Claude.ai data exports, Claude Code transcripts and
Codex session files, imported through the real command line, each conversation a thread and each
exchange a dated page, once, whatever stops the import part-way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from claude_code_session import Transcript, coding_session, text
from command_line import MODULE, cli, cli_env
from stdio_helpers import snapshot

from memory_mcp.hosts.events import HostEvent, one_exchange
from memory_mcp.store import Scope
from memory_mcp.store.files.backend import JsonStore

pytestmark = pytest.mark.integration  # every test here runs the command line

START = 1_717_236_000.0  # 2024-06-01T10:00:00Z
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

# --- exports in the shapes the services write -------------------------------------------------


def chatgpt_conversation(number: int, exchanges: int = 2, abandoned: bool = False) -> dict[str, Any]:
    """A ChatGPT conversation: a hidden system root, custom instructions, prompts answered (one
    after a browsing call), and with `abandoned` a first prompt edited, its old branch left."""
    conversation_id = f"6650a1b2-0000-4000-8000-{number:012d}"
    mapping: dict[str, Any] = {}
    began = START + number * 3600

    def node(node_id: str, parent: str | None, message: dict[str, Any] | None) -> str:
        mapping[node_id] = {"id": node_id, "message": message, "parent": parent, "children": []}
        if parent is not None:
            mapping[parent]["children"].append(node_id)
        return node_id

    def message(node_id: str, role: str, parts: list[Any], at: float, **extra: Any) -> dict[str, Any]:
        content_type = extra.pop("content_type", "text")
        return {
            "id": node_id,
            "author": {"role": role, "name": None, "metadata": {}},
            "create_time": at,
            "content": {"content_type": content_type, "parts": parts},
            "status": "finished_successfully",
            "recipient": extra.pop("recipient", "all"),
            "metadata": extra.pop("metadata", {}),
        }

    last = node("client-created-root", None, None)
    hidden = {"is_visually_hidden_from_conversation": True}
    last = node(f"sys-{number}", last, message(f"sys-{number}", "system", [""], began, metadata=hidden))
    if abandoned:
        old = node(f"old-{number}", last, message(f"old-{number}", "user", ["Plan a trip to Oslo"], began + 1))
        node(f"old-r-{number}", old, message(f"old-r-{number}", "assistant", ["Oslo in winter is cold."], began + 2))
    for turn in range(exchanges):
        at = began + 60 * (turn + 1)
        user_id = f"u-{number}-{turn}"
        prompt = f"Question {turn} of conversation {number}: which train goes to Kyoto?"
        last = node(user_id, last, message(user_id, "user", [prompt], at))
        if turn == 0:
            call = f"call-{number}"
            last = node(call, last, message(call, "assistant", ["search('kyoto')"], at + 1, recipient="browser"))
            tool = f"tool-{number}"
            last = node(tool, last, message(tool, "tool", ["results"], at + 2, content_type="tether_quote"))
        answer = f"a-{number}-{turn}"
        parts = [f"Answer {turn}: the Shinkansen from Tokyo.", {"asset_pointer": "file-service://img"}]
        last = node(answer, last, message(answer, "assistant", parts, at + 3, content_type="multimodal_text"))
        more = f"b-{number}-{turn}"
        last = node(more, last, message(more, "assistant", ["It takes about two hours."], at + 4))
    return {
        "title": f"Trip planning {number}",
        "create_time": began,
        "update_time": began + 999,
        "mapping": mapping,
        "current_node": last,
        "conversation_id": conversation_id,
        "id": conversation_id,
    }


def claude_ai_export() -> list[dict[str, Any]]:
    """Two Claude.ai conversations; the second was branched: a reply asked for again."""

    def said(uuid: str, sender: str, words: str, at: str, parent: str | None = None) -> dict[str, Any]:
        message = {
            "uuid": uuid,
            "text": words,
            "content": [{"type": "text", "text": words}],
            "sender": sender,
            "created_at": at,
            "updated_at": at,
            "attachments": [],
            "files": [],
        }
        if parent is not None:
            message["parent_message_uuid"] = parent
        return message

    root = "00000000-0000-4000-8000-000000000000"
    return [
        {
            "uuid": "c0ffee00-1111-4000-8000-000000000001",
            "name": "Polars questions",
            "created_at": "2024-07-02T08:00:00.000000Z",
            "updated_at": "2024-07-02T08:10:00.000000Z",
            "account": {"uuid": "acc"},
            "chat_messages": [
                said("m1", "human", "How do I read a CSV with Polars?", "2024-07-02T08:00:01.000000Z"),
                said("m2", "assistant", "Use pl.read_csv('file.csv').", "2024-07-02T08:00:05.000000Z"),
                said("m3", "human", f"My AWS secret is {AWS_SECRET}, keep it", "2024-07-02T08:05:00.000000Z"),
                said("m4", "assistant", "Please rotate that key.", "2024-07-02T08:05:03.000000Z"),
            ],
        },
        {
            "uuid": "c0ffee00-1111-4000-8000-000000000002",
            "name": "Haiku",
            "created_at": "2024-07-03T09:00:00Z",
            "updated_at": "2024-07-03T09:10:00Z",
            "account": {"uuid": "acc"},
            "chat_messages": [
                said("h1", "human", "Write a haiku about rain", "2024-07-03T09:00:01Z", root),
                said("h2", "assistant", "Rain taps on the roof (first try)", "2024-07-03T09:00:02Z", "h1"),
                said("h3", "assistant", "Grey clouds, soft rain falls", "2024-07-03T09:01:00Z", "h1"),
                said("h4", "human", "Now one about snow", "2024-07-03T09:02:00Z", "h3"),
                said("h5", "assistant", "White hush on the hills", "2024-07-03T09:02:05Z", "h4"),
            ],
        },
    ]


def codex_rollout(root: Path, session: str, cwd: str, turns: list[tuple[str, str]]) -> Path:
    """A Codex rollout as Codex writes it: the session's meta, developer instructions, the
    AGENTS.md and environment context, then each turn (its user message as a response item and
    as events, reasoning, a tool call, a commentary message, the final answer, its completion)."""
    path = root / "2026" / "05" / "14" / f"rollout-2026-05-14T10-00-00-{session}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    clock = iter(range(10_000))

    def at() -> str:
        second = next(clock)
        return f"2026-05-14T10:{second // 60:02d}:{second % 60:02d}.000Z"

    def message(role: str, words: str) -> dict[str, Any]:
        kind = "output_text" if role == "assistant" else "input_text"
        return {"type": "message", "role": role, "content": [{"type": kind, "text": words}]}

    records: list[tuple[str, dict[str, Any]]] = [
        ("session_meta", {"id": session, "cwd": cwd, "originator": "codex_cli_rs", "cli_version": "0.171.0"}),
        ("response_item", message("developer", "<permissions instructions>sandboxed</permissions instructions>")),
        (
            "response_item",
            message("user", "# AGENTS.md instructions for /work\n\n<INSTRUCTIONS>be brief</INSTRUCTIONS>"),
        ),
        ("response_item", message("user", "<environment_context>\n  <cwd>/work</cwd>\n</environment_context>")),
    ]
    for number, (prompt, reply) in enumerate(turns):
        turn = f"{session[:8]}-turn-{number:04d}"
        item = {"type": "UserMessage", "id": f"user-{turn}", "content": [{"type": "text", "text": prompt}]}
        records += [
            ("event_msg", {"type": "task_started", "turn_id": turn}),
            ("turn_context", {"turn_id": turn, "cwd": cwd, "model": "gpt-5.5"}),
            ("response_item", message("user", prompt)),
            ("event_msg", {"type": "user_message", "message": prompt, "images": []}),
            ("event_msg", {"type": "item_completed", "turn_id": turn, "item": item}),
            ("response_item", {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]}),
            ("response_item", message("assistant", "Let me look at the code.")),
            ("event_msg", {"type": "agent_message", "message": "Let me look at the code."}),
            ("response_item", {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c"}),
            ("response_item", {"type": "function_call_output", "call_id": "c", "output": "ok"}),
            ("response_item", message("assistant", reply)),
            ("event_msg", {"type": "agent_message", "message": reply}),
            ("event_msg", {"type": "task_complete", "turn_id": turn, "last_agent_message": reply}),
        ]
    with path.open("w", encoding="utf-8") as file:
        for kind, payload in records:
            file.write(json.dumps({"timestamp": at(), "type": kind, "payload": payload}) + "\n")
    return path


def write_zip(path: Path, members: dict[str, Any]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, value in members.items():
            archive.writestr(name, value if isinstance(value, str) else json.dumps(value))
    return path


def stored_pages(home: Path, user: str = "default") -> list[dict[str, Any]]:
    pages: list[dict[str, Any]] = cli(home, "export", user).json()["pages"]
    return pages


def nobody_stored(home: Path) -> bool:
    return cli(home, "users", "--json").json()["users"] == []


# --- each source --------------------------------------------------------------------------------


def test_a_chatgpt_export_zip_becomes_threads_along_the_branch_each_conversation_ended_on(
    home: Path, tmp_path: Path
) -> None:
    export = write_zip(
        tmp_path / "chatgpt-export.zip",
        {
            "conversations.json": [chatgpt_conversation(1, abandoned=True), chatgpt_conversation(2, exchanges=1)],
            "chat.html": "<html></html>",
            "user.json": {"id": "user-x"},
        },
    )

    summary = cli(home, "import", export, "--json").json()

    assert summary == {
        "user_id": "default",
        "source": "chatgpt",
        "conversations": 2,
        "exchanges": 3,
        "added": 3,
        "already_stored": 0,
    }
    pages = stored_pages(home)
    assert [(p["thread_id"], p["timestamp"]) for p in pages] == [
        ("6650a1b2-0000-4000-8000-000000000001", "2024-06-01T11:01:00Z"),
        ("6650a1b2-0000-4000-8000-000000000001", "2024-06-01T11:02:00Z"),
        ("6650a1b2-0000-4000-8000-000000000002", "2024-06-01T12:01:00Z"),
    ]
    assert pages[0]["user_input"] == "Question 0 of conversation 1: which train goes to Kyoto?"
    assert pages[0]["agent_response"] == "Answer 0: the Shinkansen from Tokyo.\n\nIt takes about two hours."
    assert pages[0]["meta_data"] == {"imported_from": "chatgpt", "title": "Trip planning 1"}
    said = json.dumps(pages)
    assert "Oslo" not in said, "the branch the person edited away is not imported"
    assert "search('kyoto')" not in said and "results" not in said, "tool calls and their output are left out"
    assert all(p["project"] is None for p in pages), "a chat export names no folder"


def test_a_claude_ai_export_follows_the_branch_that_ends_in_the_last_message_and_keeps_no_secret(
    home: Path, tmp_path: Path
) -> None:
    export = tmp_path / "conversations.json"
    export.write_text(json.dumps(claude_ai_export()), encoding="utf-8")

    outcome = cli(home, "import", export)

    assert outcome.code == 0, outcome.stderr
    assert "default: 4 exchanges added from 2 conversations (Claude.ai export)" in outcome.stdout
    pages = stored_pages(home)
    assert [(p["user_input"], p["agent_response"]) for p in pages][-2:] == [
        ("Write a haiku about rain", "Grey clouds, soft rain falls"),
        ("Now one about snow", "White hush on the hills"),
    ], "the reply asked for again, not the first try"
    assert [p["timestamp"] for p in pages] == [
        "2024-07-02T08:00:01Z",
        "2024-07-02T08:05:00Z",
        "2024-07-03T09:00:01Z",
        "2024-07-03T09:02:00Z",
    ]
    assert {p["thread_id"] for p in pages} == {c["uuid"] for c in claude_ai_export()}
    assert AWS_SECRET not in json.dumps(pages) and "[redacted" in pages[1]["user_input"]
    assert not any(AWS_SECRET.encode() in path.read_bytes() for path in home.rglob("*") if path.is_file()), (
        "the secret is nowhere on disk"
    )


def test_past_claude_code_sessions_are_read_from_the_default_folder_last_turn_included(
    home: Path, tmp_path: Path
) -> None:
    user_home = tmp_path / "user-home"
    app = tmp_path / "work" / "app"
    (app / ".git").mkdir(parents=True)
    projects = user_home / ".claude" / "projects" / "-work-app"
    first = Transcript(projects / "0b4d6f1e-session-one.jsonl", session_id="session-one", cwd=str(app / "src"))
    coding_session(first)
    second = Transcript(projects / "session-two.jsonl", session_id="session-two", cwd=str(app))
    second.prompt("Which Python does CI use?")
    second.reply(text("CI runs on Python 3.11."), message_id="m9")
    (projects / "session-two" / "subagents").mkdir(parents=True)
    (projects / "session-two" / "subagents" / "agent-1.jsonl").write_text("{}\n", encoding="utf-8")

    summary = cli(home, "import", "--format", "claude-code", "--json", env={"HOME": str(user_home)}).json()

    assert (summary["source"], summary["conversations"], summary["added"]) == ("claude-code", 2, 3)
    pages = stored_pages(home)
    assert [(p["thread_id"], p["agent_response"]) for p in pages][-1] == ("session-two", "CI runs on Python 3.11.")
    assert [p["thread_id"] for p in pages].count("session-one") == 2, "the last turn of a past session is kept"
    assert {p["project"] for p in pages} == {str(app)}, "the repository each session ran in"
    assert pages[0]["timestamp"].startswith("2026-06-15T10:")


def test_codex_sessions_skip_instructions_and_context_and_match_what_the_hooks_store(
    home: Path, tmp_path: Path
) -> None:
    sessions = tmp_path / "codex" / "sessions"
    session = "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b"
    codex_rollout(
        sessions,
        session,
        str(tmp_path),
        [("Why does the build fail?", "A missing import in app.py."), ("Fix it", "Done: the import is added.")],
    )

    summary = cli(home, "import", sessions, "--json").json()

    assert (summary["source"], summary["conversations"], summary["exchanges"]) == ("codex", 1, 2)
    pages = stored_pages(home)
    assert [(p["user_input"], p["agent_response"]) for p in pages] == [
        ("Why does the build fail?", "A missing import in app.py."),
        ("Fix it", "Done: the import is added."),
    ], "one exchange a turn: no instructions, no environment, no commentary on the way"
    assert {(p["thread_id"], p["project"]) for p in pages} == {(session, str(tmp_path))}
    hook = HostEvent(session_id=session, prompt="Fix it", reply="Done", turn_id=f"{session[:8]}-turn-0001")
    assert pages[1]["page_id"] == one_exchange("codex", hook)[0].page_id, "the id the Stop hook gives the turn"


# --- again, interrupted, refused ---------------------------------------------------------------


def test_importing_again_stores_nothing_and_says_how_far_it_came(home: Path, tmp_path: Path) -> None:
    export = tmp_path / "conversations.json"
    export.write_text(json.dumps([chatgpt_conversation(n, exchanges=3) for n in range(250)]), encoding="utf-8")

    first = cli(home, "import", export)
    assert first.code == 0, first.stderr
    assert "imported 300 of 750 exchanges (100 conversations)" in first.stderr.splitlines()
    assert first.stderr.splitlines()[-1] == "imported 750 of 750 exchanges (250 conversations)"
    before = snapshot(home)

    again = cli(home, "import", export, "--json").json()

    assert (again["added"], again["already_stored"]) == (0, 750)
    assert len(stored_pages(home)) == 750
    assert {k: v for k, v in snapshot(home).items() if "pages" in k} == {
        k: v for k, v in before.items() if "pages" in k
    }, "no page file rewritten"


def test_an_import_killed_part_way_then_run_again_ends_as_one_uninterrupted_import_its_index_saved(
    tmp_path: Path,
) -> None:
    export = tmp_path / "conversations.json"
    export.write_text(json.dumps([chatgpt_conversation(n, exchanges=4) for n in range(1_500)]), encoding="utf-8")
    killed_home, whole_home = tmp_path / "killed", tmp_path / "whole"

    process = subprocess.Popen(
        [*MODULE, "import", str(export)],
        env=cli_env(killed_home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    progress = process.stderr.readline()  # the first batch is stored: kill it in the middle of the rest
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    assert progress.startswith("imported 300 of 6,000"), progress
    partial = len(stored_pages(killed_home))
    assert 300 <= partial < 6_000, "it was stopped part-way"

    resumed = cli(killed_home, "import", str(export), "--json", timeout=300).json()
    whole = cli(whole_home, "import", str(export), "--json", timeout=300).json()

    assert resumed["added"] + resumed["already_stored"] == whole["added"] == 6_000
    assert resumed["already_stored"] >= partial
    assert stored_pages(killed_home) == stored_pages(whole_home)
    exported = tmp_path / "default.json"  # and an export of it, imported for another user
    exported.write_text(cli(whole_home, "export", "default").stdout, encoding="utf-8")
    assert cli(whole_home, "import", exported, "--user", "bob", timeout=300).code == 0
    for imported, user in ((killed_home, "default"), (whole_home, "default"), (whole_home, "bob")):
        # the first recall after the import reads its word index
        assert JsonStore(imported).read_index_snapshot(Scope(user)) is not None, (imported, user)


def write_bad(tmp_path: Path) -> dict[str, tuple[list[str | Path], str]]:
    """Each bad source, and what its one error line must say."""
    (tmp_path / "broken.json").write_text('[{"mapping": {', encoding="utf-8")
    no_id = chatgpt_conversation(1)
    del no_id["id"], no_id["conversation_id"]
    (tmp_path / "no_id.json").write_text(json.dumps([chatgpt_conversation(0), no_id]), encoding="utf-8")
    (tmp_path / "claude.json").write_text(json.dumps(claude_ai_export()), encoding="utf-8")
    write_zip(tmp_path / "other.zip", {"user.json": {}})
    (tmp_path / "empty-folder").mkdir()
    (tmp_path / "notes.jsonl").write_text('{"note": "hello"}\n', encoding="utf-8")
    return {
        "not json": ([tmp_path / "broken.json"], "broken.json could not be read as JSON"),
        "a conversation without id": ([tmp_path / "no_id.json"], "no_id.json: conversation 1 has no id"),
        "forced as the other export": (
            [tmp_path / "claude.json", "--format", "chatgpt"],
            "claude.json: conversation 0 has no mapping: it is not a ChatGPT export",
        ),
        "zip without conversations": ([tmp_path / "other.zip"], "other.zip holds no conversations.json"),
        "folder without sessions": ([tmp_path / "empty-folder"], "empty-folder holds no Claude Code transcripts"),
        "lines of something else": ([tmp_path / "notes.jsonl"], "notes.jsonl is neither a Claude Code transcript"),
        "replace": ([tmp_path / "claude.json", "--mode", "replace", "--yes"], "--mode replace does not apply"),
    }


def test_bad_sources_are_refused_in_one_line_naming_the_file_and_nothing_is_stored(home: Path, tmp_path: Path) -> None:
    for case, (arguments, said) in write_bad(tmp_path).items():
        line = cli(home, "import", *arguments).error_line()
        assert line.startswith("memory-mcp import: ") and said in line, f"{case}: {line}"
        assert nobody_stored(home), case


def test_import_speed_is_reported(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not a limit: the figure a change to the import path can be compared by."""
    size = 5_000
    export = tmp_path / "conversations.json"
    export.write_text(json.dumps([chatgpt_conversation(n, exchanges=5) for n in range(size // 5)]), encoding="utf-8")
    began = time.monotonic()
    summary = cli(home, "import", export, "--json", timeout=600).json()
    took = time.monotonic() - began
    assert summary["added"] == size
    with capsys.disabled():
        print(f"\n{size:,} exchanges imported in {took:.1f} s ({size / took:,.0f} exchanges/s)")
