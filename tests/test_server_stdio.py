"""The server as hosts run it: `python server.py` as a subprocess, spoken to over real stdio.

Every test starts its own server process(es) on its own temporary data directory; nothing is
shared between tests. Async bodies run under `stdio_helpers.run`, which puts a deadline on them.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import pytest
from stdio_helpers import (
    HANDSHAKE_PROTOCOL_VERSION,
    RawServer,
    add,
    canonical,
    connect,
    error_text,
    ok,
    profile,
    recall,
    result_json,
    run,
    server_command,
    server_env,
    snapshot,
    write_config,
)

from memory_mcp.base.ids import IDENTIFIER_RULE
from memory_mcp.store.files.layout import directory_name

pytestmark = pytest.mark.integration

CONTRACT_PARAMETERS = {
    "add_memory": ["user_input", "agent_response", "timestamp", "meta_data", "user_id", "agent_name", "thread_id"],
    "retrieve_memory": ["query", "relationship_with_user", "style_hint", "max_results", "user_id", "agent_name"],
    "get_user_profile": ["include_knowledge", "include_assistant_knowledge", "user_id", "agent_name"],
}
CONTRACT_REQUIRED = {
    "add_memory": {"user_input", "agent_response"},
    "retrieve_memory": {"query"},
    "get_user_profile": set(),
}
BAD_IDENTIFIERS = ["../x", "a/b", "alice\n", "a" * 129, ".alice@x.org"]

# Fifteen exchanges on distinct topics, oldest first.
TOPICS = [
    ("I adopted a greyhound called Biscuit from the shelter.", "Congratulations on adopting Biscuit!"),
    ("My sister Marguerite lives in Lisbon and works as an architect.", "Lisbon is a lovely city for architects."),
    ("I named my sourdough starter Clint Yeastwood, it lives on the fridge.", "Clint Yeastwood is a great name."),
    ("I'm training for the Berlin marathon in September.", "Good luck with the Berlin training plan."),
    ("My favourite programming language is Haskell because of its type system.", "Haskell's types are elegant."),
    ("We are renovating the kitchen with green terracotta tiles.", "Green terracotta sounds warm."),
    ("I play the cello in a community orchestra on Thursdays.", "Cello in an orchestra, how nice."),
    ("I'm allergic to peanuts, please remember that for recipes.", "Noted: no peanuts in recipes."),
    ("My daughter starts kindergarten next week.", "A big step for her."),
    ("I drive an old Volvo estate from 1994.", "Those Volvos last forever."),
    ("I'm reading Middlemarch by George Eliot.", "Middlemarch is a masterpiece."),
    ("Our team migrated the billing service to Postgres.", "Postgres migrations can be tricky."),
    ("I prefer window seats on long flights.", "Window seats it is."),
    ("My grandmother taught me to knit scarves.", "Knitting is a lovely skill to inherit."),
    ("I want to visit Patagonia for hiking next spring.", "Patagonia hiking is spectacular."),
]


def stderr_of(errlog: TextIO) -> str:
    errlog.flush()
    return Path(errlog.name).read_text(encoding="utf-8", errors="replace")


def exchange(user_input: Any, agent_response: Any, **fields: Any) -> dict[str, Any]:
    return {"user_input": user_input, "agent_response": agent_response, **fields}


def ids_of(pages: list[dict[str, Any]]) -> list[str]:
    return [page["page_id"] for page in pages]


# --- 1. tools, schemas, descriptions, annotations, instructions ------------------------------


def test_tools_are_listed_with_contract_schemas_descriptions_and_annotations(home: Path, errlog: TextIO) -> None:
    async def body() -> tuple[dict[str, Any], str | None]:
        async with connect(home, errlog=errlog) as client:
            listed = await client.list_tools()
            return {tool.name: tool for tool in listed.tools}, client.instructions

    tools, instructions = run(body)

    assert set(CONTRACT_PARAMETERS) <= set(tools), f"missing tools: {set(CONTRACT_PARAMETERS) - set(tools)}"
    for name, parameters in CONTRACT_PARAMETERS.items():
        tool = tools[name]
        schema = tool.input_schema
        assert schema["type"] == "object"
        properties = list(schema["properties"])
        missing = [p for p in parameters if p not in properties]
        assert not missing, f"{name} lacks parameters {missing}; has {properties}"
        # Contract parameters keep their relative order (hosts show them in schema order).
        assert [p for p in properties if p in parameters] == parameters
        assert set(schema.get("required", [])) == CONTRACT_REQUIRED[name]
        for parameter in parameters:
            assert schema["properties"][parameter].get("description"), f"{name}.{parameter} has no description"
        for field in ("user_id", "agent_name"):  # the rule is published where the host fills the ids in
            assert schema["properties"][field]["pattern"] == f"^({IDENTIFIER_RULE})?$".replace("A-Za-z0-9_", "\\w")
        assert tool.output_schema and tool.output_schema.get("type") == "object", f"{name} has no output schema"
        assert "status" in tool.output_schema["properties"]
        assert tool.description and len(tool.description) > 40
        assert tool.annotations is not None, name

    retrieve_description = tools["retrieve_memory"].description.lower()
    add_description = tools["add_memory"].description.lower()
    assert "before answering" in retrieve_description
    assert re.search(r"\bafter (each|every) exchange\b", add_description), add_description

    for name in ("retrieve_memory", "get_user_profile"):
        assert tools[name].annotations.read_only_hint is True, name
        assert tools[name].annotations.destructive_hint is not True, name
    add_annotations = tools["add_memory"].annotations
    assert add_annotations.read_only_hint is False
    assert add_annotations.idempotent_hint is False
    assert add_annotations.destructive_hint is False

    assert {"short_term_memory", "retrieved_pages", "user_profile"} <= set(
        tools["retrieve_memory"].output_schema["properties"]
    )
    assert {"page_id", "timestamp"} <= set(tools["add_memory"].output_schema["properties"])

    assert instructions, "the server must send instructions"
    assert "retrieve_memory" in instructions and "add_memory" in instructions
    assert snapshot(home) == {}, "listing tools writes nothing"


# --- 2. add, then retrieve -------------------------------------------------------------------


def test_retrieve_finds_an_older_exchange_first_and_short_term_holds_the_ten_most_recent(
    home: Path, errlog: TextIO
) -> None:
    sourdough = 2  # older than the last ten of fifteen

    async def body() -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with connect(home, errlog=errlog) as client:
            added = [await add(client, user_input, agent_response) for user_input, agent_response in TOPICS]
            result = await recall(client, "What did I name my sourdough starter?")
            # The first hit follows the query (not always the same page), and max_results caps the list.
            sister = await recall(client, "where does Marguerite live?")
            dog = await recall(client, "greyhound Biscuit", max_results=1)
            # Words of a recent exchange (Patagonia, in short-term memory) and of an older one.
            mixed = await recall(client, "Patagonia hiking and the greyhound")
            return added, result, sister, dog, mixed

    added, result, sister, dog, mixed = run(body)
    page_ids = [a["page_id"] for a in added]
    assert len(set(page_ids)) == len(TOPICS), "every add gets its own page id"
    assert all(a["status"] == "success" and a["user_id"] == "default" for a in added)

    short_term = result["short_term_memory"]
    assert ids_of(short_term) == page_ids[-10:]
    assert [(p["user_input"], p["agent_response"]) for p in short_term] == TOPICS[-10:]

    retrieved = result["retrieved_pages"]
    assert retrieved, "the older sourdough exchange must be retrieved"
    best = retrieved[0]
    assert best["page_id"] == page_ids[sourdough]
    assert (best["user_input"], best["agent_response"]) == TOPICS[sourdough]
    assert isinstance(best["score"], (int, float)) and best["score"] > 0
    scores = [p["score"] for p in retrieved]
    assert scores == sorted(scores, reverse=True), "retrieved_pages are best first"
    assert set(ids_of(retrieved)) <= set(page_ids[:-10]), "retrieval ranks only exchanges older than short-term"
    assert result["query"] == "What did I name my sourdough starter?"

    assert sister["retrieved_pages"][0]["page_id"] == page_ids[1]
    assert ids_of(dog["retrieved_pages"]) == [page_ids[0]]
    assert mixed["retrieved_pages"][0]["page_id"] == page_ids[0]
    assert set(ids_of(mixed["retrieved_pages"])) <= set(page_ids[:-10]), "short-term pages are not repeated"


# --- 3. meta_data, thread_id and timestamps round-trip ---------------------------------------

META_DATA = {
    "source": "chat",
    "nested": {"list": [1, 2.5, -3, {"deep": [True, False, None]}], "empty_object": {}, "empty_list": []},
    "unicode": "héllo wörld — 日本語 🎉 e\u0301",
    "escapes": 'he said "hi"\n\ttab \\ backslash',
    "int": 42,
    "zero_float": 0.0,
    "float": 3.14159,
    "negative": -0.5,
    "big": 2**53,
    "huge": 2**70,
    "negative_zero": -0.0,
    "tiny": 5e-324,
    "exponent": 1.5e-10,
    "true": True,
    "false": False,
    "null": None,
    "": "empty key",
}
TIMESTAMPS = [
    ("2023-05-08 13:56:00", "2023-05-08T13:56:00Z"),
    ("2023-05-08T15:56:00+02:00", "2023-05-08T13:56:00Z"),
    ("2023-05-08T08:56:00-05:00", "2023-05-08T13:56:00Z"),
    ("2024-05-01T13:56:00Z", "2024-05-01T13:56:00Z"),
]


def test_meta_data_thread_id_and_timestamps_round_trip_exactly(home: Path, errlog: TextIO) -> None:
    async def body() -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any], datetime, datetime]:
        async with connect(home, errlog=errlog) as client:
            added = [
                await add(
                    client, f"timestamp case {i}", "ok", timestamp=given, meta_data=META_DATA, thread_id=f"t-{i} ✓"
                )
                for i, (given, _) in enumerate(TIMESTAMPS)
            ]
            before = datetime.now(UTC).replace(microsecond=0)
            now_page = await add(client, "no timestamp given", "ok")
            after = datetime.now(UTC)
            return added, now_page, await recall(client, "timestamp case"), before, after

    added, now_page, result, before, after = run(body)
    stored = {p["page_id"]: p for p in result["short_term_memory"]}
    assert list(stored) == [*ids_of(added), now_page["page_id"]]

    for i, ((given, expected), reply) in enumerate(zip(TIMESTAMPS, added)):
        assert reply["timestamp"] == expected, given
        page = stored[reply["page_id"]]
        assert page["timestamp"] == expected, given
        assert canonical(page["meta_data"]) == canonical(META_DATA)
        assert reply["thread_id"] == page["thread_id"] == f"t-{i} ✓"

    # No timestamp: the server's current time, in the same stored form.
    stamp = now_page["timestamp"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)
    moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert before - timedelta(seconds=1) <= moment <= after + timedelta(seconds=1)
    assert stored[now_page["page_id"]]["meta_data"] is None
    assert stored[now_page["page_id"]]["thread_id"] is None


# --- 4. a restart keeps everything -----------------------------------------------------------


def test_restart_on_the_same_data_dir_keeps_every_page(home: Path, errlog: TextIO) -> None:
    topics = TOPICS[:12]  # two more than short-term memory holds: two pages only retrieval can reach
    coder = {"user_id": "alice", "agent_name": "coder"}

    async def first_session() -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]]]:
        async with connect(home, errlog=errlog) as client:
            ids = [
                (await add(client, u, a, meta_data={"n": i, "tags": ["t", i]}, thread_id=f"t{i % 3}"))["page_id"]
                for i, (u, a) in enumerate(topics)
            ]
            agent_ids = [(await add(client, f"coder note {i}", "ack", **coder))["page_id"] for i in range(3)]
            user_view = await recall(client, "greyhound")
            agent_view = await recall(client, "note", **coder)
            assert ids_of(user_view["short_term_memory"]) == ids[-10:]
            assert ids_of(agent_view["short_term_memory"]) == agent_ids
            return ids, user_view["short_term_memory"], agent_view["short_term_memory"]

    async def second_session() -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
        async with connect(home, errlog=errlog) as client:
            older = [
                await recall(client, query, max_results=1)
                for query in ("greyhound Biscuit shelter", "Marguerite Lisbon architect")
            ]
            return await recall(client, "greyhound"), await recall(client, "note", **coder), older

    ids, user_before, agent_before = run(first_session)
    on_disk = snapshot(home)
    assert on_disk, "the first session wrote nothing"
    user_after, agent_after, older = run(second_session)

    assert canonical(user_after["short_term_memory"]) == canonical(user_before)
    assert canonical(agent_after["short_term_memory"]) == canonical(agent_before)
    for index, found in enumerate(older):
        (page,) = found["retrieved_pages"]
        assert page["page_id"] == ids[index]
        assert (page["user_input"], page["agent_response"]) == topics[index]
        assert page["meta_data"] == {"n": index, "tags": ["t", index]}
        assert page["thread_id"] == f"t{index % 3}"
    # The page logs themselves are untouched by the restart and the reads. (memory.json may
    # change: retrieval counts session visits there.)
    page_logs = {path: entry for path, entry in on_disk.items() if path.endswith("pages.jsonl")}
    assert len(page_logs) == 2
    assert {path: entry for path, entry in snapshot(home).items() if path.endswith("pages.jsonl")} == page_logs


# --- 5. isolation between users and between agents -------------------------------------------


def test_users_are_isolated_over_stdio(home: Path, tmp_path: Path, errlog: TextIO) -> None:
    # A short short-term memory, so both users' retrieval really ranks older pages.
    config = write_config(tmp_path / "config.json", {"short_term_capacity": 2, "data_storage_path": str(home)})
    alice_says = [
        ("My cat Zorblax sleeps on a quasicrystal lamp.", "Zorblax has taste."),
        ("I cook pierogi every Sunday for Zorblax's birthday.", "Pierogi Sundays!"),
        ("filler one", "ok"),
        ("filler two", "ok"),
    ]
    bob_says = [
        ("I like hiking in the Alps.", "Alps are great."),
        ("My cat sleeps a lot too.", "Cats do that."),
        ("I cook pasta on Sundays.", "Pasta is good."),
        ("I bought a lamp for my desk.", "Nice lamp."),
    ]
    query = "Zorblax quasicrystal pierogi cat lamp Sunday cook"

    async def body() -> dict[str, Any]:
        async with connect(config=config, errlog=errlog) as client:
            alice_ids = [
                (await add(client, u, a, user_id="alice", meta_data={"owner": "alice-meta"}))["page_id"]
                for u, a in alice_says
            ]
            for u, a in bob_says:
                await add(client, u, a, user_id="bob")
            everything = {"include_knowledge": True, "include_assistant_knowledge": True}
            return {
                "alice_ids": alice_ids,
                "bob_retrieve": await client.call_tool(
                    "retrieve_memory", {"query": query, "user_id": "bob", "max_results": 100}
                ),
                "bob_profile": await client.call_tool("get_user_profile", {"user_id": "bob", **everything}),
                "alice_retrieve": await recall(client, query, user_id="alice"),
            }

    out = run(body)
    alice_ids: list[str] = out["alice_ids"]
    bob_retrieve = ok(out["bob_retrieve"])
    assert ok(out["bob_profile"])["user_id"] == "bob"

    # Controls: the query reaches alice's older pages for alice, and bob's own older pages for bob.
    assert set(alice_ids[:2]) <= set(ids_of(out["alice_retrieve"]["retrieved_pages"]))
    assert bob_retrieve["retrieved_pages"], "bob's older pages share words with the query"
    assert bob_retrieve["user_id"] == "bob"

    for name in ("bob_retrieve", "bob_profile"):
        # Everything the host receives, minus the echo of bob's own query.
        text = result_json(out[name]).replace(query, "")
        for secret in ["Zorblax", "quasicrystal", "pierogi", "alice-meta", "alice", *alice_ids]:
            assert secret not in text, f"{secret!r} (alice's) leaked into {name}"


def test_agent_memory_is_separate_from_the_users_own(home: Path, errlog: TextIO) -> None:
    query = "Frobnicator tabs lighthouses"

    async def body() -> dict[str, Any]:
        async with connect(home, errlog=errlog) as client:
            return {
                "coder": await add(
                    client,
                    "Indent with tabs in the Frobnicator repo.",
                    "Tabs it is.",
                    user_id="carol",
                    agent_name="coder",
                ),
                "shared": await add(client, "I write poems about lighthouses.", "Lovely.", user_id="carol"),
                "carol": await recall(client, query, user_id="carol"),
                "carol_coder": await recall(client, query, user_id="carol", agent_name="coder"),
                "carol_writer": await recall(client, query, user_id="carol", agent_name="writer"),
                "carol_coder_profile": await profile(client, user_id="carol", agent_name="coder"),
            }

    out = run(body)
    assert out["coder"]["agent_name"] == "coder" and out["shared"]["agent_name"] is None
    assert ids_of(out["carol"]["short_term_memory"]) == [out["shared"]["page_id"]]
    assert out["carol"]["agent_name"] is None
    assert ids_of(out["carol_coder"]["short_term_memory"]) == [out["coder"]["page_id"]]
    assert out["carol_coder"]["agent_name"] == "coder"
    assert "Frobnicator" not in canonical(out["carol"]["short_term_memory"] + out["carol"]["retrieved_pages"])
    coder_pages = out["carol_coder"]["short_term_memory"] + out["carol_coder"]["retrieved_pages"]
    assert "lighthouses" not in canonical(coder_pages)
    assert out["carol_writer"]["short_term_memory"] == [] and out["carol_writer"]["retrieved_pages"] == []
    assert out["carol_coder_profile"]["agent_name"] == "coder"
    # Stored apart on disk as well: the agent's pages under the user's agents/ folder.
    assert (home / "users" / "carol" / "agents" / "coder" / "pages.jsonl").is_file()
    assert "Frobnicator" not in (home / "users" / "carol" / "pages.jsonl").read_text(encoding="utf-8")


# --- 6. bad input is refused, naming the field, and nothing is written ------------------------


def test_bad_user_id_and_agent_name_are_refused_and_nothing_is_written(home: Path, errlog: TextIO) -> None:
    calls = []
    for field in ("user_id", "agent_name"):
        for bad in BAD_IDENTIFIERS:
            owner = {"user_id": "alice"} if field == "agent_name" else {}
            calls += [
                (field, bad, "add_memory", {**exchange("secret", "reply"), **owner, field: bad}),
                (field, bad, "retrieve_memory", {"query": "secret", **owner, field: bad}),
                (field, bad, "get_user_profile", {**owner, field: bad}),
            ]

    async def body() -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
        async with connect(home, errlog=errlog) as client:
            await add(client, "seed exchange", "seed", user_id="alice")  # alice has a directory to escape from
            before = snapshot(home)
            results = [await client.call_tool(tool, arguments) for _, _, tool, arguments in calls]
            return before, snapshot(home), results

    before, after, results = run(body)
    assert before, "the seed add must have written something"
    for (field, bad, tool, _), result in zip(calls, results):
        message = error_text(result)
        assert field in message, f"{tool} {field}={bad!r}: message does not name the field: {message}"
        assert IDENTIFIER_RULE in message, f"{tool} {field}={bad!r}: message does not state the rule: {message}"
    assert after == before, f"a refused call wrote to the data dir: {set(after) ^ set(before)}"
    # Nothing escaped the data directory either (the '../x' user would land beside users/).
    assert not (home / "x").exists() and not (home / "users" / "a").exists()


def test_identifier_boundaries_and_empty_user_id_over_stdio(home: Path, errlog: TextIO) -> None:
    longest = "U" * 128

    async def body() -> dict[str, Any]:
        async with connect(home, errlog=errlog) as client:
            return {
                "empty": await add(client, "empty id", "ok", user_id=""),
                "omitted": await add(client, "omitted id", "ok"),
                "empty_agent": await add(client, "empty agent", "ok", agent_name=""),
                "longest": await add(client, "longest id", "ok", user_id=longest, agent_name="a-b_C9"),
                "default_view": await recall(client, "id", user_id=""),
                "profile": await profile(client, user_id=""),
            }

    out = run(body)
    assert out["empty"]["user_id"] == "default" and out["omitted"]["user_id"] == "default"
    assert out["empty_agent"]["agent_name"] is None
    assert out["longest"]["user_id"] == longest and out["longest"]["agent_name"] == "a-b_C9"
    default_inputs = [p["user_input"] for p in out["default_view"]["short_term_memory"]]
    assert default_inputs == ["empty id", "omitted id", "empty agent"]
    assert out["default_view"]["user_id"] == "default" and out["profile"]["user_id"] == "default"
    assert sorted(p.name for p in (home / "users").iterdir()) == sorted(["default", directory_name(longest)])
    agent_dir = home / "users" / directory_name(longest) / "agents" / directory_name("a-b_C9")
    assert (agent_dir / "pages.jsonl").is_file()


BAD_INPUT = [
    # (tool, arguments, field the message must name). Most name a user with no memory yet, so a
    # write that happened before validation would show up as a new directory.
    ("add_memory", exchange("hi", "yo", timestamp="yesterday", user_id="fresh"), "timestamp"),
    ("add_memory", exchange("hi", "yo", timestamp="2023-13-45 25:61:00", user_id="fresh"), "timestamp"),
    ("add_memory", exchange("hi", "yo", timestamp=1683554160, user_id="fresh"), "timestamp"),
    ("add_memory", exchange("", "", user_id="fresh"), "user_input"),
    ("add_memory", exchange("  \n", "\t", user_id="fresh", agent_name="coder"), "agent_response"),
    ("add_memory", exchange("", ""), "agent_response"),
    ("add_memory", exchange("hi", "yo", meta_data=[1, 2], user_id="fresh"), "meta_data"),
    ("add_memory", exchange("hi", "yo", meta_data="a string", user_id="fresh"), "meta_data"),
    ("add_memory", exchange("hi", "yo", meta_data=7), "meta_data"),
    ("add_memory", exchange(5, "yo", user_id="fresh"), "user_input"),
    ("add_memory", exchange("hi", ["yo"]), "agent_response"),
    ("add_memory", {"user_input": "hi", "user_id": "fresh"}, "agent_response"),
    ("add_memory", exchange("hi", "yo", user_id=12), "user_id"),
    ("add_memory", exchange("hi", "yo", thread_id={"id": 1}, user_id="fresh"), "thread_id"),
    ("add_memory", exchange("hi", "yo", thread_id="line\nbreak", user_id="fresh"), "thread_id"),
    ("retrieve_memory", {"query": "hi", "max_results": 0, "user_id": "fresh"}, "max_results"),
    ("retrieve_memory", {"query": "hi", "max_results": 101}, "max_results"),
    ("retrieve_memory", {"query": "hi", "max_results": "many"}, "max_results"),
    ("retrieve_memory", {"query": 3}, "query"),
    ("retrieve_memory", {}, "query"),
    ("retrieve_memory", {"query": "hi", "agent_name": ["coder"]}, "agent_name"),
    ("get_user_profile", {"include_knowledge": "nope", "user_id": "fresh"}, "include_knowledge"),
    ("get_user_profile", {"include_assistant_knowledge": {"a": 1}}, "include_assistant_knowledge"),
]


def test_other_bad_input_is_refused_naming_the_field_and_nothing_is_written(home: Path, errlog: TextIO) -> None:
    async def body() -> tuple[dict[str, Any], dict[str, Any], list[Any], dict[str, Any]]:
        async with connect(home, errlog=errlog) as client:
            await add(client, "seed", "seed")
            before = snapshot(home)
            results = [await client.call_tool(tool, arguments) for tool, arguments, _ in BAD_INPUT]
            after = snapshot(home)
            # Still serving, and none of the refused exchanges is in memory.
            return before, after, results, await recall(client, "hi yo")

    before, after, results, view = run(body)
    for (tool, arguments, field), result in zip(BAD_INPUT, results):
        message = error_text(result)
        assert field in message, f"{tool}({arguments}) error does not name {field!r}: {message}"
    assert after == before, f"a refused call wrote to the data dir: {set(after) ^ set(before)}"
    assert [p["user_input"] for p in view["short_term_memory"]] == ["seed"]


def test_misspelt_argument_is_refused_instead_of_writing_to_the_default_user(home: Path, errlog: TextIO) -> None:
    """A host model's typo ('userId') must not file alice's exchange under the default user.

    (Found by this suite: the SDK dropped unknown arguments silently; fixed in 4021860.)
    """
    calls = [
        ("add_memory", exchange("alice's secret", "ok", userId="alice")),
        ("retrieve_memory", {"query": "secret", "userid": "alice"}),
        ("get_user_profile", {"user_id": "alice", "agentName": "coder"}),
    ]

    async def body() -> list[Any]:
        async with connect(home, errlog=errlog) as client:
            return [await client.call_tool(tool, arguments) for tool, arguments in calls]

    results = run(body)
    assert snapshot(home) == {}, "a refused call wrote to the data dir"
    for (tool, arguments), result, misspelt in zip(calls, results, ["userId", "userid", "agentName"]):
        assert misspelt in error_text(result), f"{tool}({arguments})"


# --- 7. stdout carries only JSON-RPC; the process ends when stdin closes ---------------------


def test_stdout_carries_only_json_rpc_and_the_server_exits_when_stdin_closes(home: Path, tmp_path: Path) -> None:
    with RawServer(home, tmp_path / "raw-stderr.log", extra_args=["--log-level", "DEBUG"]) as server:
        init = server.initialize(HANDSHAKE_PROTOCOL_VERSION)
        assert init["result"]["protocolVersion"] == HANDSHAKE_PROTOCOL_VERSION
        assert init["result"]["serverInfo"]["name"] == "memory-mcp"
        assert "tools" in init["result"]["capabilities"]
        assert "retrieve_memory" in init["result"]["instructions"]

        listed = server.request("tools/list")
        assert set(CONTRACT_PARAMETERS) <= {tool["name"] for tool in listed["result"]["tools"]}

        added = server.call_tool("add_memory", exchange("I love the Faroe Islands 🐑", "Noted!", meta_data={"k": 1}))
        assert added["result"]["isError"] is False
        assert added["result"]["structuredContent"]["status"] == "success"

        refused = server.call_tool("add_memory", exchange("x", "y", user_id="../x"))  # logged by the server
        assert refused["result"]["isError"] is True
        assert "user_id" in refused["result"]["content"][0]["text"]

        recalled = server.call_tool("retrieve_memory", {"query": "Faroe"})
        (page,) = recalled["result"]["structuredContent"]["short_term_memory"]
        assert page["user_input"] == "I love the Faroe Islands 🐑"

        assert server.call_tool("no_such_tool", {})["result"]["isError"] is True
        assert server.call_tool("retrieve_memory", {"query": "x", "max_results": 0})["result"]["isError"] is True
        assert "error" in server.request("no/such/method")
        # Garbage on stdin neither kills the server nor puts anything but JSON-RPC on stdout.
        for garbage in (b"this is not json", b'{"jsonrpc": "2.0", "id": 99', b"[1, 2, 3]"):
            server.send_line(garbage)
        assert server.request("ping")["result"] == {}
        # A request whose id is not a string or an integer is answered too: -32600, id null.
        for bad_id in ({"a": 1}, 1.5, True, None):
            server.send({"jsonrpc": "2.0", "id": bad_id, "method": "tools/list"})
        assert server.request("ping")["result"] == {}

        code = server.close_stdin_and_wait(timeout=5)
        assert code == 0, f"the server did not exit by itself within 5s after stdin closed (exit code {code})"
        stderr = server.stderr_text()
        lines = list(server.stdout_lines)

    assert lines, "the server answered nothing"
    response_ids = []
    for raw in lines:
        assert raw.endswith(b"\n")
        message = json.loads(raw)  # every stdout line is one JSON value...
        assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", raw  # ...and a JSON-RPC message
        if "id" in message and "method" not in message:
            response_ids.append(message["id"])
    # One response per request, in order (a parse-error response for the garbage, id null, is fine).
    assert [i for i in response_ids if i is not None] == list(range(1, 11)), response_ids
    unusable_ids = [
        message
        for message in map(json.loads, lines)
        if message.get("id", 0) is None and "id must be" in message.get("error", {}).get("message", "")
    ]
    assert len(unusable_ids) == 4, "every request with an unusable id is answered -32600"
    # The logs went to stderr.
    assert "memory-mcp" in stderr
    assert "../x" in stderr, "the refused call was expected to be logged on stderr"
    assert "Traceback" not in stderr


def test_sigterm_ends_the_server_while_stdin_is_still_open(home: Path, tmp_path: Path) -> None:
    """Hosts and process managers may send SIGTERM without closing stdin first.

    (Found by this suite: the process used to hang at interpreter exit, joining the SDK's stdin
    reader thread blocked in read(), until stdin closed; fixed in 1e633de.)
    """
    with RawServer(home, tmp_path / "raw-stderr.log") as server:
        server.initialize()
        assert server.call_tool("add_memory", exchange("before SIGTERM", "ok"))["result"]["isError"] is False
        server.process.send_signal(signal.SIGTERM)
        try:
            code: int | None = server.process.wait(5)
        except subprocess.TimeoutExpired:
            code = None
        lines = list(server.stdout_lines)
    assert all(json.loads(line).get("jsonrpc") == "2.0" for line in lines)
    assert (home / "users" / "default" / "pages.jsonl").read_text(encoding="utf-8").count("before SIGTERM") == 1
    assert code == 0, "the server was still running 5s after SIGTERM" if code is None else f"exit code {code}"


# --- 8. unexpected failures do not crash the server ------------------------------------------


def test_corrupt_memory_document_is_reported_left_untouched_and_other_users_still_served(
    home: Path, errlog: TextIO
) -> None:
    alice_dir = home / "users" / "alice"
    alice_dir.mkdir(parents=True)
    corrupt = alice_dir / "memory.json"
    corrupt_bytes = b'{"version": "1.0", "facts": [ {"id": "f1", "content": "trunc'
    corrupt.write_bytes(corrupt_bytes)
    mtime = corrupt.stat().st_mtime_ns
    alice_before = snapshot(alice_dir)

    async def body() -> dict[str, Any]:
        async with connect(home, errlog=errlog) as client:
            return {
                "profile": await client.call_tool("get_user_profile", {"user_id": "alice"}),
                "retrieve": await client.call_tool("retrieve_memory", {"query": "anything", "user_id": "alice"}),
                "profile_again": await client.call_tool("get_user_profile", {"user_id": "alice"}),
                "bob_add": await client.call_tool("add_memory", exchange("bob is fine", "good", user_id="bob")),
                "bob_retrieve": await client.call_tool("retrieve_memory", {"query": "fine", "user_id": "bob"}),
                "bob_profile": await client.call_tool("get_user_profile", {"user_id": "bob"}),
            }

    out = run(body)
    for name in ("profile", "retrieve", "profile_again"):
        message = error_text(out[name])
        assert "memory.json" in message, message
        assert "not a valid" in message.lower(), message
        assert "untouched" in message.lower(), message
    assert corrupt.read_bytes() == corrupt_bytes
    assert corrupt.stat().st_mtime_ns == mtime
    assert snapshot(alice_dir) == alice_before, "no backup, temp or lock file may appear beside it"

    bob_page = ok(out["bob_add"])["page_id"]
    assert ids_of(ok(out["bob_retrieve"])["short_term_memory"]) == [bob_page]
    assert ok(out["bob_profile"])["user_id"] == "bob"
    assert "Traceback" not in stderr_of(errlog)


def test_an_os_error_in_the_store_is_a_clear_tool_error_and_the_server_keeps_serving(
    home: Path, errlog: TextIO
) -> None:
    """(Found by this suite: OSErrors outside the store's try blocks reached the host as a bare
    'Error executing tool add_memory'; fixed in 4021860.)"""
    # A regular file where carol's directory should be: every access to her memory fails with an
    # OSError. (The data dir cannot be made unwritable with chmod when the tests run as root.)
    (home / "users").mkdir(parents=True)
    blocker = home / "users" / "carol"
    blocker.write_bytes(b"not a directory")

    async def body() -> dict[str, Any]:
        async with connect(home, errlog=errlog) as client:
            return {
                "add": await client.call_tool("add_memory", exchange("carol speaks", "ok", user_id="carol")),
                "retrieve": await client.call_tool("retrieve_memory", {"query": "speaks", "user_id": "carol"}),
                "profile": await client.call_tool("get_user_profile", {"user_id": "carol"}),
                "bob_add": await client.call_tool("add_memory", exchange("bob speaks", "ok", user_id="bob")),
                "bob_retrieve": await client.call_tool("retrieve_memory", {"query": "speaks", "user_id": "bob"}),
            }

    out = run(body)
    for name in ("add", "retrieve", "profile"):
        message = error_text(out[name])
        # A clear message says whose memory could not be stored or read, and why.
        assert "carol" in message, f"{name}: {message}"
        assert re.search(r"not a directory|file exists", message, re.IGNORECASE), f"{name}: {message}"
    assert blocker.read_bytes() == b"not a directory"
    bob_page = ok(out["bob_add"])["page_id"]
    assert ids_of(ok(out["bob_retrieve"])["short_term_memory"]) == [bob_page]


# --- 9. command line: --help, bad config, no config ------------------------------------------


def run_cli(args: list[str], home: Path | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        server_command(extra_args=args),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=server_env(home),
        timeout=30,
    )


def test_help_exits_zero_and_prints_usage(home: Path) -> None:
    done = run_cli(["--help"], home)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:")
    for option in ("--config", "--log-level", "--transport"):
        assert option in done.stdout
    assert "MEMORY_MCP_HOME" in done.stdout
    assert not home.exists(), "--help must not create the data directory"


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"short_term_capacity": 0}, "short_term_capacity"),
        ({"short_term_capacity": "ten"}, "short_term_capacity"),
        ({"no_such_setting": 1}, "no_such_setting"),
        ({"user_id": "../etc"}, "user_id"),
        ({"memory": {"max_facts": 1}}, "memory.max_facts"),
        ({"memory": {"debounce": 3}}, "memory.debounce"),
    ],
    ids=["zero-capacity", "wrong-type", "unknown-key", "bad-user-id", "nested-bad-value", "nested-unknown-key"],
)
def test_bad_config_exits_non_zero_with_one_stderr_line_naming_the_field(
    home: Path, tmp_path: Path, settings: dict[str, Any], field: str
) -> None:
    config = write_config(tmp_path / "bad-config.json", {"data_storage_path": str(home), **settings})
    done = run_cli(["--config", str(config)], None)
    assert done.returncode != 0
    lines = done.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {done.stderr!r}"
    assert field in lines[0]
    assert done.stdout == "", "nothing may reach stdout, the protocol channel"
    assert not home.exists(), "a refused config must not create the data directory"


def test_config_file_that_is_not_json_is_refused_in_one_line(home: Path, tmp_path: Path) -> None:
    config = tmp_path / "broken.json"
    config.write_text('{"short_term_capacity": 3,', encoding="utf-8")
    done = run_cli(["--config", str(config)], home)
    assert done.returncode != 0
    assert len(done.stderr.splitlines()) == 1 and str(config) in done.stderr
    assert done.stdout == ""


def test_without_a_config_file_the_server_uses_memory_mcp_home(home: Path, tmp_path: Path, errlog: TextIO) -> None:
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()

    async def body() -> dict[str, Any]:
        async with connect(home, errlog=errlog, cwd=elsewhere) as client:
            return await add(client, "where am I stored?", "in MEMORY_MCP_HOME")

    added = run(body)
    pages = home / "users" / "default" / "pages.jsonl"
    records = [json.loads(line) for line in pages.read_text(encoding="utf-8").splitlines()]
    assert [r["page_id"] for r in records] == [added["page_id"]]
    assert records[0]["user_input"] == "where am I stored?"
    assert list(elsewhere.iterdir()) == [], "nothing is written to the working directory"


def test_config_file_data_storage_path_is_relative_to_the_config_file(
    home: Path, tmp_path: Path, errlog: TextIO
) -> None:
    config = write_config(tmp_path / "conf" / "config.json", {"data_storage_path": "data", "user_id": "owner"})
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()

    async def body() -> dict[str, Any]:
        async with connect(home, config=config, errlog=errlog, cwd=elsewhere) as client:
            return await add(client, "configured", "yes")

    added = run(body)
    assert added["user_id"] == "owner", "the config's user_id is the default user"
    assert (tmp_path / "conf" / "data" / "users" / "owner" / "pages.jsonl").is_file()
    assert not home.exists(), "MEMORY_MCP_HOME is not used when the config names a data path"
    assert list(elsewhere.iterdir()) == []
