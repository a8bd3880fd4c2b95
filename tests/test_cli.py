"""The `memory-mcp` command line, run as a real subprocess with MEMORY_MCP_HOME pointing at a temp dir.

No server runs in any of these tests: the commands work on the data directory directly. Data is
seeded through the core API (the same files a server writes); everything checked is what a person
or a script sees: exit code, stdout (tables, or JSON with --json) and stderr (one line per error).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from command_line import Outcome, cli
from sample_memory import DEERFLOW_MEMORY, memoryos_dir, write_json
from scripted_llm import SCRIPTED_MODEL, ScriptedLLM, reply
from stdio_helpers import snapshot, write_config

from memory_mcp.base.settings import Settings
from memory_mcp.extraction.updater import pending_threads
from memory_mcp.models import (
    AddFactRequest,
    AddMemoryRequest,
    ExportRequest,
    SearchFactsRequest,
    UpdateFactRequest,
)
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

pytestmark = pytest.mark.integration


def cli_many(home: Path, commands: Sequence[Sequence[str | Path]]) -> list[Outcome]:
    """Several independent commands at once (each its own process), to keep the suite quick."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda args: cli(home, *args), commands))


@pytest.fixture
def service(home: Path) -> Iterator[MemoryService]:
    """The core API on the data directory the commands use (no server)."""
    service = MemoryService(Settings(data_storage_path=home))
    yield service
    service.close()


TRIP = [
    ("We are planning a trip to Kyoto in April", "Kyoto in April has cherry blossoms.", "trip"),
    ("I booked a ryokan near the Kyoto temples", "A ryokan is a lovely choice.", "trip"),
    ("My manager wants the quarterly report", "Let's plan the report.", "work"),
    ("I bought a new road bike", "Enjoy the road bike!", None),
    ("Kyoto temples open early", "Go early to avoid crowds.", "trip"),
    ("My cat knocked over the plant", "Cats will be cats.", None),
]


def seed(service: MemoryService, user: str = "alice") -> dict[str, Any]:
    pages = [
        service.add_memory(
            AddMemoryRequest.build(
                user_input=text,
                agent_response=answer,
                user_id=user,
                thread_id=thread,
                timestamp=f"2024-03-{n + 1:02d} 09:00:00",
                meta_data={"n": n},
            )
        ).page_id
        for n, (text, answer, thread) in enumerate(TRIP)
    ]
    tea = service.add_fact(AddFactRequest.build(content="Likes green tea", category="preference", user_id=user))
    kyoto = service.add_fact(
        AddFactRequest.build(content="Plans Kyoto trip", category="goal", confidence=0.8, user_id=user)
    )
    oolong = service.update_fact(UpdateFactRequest.build(fact_id=tea.fact.id, content="Likes oolong tea", user_id=user))
    agent_page = service.add_memory(
        AddMemoryRequest.build(user_input="Call me captain", agent_response="Aye", user_id=user, agent_name="bot")
    ).page_id
    return {
        "pages": pages,
        "old_fact": tea.fact.id,
        "kyoto": kyoto.fact.id,
        "oolong": oolong.fact.id,
        "agent_page": agent_page,
    }


# --- users, show, search: tables and JSON ------------------------------------------------------------


def test_users_and_show_print_tables_and_json_with_no_server_running(home: Path, service: MemoryService) -> None:
    ids = seed(service)
    service.add_memory(AddMemoryRequest.build(user_input="Oslo", agent_response="ok", user_id="bob"))

    users_table, users_json, show_table, show_json, agent_json = cli_many(
        home,
        [
            ["users"],
            ["users", "--json"],
            ["show", "alice", "--facts", "--pages", "2"],
            ["show", "alice", "--facts", "--pages", "2", "--json"],
            ["show", "alice", "--agent", "bot", "--pages", "5", "--json"],
        ],
    )

    status = users_json.json()
    assert status["data_dir"] == str(home)
    assert status["llm_configured"] is False and status["extraction"] == "off"
    assert status["token_counter"] in ("tiktoken", "char") and status["version"]
    users = {u["user_id"]: u for u in status["users"]}
    assert set(users) == {"alice", "bob"}
    assert (users["alice"]["agents"], users["alice"]["pages"], users["alice"]["facts"]) == (["bot"], 7, 2)
    assert users["alice"]["pending_pages"] == 7 and users["bob"]["pages"] == 1

    assert users_table.code == 0 and users_table.stderr == ""
    table = users_table.stdout
    assert str(home) in table.replace("\n", "") or str(home)[:40] in table
    for column in ("user", "agents", "exchanges", "facts"):
        assert column in table
    # Extraction is off: no "pending" that nothing will take on, but what would.
    assert "pending" not in table and "8 exchanges not analysed (set an LLM endpoint and llm_model" in table
    rows = {
        line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
        for line in table.splitlines()
        if line.startswith("│")
    }
    assert rows == {"alice": ["bot", "7", "2"], "bob": ["-", "1", "0"]}

    shown = show_json.json()
    assert shown["profile"]["user_id"] == "alice"
    assert sorted(f["id"] for f in shown["profile"]["facts"]) == sorted([ids["kyoto"], ids["oolong"]]), "current facts"
    assert [p["page_id"] for p in shown["pages"]] == ids["pages"][-2:]
    assert shown["pages"][-1]["meta_data"] == {"n": 5} and shown["pages"][-1]["thread_id"] is None
    agent = agent_json.json()
    assert agent["profile"]["agent_name"] == "bot"
    assert [p["page_id"] for p in agent["pages"]] == [ids["agent_page"]]

    assert show_table.code == 0 and show_table.stderr == ""
    text = show_table.stdout
    for expected in (
        ids["kyoto"],
        ids["oolong"],
        "Plans Kyoto trip",
        "Likes oolong tea",
        "goal",
        "0.80",
        "manual",
        *ids["pages"][-2:],
        "2024-03-06 09:00",
        "My cat knocked",
        "Kyoto temples open",
    ):
        assert expected in text, f"{expected!r} not in the show output:\n{text}"
    assert ids["old_fact"] not in text, "superseded facts are not listed as known"
    assert ids["pages"][0] not in text, "--pages 2 shows the last two only"


def test_export_forget_import_round_trip_reproduces_search_output(
    home: Path, service: MemoryService, tmp_path: Path
) -> None:
    ids = seed(service)
    query = "Kyoto temples tea"
    before_table = cli(home, "search", "alice", query)
    assert before_table.code == 0 and before_table.stderr == ""

    export_file = tmp_path / "alice.json"
    with export_file.open("w", encoding="utf-8") as stream:
        exported = cli(home, "export", "alice", stdout=stream)
    assert (exported.code, exported.stderr) == (0, "")
    document = json.loads(export_file.read_text(encoding="utf-8"))
    assert (document["format"], document["user_id"], list(document["agents"])) == (
        "memory-mcp/export",
        "alice",
        ["bot"],
    )
    assert [p["page_id"] for p in document["pages"]] == ids["pages"]
    assert ids["old_fact"] in {f["id"] for f in document["memory"]["facts"]}, "superseded facts are exported"

    forgotten = cli(home, "forget", "alice", "--yes", "--json").json()
    assert (forgotten["user_id"], forgotten["removed_pages"], forgotten["removed_facts"]) == ("alice", 7, 3)
    assert not any("alice" in Path(p).parts for p in snapshot(home)), "no file of alice remains"

    imported = cli(home, "import", export_file, "--json", module=True).json()
    assert [(r["user_id"], r["pages_added"], r["facts_added"], r["agents"]) for r in imported] == [
        ("alice", 7, 3, ["bot"])
    ]

    after_table, after_json = cli_many(home, [["search", "alice", query], ["search", "alice", query, "--json"]])
    assert after_table.stdout == before_table.stdout, "the same search output after export, forget, import"

    found = after_json.json()
    assert set(found) == {"pages", "facts"}
    pages = [p["page_id"] for p in found["pages"]]
    assert set(pages[:3]) == {ids["pages"][0], ids["pages"][1], ids["pages"][4]}, "the Kyoto exchanges rank first"
    assert all(p["score"] > 0 for p in found["pages"])
    assert {f["id"] for f in found["facts"]} == {ids["kyoto"], ids["oolong"]}, "current facts sharing a word"
    assert found["facts"][0]["score"] >= found["facts"][1]["score"]
    assert ids["old_fact"] not in {f["id"] for f in found["facts"]}
    for page_id in pages[:3]:
        assert page_id in before_table.stdout
    assert ids["kyoto"] in before_table.stdout and "Plans Kyoto trip" in before_table.stdout


def test_forget_without_yes_and_without_a_terminal_refuses_and_erases_nothing(
    home: Path, service: MemoryService
) -> None:
    seed(service)
    before = snapshot(home)
    refused = cli(home, "forget", "alice")
    line = refused.error_line()
    assert "--yes" in line and line.startswith("memory-mcp forget:")
    assert snapshot(home) == before, "nothing is erased without confirmation"

    done = cli(home, "forget", "alice", "--yes")
    assert done.code == 0 and done.stderr == ""
    assert "alice" in done.stdout and "Erased" in done.stdout
    assert not (home / "users" / "alice").exists()


def test_forget_one_exchange_erases_it_alone_after_asking(home: Path, service: MemoryService) -> None:
    ids = seed(service)
    road_bike = ids["pages"][3]
    before = snapshot(home)
    refused = cli(home, "forget", "alice", "--exchange", road_bike)
    assert refused.code == 1 and "--yes" in refused.error_line()
    assert snapshot(home) == before, "nothing is erased without confirmation"

    done = cli(home, "forget", "alice", "--exchange", road_bike, "--yes", "--json").json()
    assert done["exchange_id"] == road_bike and done["user_id"] == "alice"
    shown = cli(home, "show", "alice", "--pages", "10", "--json").json()
    assert [page["page_id"] for page in shown["pages"]] == [n for n in ids["pages"] if n != road_bike]
    assert b"road bike" not in b"".join(path.read_bytes() for path in home.rglob("*") if path.is_file())
    assert "Plans Kyoto trip" in cli(home, "show", "alice", "--facts").stdout, "facts stay"

    unknown = cli(home, "forget", "alice", "--exchange", road_bike, "--yes")
    assert unknown.code != 0 and road_bike in unknown.error_line()


# --- errors: non-zero exit, exactly one stderr line that names the problem ---------------------------


def test_every_error_exits_non_zero_with_one_stderr_line_naming_the_problem(
    home: Path, service: MemoryService, tmp_path: Path
) -> None:
    seed(service)
    document = service.export_memory(ExportRequest.build(user_id="alice")).model_dump(mode="json")
    files = {
        "not_json": "{ this is not json",
        "array": "[1, 2, 3]",
        "wrong_format": json.dumps({"format": "other/thing", "user_id": "alice"}),
        "duplicate_pages": json.dumps({**document, "pages": [*document["pages"], document["pages"][0]]}),
        "bad_timestamp": json.dumps({**document, "pages": [{**document["pages"][0], "timestamp": "last Tuesday"}]}),
        "deep_type": json.dumps(
            {**document, "memory": {**document["memory"], "facts": [{"id": "x", "content": "c", "confidence": "high"}]}}
        ),
        "bad_user": json.dumps({**document, "user_id": "alice/../bob"}),
        "bad_config": json.dumps({"memory": {"max_facts": "lots"}}),
        "unknown_setting": json.dumps({"user_idd": "x"}),
        "config_not_json": "user_id = alice",
        "unreachable_database": json.dumps(
            {"storage": {"backend": "postgres", "dsn": "postgresql://someone:hunter2@127.0.0.1:1/memory"}}
        ),
    }
    for name, text in files.items():
        (tmp_path / f"{name}.json").write_text(text, encoding="utf-8")
    memoryos = tmp_path / "not-memoryos"
    memoryos.mkdir()
    cases: dict[str, tuple[list[str | Path], list[str]]] = {
        "show unknown user": (["show", "ghost"], ["ghost", "`memory-mcp users`"]),
        "show bad user": (["show", "../etc"], ["user_id", "must match", "../etc"]),
        "show bad agent": (["show", "alice", "--agent", "a b"], ["--agent", "must match"]),
        "search bad user": (["search", "a b", "anything"], ["user_id", "must match"]),
        "flush bad user": (["flush", "a/b"], ["user_id", "must match"]),
        "show unknown agent": (["show", "alice", "--agent", "nobot"], ["alice/nobot"]),
        "search unknown user": (["search", "ghost", "anything"], ["ghost"]),
        "export unknown user": (["export", "ghost"], ["ghost"]),
        "export bad user": (["export", "a b"], ["user_id", "a b"]),
        "forget unknown user": (["forget", "ghost", "--yes"], ["ghost"]),
        "import missing file": (["import", tmp_path / "missing.json"], ["missing.json"]),
        "import not json": (["import", tmp_path / "not_json.json"], ["not_json.json", "JSON"]),
        "import array": (["import", tmp_path / "array.json"], ["array.json", "object"]),
        "import wrong format": (["import", tmp_path / "wrong_format.json"], ["memory-mcp/export"]),
        "import duplicate pages": (
            ["import", tmp_path / "duplicate_pages.json"],
            [document["pages"][0]["page_id"], "twice"],
        ),
        "import bad timestamp": (["import", tmp_path / "bad_timestamp.json"], ["timestamp", "last Tuesday"]),
        "import deep type": (["import", tmp_path / "deep_type.json"], ["memory.facts.0.confidence"]),
        "import bad user in file": (["import", tmp_path / "bad_user.json"], ["user_id"]),
        "import bad --user": (["import", tmp_path / "wrong_format.json", "--user", "x/y"], ["user_id", "x/y"]),
        "import not memoryos": (["import", memoryos, "--from-memoryos"], ["not a MemoryOS data directory"]),
        "bad config value": (["--config", tmp_path / "bad_config.json", "users"], ["memory.max_facts"]),
        "bad config after command": (["users", "--config", tmp_path / "bad_config.json"], ["memory.max_facts"]),
        "unknown setting": (
            ["--config", tmp_path / "unknown_setting.json", "show", "alice"],
            ["user_idd", "unknown setting"],
        ),
        "config not json": (
            ["--config", tmp_path / "config_not_json.json", "users"],
            ["config_not_json.json", "not valid JSON"],
        ),
        "missing config": (["--config", tmp_path / "nope.json", "users"], ["nope.json"]),
        "unreachable database": (
            ["--config", tmp_path / "unreachable_database.json", "users"],
            ["could not connect to PostgreSQL", "127.0.0.1:1"],
        ),
        "token for a bad user id": (["token", "add", "a/b"], ["user_id", "a/b"]),
        "revoke an unknown token": (["token", "revoke", "tok_nope"], ["tok_nope", "token list"]),
    }
    before = snapshot(home)
    outcomes = cli_many(home, [arguments for arguments, _ in cases.values()])
    for (name, (_, expected)), outcome in zip(cases.items(), outcomes):
        line = outcome.error_line()
        assert line.startswith("memory-mcp"), f"{name}: {line}"
        assert "memory_status" not in line, f"{name}: a tool name where a command is meant: {line}"
        assert "hunter2" not in line, f"{name}: the database password was shown"
        for part in expected:
            assert part in line, f"{name}: {part!r} not in {line!r}"
    assert snapshot(home) == before, "a failed command changed the data dir"


def test_flush_of_an_unknown_user_is_an_error(home: Path, service: MemoryService) -> None:
    seed(service)
    line = cli(home, "flush", "alcie").error_line()
    assert "alcie" in line


def deep_object(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_an_import_file_with_over_deep_meta_data_is_one_error_line_and_erases_nothing(
    home: Path, service: MemoryService, tmp_path: Path
) -> None:
    seed(service)
    document = service.export_memory(ExportRequest.build(user_id="alice")).model_dump(mode="json")
    document["agents"] = {}
    document["pages"].append({**document["pages"][0], "page_id": "page_deep", "meta_data": deep_object(300)})
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    before = snapshot(home)
    outcome = cli(home, "import", path, "--mode", "replace", "--yes")
    try:
        assert "meta_data" in outcome.error_line()
    finally:
        assert snapshot(home) == before


# --- import: other user, replace, DeerFlow, MemoryOS ----------------------------------------------


def test_import_into_another_user_with_replace_and_a_deerflow_memory_json(
    home: Path, service: MemoryService, tmp_path: Path
) -> None:
    ids = seed(service)
    document = service.export_memory(ExportRequest.build(user_id="alice")).model_dump(mode="json")
    document["agents"] = {}  # only the user's own memory matters here
    export_file = tmp_path / "alice.json"
    export_file.write_text(json.dumps(document), encoding="utf-8")
    deerflow_file = tmp_path / "memory.json"
    deerflow_file.write_text(json.dumps(DEERFLOW_MEMORY), encoding="utf-8")
    service.add_memory(AddMemoryRequest.build(user_input="Said after the export", agent_response="ok", user_id="alice"))
    service.add_fact(AddFactRequest.build(content="Learned after the export", user_id="alice"))

    to_bob, replaced, deerflow = cli_many(
        home,
        [
            ["import", export_file, "--user", "bob", "--json"],
            ["import", export_file, "--mode", "replace", "--yes"],
            ["import", deerflow_file, "--user", "dana"],
        ],
    )
    [bob_result] = to_bob.json()
    assert (bob_result["user_id"], bob_result["mode"], bob_result["pages_added"], bob_result["facts_added"]) == (
        "bob",
        "merge",
        6,
        3,
    )
    assert replaced.code == 0 and replaced.stderr == ""
    assert replaced.stdout.strip() == "alice: Imported 6 exchanges and 3 facts (replace)."
    assert deerflow.code == 0 and deerflow.stdout.strip() == "dana: Imported 0 exchanges and 2 facts (merge)."

    fresh = MemoryService(Settings(data_storage_path=home))
    bob = fresh.export_memory(ExportRequest.build(user_id="bob")).model_dump(mode="json")
    assert bob["pages"] == document["pages"] and bob["memory"]["facts"] == document["memory"]["facts"]
    alice = fresh.export_memory(ExportRequest.build(user_id="alice")).model_dump(mode="json")
    assert [p["page_id"] for p in alice["pages"]] == ids["pages"], "replace erased what came after the export"
    assert alice["memory"]["facts"] == document["memory"]["facts"]
    dana = fresh.export_memory(ExportRequest.build(user_id="dana")).model_dump(mode="json")
    for group, name in (
        ("user", "workContext"),
        ("user", "personalContext"),
        ("history", "recentMonths"),
        ("history", "longTermBackground"),
    ):
        assert dana["memory"][group][name] == DEERFLOW_MEMORY[group][name], (group, name)
    assert [{k: f[k] for k in original} for f, original in zip(dana["memory"]["facts"], DEERFLOW_MEMORY["facts"])] == (
        DEERFLOW_MEMORY["facts"]
    )
    assert len(dana["memory"]["facts"]) == 2


def test_import_from_memoryos_loses_nothing(home: Path, tmp_path: Path) -> None:
    source = memoryos_dir(tmp_path / "memoryos", second_user=True)
    imported = cli(home, "import", source, "--from-memoryos", "--json").json()
    assert [(r["user_id"], r["pages_added"], r["facts_added"]) for r in imported] == [("alice", 4, 2), ("ben", 1, 0)]

    alice = cli(home, "export", "alice").json()
    pages = alice["pages"]
    assert [p["user_input"] for p in pages] == [
        "Planning a Japan trip",
        "Booked a ryokan",
        "I just got back from Kyoto",
        "The temples were amazing",
    ], "every exchange, oldest first, the one in mid-term and short-term once"
    assert [p["page_id"] for p in pages[:3]] == ["mos_p1", "mos_p2", "mos_p3"]
    assert [p["thread_id"] for p in pages] == ["session_b", "session_b", "session_c", None]
    assert [p["timestamp"] for p in pages] == [
        "2024-02-28T08:00:00Z",
        "2024-03-01T09:00:00Z",
        "2024-03-05T10:00:00Z",
        "2024-03-05T10:01:00Z",
    ]
    memory = alice["memory"]
    assert memory["user"]["personalContext"]["summary"] == "Alice loves Japan and travels often."
    assert sorted(f["content"] for f in memory["facts"]) == [
        "Alice stays in ryokans",
        "Alice visited Kyoto in March 2024",
    ]
    assert {f["source"] for f in memory["facts"]} == {"memoryos"}
    assert sorted(k["content"] for k in memory["assistantKnowledge"]) == [
        "I am a travel guide",
        "I recommended Fushimi Inari",
    ]
    assert memory["analysis"]["allBefore"] == 2, "what MemoryOS analysed is not analysed again"

    store = MemoryService(Settings(data_storage_path=home)).store
    assert sum(pending_threads(store, Scope("alice")).values()) == 2
    assert [p.user_input for p in store.read_pages(Scope("ben")).pages] == ["Ben here, I like chess"]


def test_a_memoryos_user_id_that_is_not_valid_here_is_an_error_suggesting_user(home: Path, tmp_path: Path) -> None:
    source = memoryos_dir(tmp_path / "memoryos")
    write_json(source / "users" / "john doe" / "short_term.json", [])
    line = cli(home, "import", source, "--from-memoryos").error_line()
    assert "'john doe'" in line and "--user" in line
    assert snapshot(home) == {}, "no user is imported when one cannot be"


def test_following_the_suggestion_imports_the_memoryos_user_under_a_new_id(home: Path, tmp_path: Path) -> None:
    source = tmp_path / "memoryos"
    write_json(
        source / "users" / "john doe" / "short_term.json",
        [
            {
                "user_input": "John likes sailing",
                "agent_response": "Sailing is fun",
                "timestamp": "2024-01-01 12:00:00",
            },
        ],
    )
    outcome = cli(home, "import", source, "--from-memoryos", "--user", "john_doe")
    assert outcome.code == 0, outcome.stderr
    assert (home / "users" / "john_doe" / "pages.jsonl").exists()


# --- flush -----------------------------------------------------------------------------------------

EXTRACTED = {
    "user": {"topOfMind": {"summary": "Planning a Kyoto trip", "shouldUpdate": True}},
    "history": {},
    "newFacts": [{"content": "Is travelling to Kyoto in April", "category": "goal", "confidence": 0.9}],
    "factsToRemove": [],
}


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM(default=reply(EXTRACTED)).start()
    yield server
    server.stop()


def test_flush_without_and_with_an_llm(home: Path, service: MemoryService, tmp_path: Path, llm: ScriptedLLM) -> None:
    seed(service)
    service.add_memory(AddMemoryRequest.build(user_input="Bob likes Oslo", agent_response="ok", user_id="bob"))
    config = write_config(
        tmp_path / "config.json",
        {
            "data_storage_path": str(home),
            "openai_base_url": llm.base_url,
            "llm_model": SCRIPTED_MODEL,
            "openai_api_key": "test-key",
            "memory": {"llm_max_attempts": 1, "llm_timeout_seconds": 10},
        },
    )

    off_all, off_one = cli_many(home, [["flush", "--json"], ["flush", "alice"]])
    results = off_all.json()
    assert [(r["user_id"], r["extraction"], r["llm_calls"], r["pending_pages"]) for r in results] == [
        ("alice", "off", 0, 6),
        ("bob", "off", 0, 1),
    ]
    assert all(r["notes"] for r in results), "says why nothing was analysed"
    assert off_one.code == 0 and "alice" in off_one.stdout and "6 still pending" in off_one.stdout
    assert llm.requests == []

    flushed = cli(home, "--config", config, "flush", "alice", "--json").json()
    [alice] = flushed
    assert (alice["user_id"], alice["extraction"], alice["pending_pages"], alice["errors"]) == (
        "alice",
        "server",
        0,
        [],
    )
    assert alice["pages_analysed"] == 6 and alice["llm_calls"] >= 1 and len(alice["facts_added"]) == 1
    assert len(llm.requests) == alice["llm_calls"]
    facts = MemoryService(Settings(data_storage_path=home)).search_facts(SearchFactsRequest.build(user_id="alice"))
    assert "Is travelling to Kyoto in April" in [f.content for f in facts.facts]

    everyone = cli(home, "flush", "--config", config)
    assert everyone.code == 0, everyone.stderr
    assert "alice: extraction server; analysed 0 exchanges" in everyone.stdout
    assert "bob: extraction server; analysed 1 exchange " in everyone.stdout
    assert "0 still pending" in everyone.stdout

    nobody = cli(tmp_path / "empty-home", "flush")
    assert nobody.code == 0 and "nothing to flush" in nobody.stdout


def test_show_refuses_a_negative_number_of_exchanges(home: Path, service: MemoryService) -> None:
    seed(service)
    outcome = cli(home, "show", "alice", "--pages", "-1")
    assert outcome.code == 2 and "--pages: must be a whole number, 0 or more" in outcome.stderr
    assert outcome.stdout == ""


def test_import_replace_asks_first_and_goes_ahead_with_yes(home: Path, service: MemoryService, tmp_path: Path) -> None:
    seed(service)
    replacement = tmp_path / "replacement.json"
    replacement.write_text(
        json.dumps(
            {
                "format": "memory-mcp/export",
                "version": 1,
                "exported_at": "",
                "user_id": "alice",
                "memory": {},
                "pages": [{"page_id": "p1", "user_input": "hi", "agent_response": "yo", "timestamp": "2024-01-01"}],
            }
        ),
        encoding="utf-8",
    )
    before = snapshot(home)
    refused = cli(home, "import", replacement, "--mode", "replace")
    assert refused.code == 1 and "--yes" in refused.stderr
    assert snapshot(home) == before, "nothing replaced without confirmation"

    done = cli(home, "import", replacement, "--mode", "replace", "--yes")
    assert done.code == 0, done.stderr
    assert "Imported 1 exchange and 0 facts (replace)." in done.stdout, "one exchange, in the singular"
    assert re.search(r"^\s*1 user\s*$", cli(home, "users").stdout, re.MULTILINE), "the table says 1 user"


def test_token_files_are_private_and_times_are_in_the_one_stored_form(home: Path) -> None:
    cli(home, "token", "add", "alice")
    assert oct((home / "tokens.json.lock").stat().st_mode & 0o777) == "0o600"
    [record] = json.loads(cli(home, "token", "list", "--json").stdout)
    assert record["created"].endswith("Z") and len(record["created"]) == len("2026-11-24T02:21:01Z")


def test_show_and_search_filter_by_project_and_say_each_exchanges_project(home: Path, service: MemoryService) -> None:
    shop, api = "/home/ana/code/webshop", "/home/ana/code/python-api"
    for said, project in (
        ("We use pnpm in the shop", shop),
        ("Invoices round half-even", api),
        ("pnpm again for the shop tests", shop),
        ("An old note about pnpm", None),
    ):
        service.add_memory(
            AddMemoryRequest.build(user_input=said, agent_response="Noted.", user_id="ana", project=project)
        )

    shown, table, found = cli_many(
        home,
        [
            ["show", "ana", "--pages", "10", "--project", "webshop", "--json"],
            ["show", "ana", "--pages", "10"],
            ["search", "ana", "pnpm", "--project", api, "--json"],
        ],
    )
    assert [page["user_input"] for page in shown.json()["pages"]] == [
        "We use pnpm in the shop",
        "pnpm again for the shop tests",
    ], "by the project's name or its whole path"
    assert "webshop" in table.stdout and "python-api" in table.stdout and "(no project)" in table.stdout
    assert found.json()["pages"] == [], "no exchange of python-api says pnpm"


def test_scrub_replaces_secrets_stored_before_redaction_was_on(home: Path) -> None:
    unredacted = MemoryService(Settings(data_storage_path=home, memory={"redaction": False}))
    unredacted.add_memory(
        AddMemoryRequest.build(user_input="db password is hunter2x", agent_response="ok", user_id="al")
    )
    unredacted.close()
    done = cli(home, "scrub", "--json").json()
    assert (done["memories"], done["exchanges"]) == (1, 1)
    shown = cli(home, "show", "al", "--pages", "1", "--json").json()
    assert shown["pages"][0]["user_input"] == "db password is [redacted: password]"
    assert cli(home, "scrub", "nobody").code != 0
