"""Users own their memory, over the real stdio transport: `python server.py` as a subprocess.

Every ownership tool (search_facts, add_fact, update_fact, delete_fact, forget, export_memory,
import_memory, memory_status) and both resources, as a host calls them. Each test starts its own
server(s) on its own data directory; a server is shared only within one test.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import anyio
import pytest
from mcp import Client, MCPError
from sample_memory import DEERFLOW_MEMORY, TRIP
from scripted_llm import SCRIPTED_MODEL, ScriptedLLM, reply
from stdio_helpers import add, connect, error_text, ok, recall, run, snapshot, write_config

from memory_mcp.base.ids import IDENTIFIER_RULE

pytestmark = pytest.mark.integration

OWNERSHIP_TOOLS = {
    "search_facts",
    "add_fact",
    "update_fact",
    "delete_fact",
    "forget",
    "export_memory",
    "import_memory",
    "memory_status",
}
BAD_IDENTIFIERS = ["../x", "a/b", "alice\n", "a" * 129, ".bad.id"]


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool call that must succeed."""
    return ok(await client.call_tool(tool, arguments))


async def fails(client: Client, tool: str, **arguments: Any) -> str:
    """A tool call that must fail; its message."""
    return error_text(await client.call_tool(tool, arguments))


def user_paths(root: Path, user: str) -> list[str]:
    """Every path under the data dir that belongs to `user`."""
    return sorted(path for path in snapshot(root) if user in Path(path).parts)


def page_ids(pages: list[dict[str, Any]]) -> list[str]:
    return [page["page_id"] for page in pages]


# --- listing: tools and resource templates ------------------------------------------------------


def test_ownership_tools_and_resources_are_listed_and_resources_read_as_json(home: Path, errlog: TextIO) -> None:
    async def body() -> dict[str, Any]:
        async with connect(home, errlog=errlog) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            templates = (await client.list_resource_templates()).resource_templates
            added = await call(client, "add_fact", content="Likes green tea", user_id="alice", category="preference")
            await call(client, "add_fact", content="Works at the harbour", user_id="alice", confidence=0.7)
            replaced = await call(
                client, "update_fact", fact_id=added["fact"]["id"], content="Likes oolong tea", user_id="alice"
            )
            await add(client, "hello", "hi", user_id="alice")
            profile = await client.read_resource("memory://users/alice/profile")
            facts = await client.read_resource("memory://users/alice/facts")
            nobody = await client.read_resource("memory://users/nobody/facts")
            errors = []
            for uri in ("memory://users/.bad.id/profile", "memory://users/.bad.id/facts", "memory://users/a/b/facts"):
                with pytest.raises(MCPError) as caught:
                    await client.read_resource(uri)
                errors.append(str(caught.value))
            return {
                "tools": tools,
                "templates": templates,
                "profile": profile,
                "facts": facts,
                "nobody": nobody,
                "errors": errors,
                "replaced": replaced,
            }

    seen = run(body)
    tools = seen["tools"]
    assert OWNERSHIP_TOOLS <= set(tools), OWNERSHIP_TOOLS - set(tools)
    for name in OWNERSHIP_TOOLS:
        assert tools[name].description and tools[name].output_schema, name
        assert tools[name].annotations is not None, name
    for name in ("search_facts", "export_memory", "memory_status"):
        assert tools[name].annotations.read_only_hint is True, name
    for name in ("delete_fact", "forget_exchange", "forget", "import_memory"):
        assert tools[name].annotations.destructive_hint is True, name
    assert set(tools["forget"].input_schema["required"]) == {"user_id", "confirm"}
    assert set(tools["import_memory"].input_schema["required"]) == {"data"}

    templates = {template.uri_template: template for template in seen["templates"]}
    assert set(templates) == {"memory://users/{user_id}/profile", "memory://users/{user_id}/facts"}
    assert all(template.mime_type == "application/json" for template in templates.values())

    [profile_content] = seen["profile"].contents
    assert profile_content.mime_type == "application/json"
    profile = json.loads(profile_content.text)
    assert profile["user_id"] == "alice"
    assert {"user", "history", "facts"} <= set(profile)
    assert sorted(f["content"] for f in profile["facts"]) == ["Likes oolong tea", "Works at the harbour"]

    facts = json.loads(seen["facts"].contents[0].text)
    assert facts["user_id"] == "alice" and facts["total"] == 2
    assert [f["content"] for f in facts["facts"]] == ["Likes oolong tea", "Works at the harbour"], "current only"
    assert facts["facts"][0]["id"] == seen["replaced"]["fact"]["id"]
    assert json.loads(seen["nobody"].contents[0].text)["facts"] == []

    assert all(seen["errors"]), seen["errors"]
    assert user_paths(home, ".bad.id") == [] and user_paths(home, "nobody") == [], "reading writes nothing"


def test_a_resource_with_an_invalid_user_id_says_what_is_wrong(home: Path, errlog: TextIO) -> None:
    async def body() -> list[str]:
        messages = []
        async with connect(home, errlog=errlog) as client:
            for uri in ("memory://users/.bad.id/profile", "memory://users/.bad.id/facts"):
                with pytest.raises(MCPError) as caught:
                    await client.read_resource(uri)
                messages.append(str(caught.value))
        return messages

    for message in run(body):
        assert "user_id" in message and IDENTIFIER_RULE in message, message


# --- facts: search, add, update, delete -----------------------------------------------------------


def test_search_add_update_and_delete_facts_over_stdio(home: Path, errlog: TextIO) -> None:
    async def body() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with connect(home, errlog=errlog) as client:
            out["added"] = [
                await call(
                    client, "add_fact", content=content, category=category, confidence=confidence, user_id="alice"
                )
                for content, category, confidence in [
                    ("Likes green tea in the morning", "preference", 0.6),
                    ("Is training for the Berlin marathon", "goal", 0.95),
                    ("Drinks black tea when working", "behavior", 0.8),
                    ("Has a greyhound called Biscuit", "context", 0.7),
                ]
            ]
            out["duplicate"] = await call(
                client, "add_fact", content="  likes GREEN tea   in the MORNING ", user_id="alice"
            )
            out["agent_fact"] = await call(
                client, "add_fact", content="Prefers terse answers", user_id="alice", agent_name="bot"
            )
            out["all"] = await call(client, "search_facts", user_id="alice")
            out["tea"] = await call(client, "search_facts", query="green tea", user_id="alice")
            out["goal"] = await call(client, "search_facts", category="goal", user_id="alice")
            out["limited"] = await call(client, "search_facts", limit=2, user_id="alice")
            out["agent"] = await call(client, "search_facts", agent_name="bot", user_id="alice")

            tea, marathon, black, dog = (a["fact"] for a in out["added"])
            out["in_place"] = await call(
                client, "update_fact", fact_id=dog["id"], category="knowledge", user_id="alice"
            )
            out["confidence"] = await call(client, "update_fact", fact_id=dog["id"], confidence=0.5, user_id="alice")
            out["replaced"] = await call(
                client, "update_fact", fact_id=tea["id"], content="Likes jasmine tea in the evening", user_id="alice"
            )
            new_id = out["replaced"]["fact"]["id"]
            out["current"] = await call(client, "search_facts", user_id="alice")
            out["history"] = await call(client, "search_facts", include_superseded=True, user_id="alice")
            out["recall"] = await recall(client, "what tea do I like?", user_id="alice")
            out["export"] = await call(client, "export_memory", user_id="alice")

            before = snapshot(home)
            out["errors"] = {
                "superseded": await fails(client, "update_fact", fact_id=tea["id"], confidence=0.9, user_id="alice"),
                "unknown_update": await fails(client, "update_fact", fact_id="fact_nope", content="x", user_id="alice"),
                "unknown_delete": await fails(client, "delete_fact", fact_id="fact_nope", user_id="alice"),
                "nothing_to_change": await fails(client, "update_fact", fact_id=dog["id"], user_id="alice"),
                "same_as_other": await fails(
                    client, "update_fact", fact_id=dog["id"], content="drinks BLACK tea when working", user_id="alice"
                ),
                "blank": await fails(client, "add_fact", content="   ", user_id="alice"),
                "bad_confidence": await fails(client, "add_fact", content="x", confidence=1.5, user_id="alice"),
                "bad_category": await fails(client, "add_fact", content="x", category="gossip", user_id="alice"),
                "other_scope": await fails(
                    client, "delete_fact", fact_id=out["agent_fact"]["fact"]["id"], user_id="alice"
                ),
            }
            out["unchanged"] = snapshot(home) == before

            out["deleted"] = await call(client, "delete_fact", fact_id=new_id, user_id="alice")
            out["after_delete"] = await call(client, "search_facts", include_superseded=True, user_id="alice")
            out["export_after_delete"] = await call(client, "export_memory", user_id="alice")
            out["kept"] = (marathon["id"], black["id"], dog["id"], tea["id"], new_id)
        return out

    out = run(body)
    added = [a["fact"] for a in out["added"]]
    assert [a["action"] for a in out["added"]] == ["added"] * 4
    assert all(f["source"] == "manual" and f["createdAt"] and f.get("validTo") is None for f in added)
    assert len({f["id"] for f in added}) == 4
    tea, marathon, black, dog = added

    assert out["duplicate"]["action"] == "duplicate"
    assert out["duplicate"]["fact"]["id"] == tea["id"]
    assert out["all"]["total"] == 4, "a duplicate is not added twice"

    # No query: by confidence. A query: best match first, facts sharing no word left out.
    assert [f["id"] for f in out["all"]["facts"]] == [marathon["id"], black["id"], dog["id"], tea["id"]]
    assert [f["id"] for f in out["tea"]["facts"]] == [tea["id"], black["id"]]
    assert out["tea"]["facts"][0]["score"] > out["tea"]["facts"][1]["score"]
    assert [f["id"] for f in out["goal"]["facts"]] == [marathon["id"]]
    assert (len(out["limited"]["facts"]), out["limited"]["total"]) == (2, 4)
    assert [f["content"] for f in out["agent"]["facts"]] == ["Prefers terse answers"]
    assert out["agent_fact"]["fact"]["id"] not in {f["id"] for f in out["all"]["facts"]}

    # Category or confidence alone: edited in place, everything else kept.
    in_place = out["in_place"]
    assert in_place["action"] == "updated"
    assert {**dog, "category": "knowledge"} == in_place["fact"]
    assert out["confidence"]["fact"] == {**dog, "category": "knowledge", "confidence": 0.5}

    # New content: a new fact replaces the old, which is kept as superseded.
    replaced = out["replaced"]
    assert replaced["action"] == "replaced"
    new = replaced["fact"]
    assert new["id"] != tea["id"] and new["content"] == "Likes jasmine tea in the evening"
    assert (new["category"], new["confidence"], new["source"]) == ("preference", 0.6, "manual"), "omitted fields kept"
    assert tea["id"] in replaced["message"] and new["id"] in replaced["message"]
    current_ids = {f["id"] for f in out["current"]["facts"]}
    assert new["id"] in current_ids and tea["id"] not in current_ids
    old = next(f for f in out["history"]["facts"] if f["id"] == tea["id"])
    assert old["supersededBy"] == new["id"] and old["validTo"]
    assert old["content"] == tea["content"]
    recalled = out["recall"]
    assert tea["id"] not in {f["id"] for f in recalled["retrieved_user_knowledge"]}
    assert new["id"] in {f["id"] for f in recalled["retrieved_user_knowledge"]}
    assert "Likes jasmine tea in the evening" in recalled["context"]
    assert "green tea" not in recalled["context"]
    exported = {f["id"]: f for f in out["export"]["memory"]["facts"]}
    assert exported[tea["id"]]["supersededBy"] == new["id"] and exported[tea["id"]]["validTo"]

    errors = out["errors"]
    assert tea["id"] in errors["superseded"] and new["id"] in errors["superseded"]
    assert "fact_nope" in errors["unknown_update"] and "fact_nope" in errors["unknown_delete"]
    assert "content" in errors["nothing_to_change"]
    assert black["id"] in errors["same_as_other"]
    assert "content" in errors["blank"]
    assert "confidence" in errors["bad_confidence"] and "category" in errors["bad_category"]
    assert out["agent_fact"]["fact"]["id"] in errors["other_scope"], "a fact of the agent is not the user's"
    assert out["unchanged"], "failed calls wrote nothing"

    # Deleting the current version erases the versions it superseded too.
    assert out["deleted"]["action"] == "deleted" and out["deleted"]["fact"]["id"] == new["id"]
    left = {f["id"] for f in out["after_delete"]["facts"]}
    assert left == {marathon["id"], black["id"], dog["id"]}
    assert {f["id"] for f in out["export_after_delete"]["memory"]["facts"]} == left


# --- forget and memory_status -----------------------------------------------------------------------


def test_forget_needs_confirmation_then_erases_the_user_and_all_their_agents(home: Path, errlog: TextIO) -> None:
    async def body() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with connect(home, errlog=errlog) as client:
            for user, agent in (("alice", None), ("alice", None), ("alice", "bot"), ("alice", "helper"), ("bob", None)):
                await add(client, f"hello from {user}", "hi", user_id=user, agent_name=agent, thread_id="t1")
            await call(client, "add_fact", content="Likes tea", user_id="alice")
            await call(client, "add_fact", content="Bot fact", user_id="alice", agent_name="bot")
            await call(client, "add_fact", content="Bob likes coffee", user_id="bob")
            out["status"] = await call(client, "memory_status")

            before = snapshot(home)
            out["refused"] = [
                await fails(client, "forget", user_id="alice", confirm="bob"),
                await fails(client, "forget", user_id="alice", confirm=""),
                await fails(client, "forget", user_id="alice", confirm="ALICE"),
            ]
            out["unknown_user"] = await fails(client, "forget", user_id="ghost", confirm="ghost")
            out["unknown_agent"] = await fails(client, "forget", user_id="alice", confirm="alice", agent_name="nobot")
            out["unknown_export"] = await fails(client, "export_memory", user_id="ghost")
            out["unknown_agent_export"] = await fails(client, "export_memory", user_id="alice", agent_name="nobot")
            out["unchanged"] = snapshot(home) == before

            bob_before = {p: e for p, e in snapshot(home).items() if "bob" in Path(p).parts}
            out["agent_only"] = await call(client, "forget", user_id="alice", confirm="alice", agent_name="helper")
            out["after_agent"] = await call(client, "export_memory", user_id="alice")
            out["forgotten"] = await call(client, "forget", user_id="alice", confirm="alice")
            out["left"] = user_paths(home, "alice")
            out["status_after"] = await call(client, "memory_status")
            out["recall_after"] = await recall(client, "hello", user_id="alice")
            out["export_after"] = await fails(client, "export_memory", user_id="alice")
            out["bob_unchanged"] = {p: e for p, e in snapshot(home).items() if "bob" in Path(p).parts} == bob_before
        return out

    out = run(body)
    status = out["status"]
    assert status["data_dir"] == str(home)
    assert status["version"] and status["llm_configured"] is False and status["extraction"] == "off"
    assert status["token_counter"] in ("tiktoken", "char")
    users = {u["user_id"]: u for u in status["users"]}
    assert set(users) == {"alice", "bob"}
    assert users["alice"]["agents"] == ["bot", "helper"]
    assert (users["alice"]["pages"], users["alice"]["facts"], users["alice"]["pending_pages"]) == (4, 2, 4)
    assert (users["bob"]["pages"], users["bob"]["facts"]) == (1, 1)

    assert all("confirm" in message and "alice" in message for message in out["refused"]), out["refused"]
    assert "ghost" in out["unknown_user"] and "ghost" in out["unknown_export"]
    assert "nobot" in out["unknown_agent"] and "nobot" in out["unknown_agent_export"]
    assert out["unchanged"], "refused calls erased or wrote something"

    assert out["agent_only"]["agent_name"] == "helper" and out["agent_only"]["removed_pages"] == 1
    assert set(out["after_agent"]["agents"]) == {"bot"}, "forgetting one agent keeps the user and other agents"
    assert len(out["after_agent"]["pages"]) == 2

    forgotten = out["forgotten"]
    assert (forgotten["removed_pages"], forgotten["removed_facts"]) == (3, 2)
    assert out["left"] == [], f"files of the forgotten user remain: {out['left']}"
    assert [u["user_id"] for u in out["status_after"]["users"]] == ["bob"]
    assert out["recall_after"]["short_term_memory"] == [] and out["recall_after"]["retrieved_user_knowledge"] == []
    assert "alice" in out["export_after"]
    assert out["bob_unchanged"]
    assert user_paths(home, "alice") == [], "reading a forgotten user recreated files"


UPDATE_WITH_FACT = {
    "user": {"workContext": {"summary": "Plans trips to Kyoto", "shouldUpdate": True}},
    "history": {},
    "newFacts": [{"content": "Is planning a Kyoto trip", "category": "goal", "confidence": 0.9}],
    "factsToRemove": [],
}


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    # Each update takes a while, so one is still running when forget is called.
    server = ScriptedLLM(default=reply(UPDATE_WITH_FACT, delay=0.6)).start()
    yield server
    server.stop()


def test_forget_with_an_llm_and_pending_work_leaves_no_file_of_the_user(
    home: Path, tmp_path: Path, errlog: TextIO, llm: ScriptedLLM
) -> None:
    config = write_config(
        tmp_path / "config.json",
        {
            "data_storage_path": str(home),
            "openai_base_url": llm.base_url,
            "llm_model": SCRIPTED_MODEL,
            "openai_api_key": "test-key",
            "memory": {
                "debounce_seconds": 0.2,
                "shutdown_flush_seconds": 2,
                "llm_timeout_seconds": 10,
                "llm_max_attempts": 1,
            },
        },
    )

    async def body() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with connect(home, config=config, errlog=errlog) as client:
            for n in range(3):
                await add(
                    client, f"I am planning a Kyoto trip, part {n}", "Sounds great", user_id="alice", thread_id="trip"
                )
            await add(
                client, "Agent-only chat about Kyoto", "Noted", user_id="alice", agent_name="guide", thread_id="g"
            )
            await add(client, "Bob talks about Oslo", "Nice", user_id="bob", thread_id="b")
            deadline = time.monotonic() + 10
            while not llm.requests and time.monotonic() < deadline:
                await anyio.sleep(0.05)
            out["llm_started"] = bool(llm.requests)
            # More pending work, not yet due: a timer that must not bring the user back.
            await add(client, "One more thing about Kyoto", "Tell me", user_id="alice", thread_id="later")
            out["status"] = await call(client, "memory_status")
            out["forgotten"] = await call(client, "forget", user_id="alice", confirm="alice")
            out["left_at_once"] = user_paths(home, "alice")
            await anyio.sleep(2)  # every timer and in-flight update has had its chance by now
            out["left_later"] = user_paths(home, "alice")
            out["status_after"] = await call(client, "memory_status")
        out["left_after_exit"] = user_paths(home, "alice")
        return out

    out = run(body, timeout=60)
    assert out["llm_started"], "an update was running when forget was called"
    status = out["status"]
    assert status["llm_configured"] is True and status["extraction"] == "server"
    assert status["llm_base_url"] == llm.base_url
    assert out["forgotten"]["removed_pages"] == 5
    assert out["left_at_once"] == []
    assert out["left_later"] == [], f"files came back after forget: {out['left_later']}"
    assert out["left_after_exit"] == []
    assert [u["user_id"] for u in out["status_after"]["users"]] == ["bob"]
    assert (home / "users" / "bob" / "pages.jsonl").exists()


# --- export and import ---------------------------------------------------------------------------


async def seed(client: Client, user: str = "alice") -> dict[str, Any]:
    """Pages in several threads with meta_data, facts (one superseded) and an agent's own memory."""
    texts = TRIP
    pages = []
    for number, (user_input, agent_response, thread) in enumerate(texts):
        fields: dict[str, Any] = {
            "timestamp": f"2024-03-{number + 1:02d} 09:00:00",
            "meta_data": {"n": number, "l": [1.5, None]},
        }
        if thread:
            fields["thread_id"] = thread
        pages.append((await add(client, user_input, agent_response, user_id=user, **fields))["page_id"])
    tea = await call(client, "add_fact", content="Likes green tea", category="preference", user_id=user)
    await call(client, "add_fact", content="Is planning a Kyoto trip", category="goal", confidence=0.8, user_id=user)
    newer = await call(client, "update_fact", fact_id=tea["fact"]["id"], content="Likes oolong tea", user_id=user)
    agent_page = await add(
        client,
        "Call me captain when we talk about Kyoto",
        "Aye, captain.",
        user_id=user,
        agent_name="bot",
        thread_id="deck",
    )
    await call(client, "add_fact", content="Wants to be called captain", user_id=user, agent_name="bot")
    return {
        "pages": pages,
        "old_fact": tea["fact"]["id"],
        "new_fact": newer["fact"]["id"],
        "agent_page": agent_page["page_id"],
    }


QUERIES = ["Kyoto temples", "quarterly report charts", "road bike plants"]


async def recall_all(client: Client, user: str = "alice") -> dict[str, Any]:
    results = {}
    for query in QUERIES:
        result = await recall(client, query, user_id=user)
        results[query] = {
            "retrieved": page_ids(result["retrieved_pages"]),
            "pages": [{k: v for k, v in p.items() if k != "score"} for p in result["retrieved_pages"]],
            "short_term": page_ids(result["short_term_memory"]),
            "facts": [
                (f["id"], f["content"], f["category"], f["confidence"]) for f in result["retrieved_user_knowledge"]
            ],
        }
    agent = await recall(client, "Kyoto captain", user_id=user, agent_name="bot")
    results["agent"] = {
        "short_term": page_ids(agent["short_term_memory"]),
        "facts": [f["id"] for f in agent["retrieved_user_knowledge"]],
    }
    return results


def test_round_trip_export_forget_import_and_into_an_empty_data_dir(home: Path, tmp_path: Path, errlog: TextIO) -> None:
    settings = {"short_term_capacity": 3}  # so retrieval ranks the older exchanges
    config = write_config(tmp_path / "config.json", {**settings, "data_storage_path": str(home)})
    fresh = tmp_path / "fresh-data"
    fresh_config = write_config(tmp_path / "fresh.json", {**settings, "data_storage_path": str(fresh)})

    async def body() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with connect(home, config=config, errlog=errlog) as client:
            out["ids"] = await seed(client)
            out["before"] = await recall_all(client)
            out["facts_before"] = await call(client, "search_facts", include_superseded=True, user_id="alice")
            out["export"] = await call(client, "export_memory", user_id="alice")
            await call(client, "forget", user_id="alice", confirm="alice")
            out["left"] = user_paths(home, "alice")
            out["imported"] = await call(client, "import_memory", data=out["export"])
            out["after"] = await recall_all(client)
            out["facts_after"] = await call(client, "search_facts", include_superseded=True, user_id="alice")
            out["export_again"] = await call(client, "export_memory", user_id="alice")
        async with connect(home, config=fresh_config, errlog=errlog) as client:
            out["fresh_imported"] = await call(client, "import_memory", data=out["export"])
            out["fresh"] = await recall_all(client)
            out["fresh_export"] = await call(client, "export_memory", user_id="alice")
        return out

    out = run(body)
    before = out["before"]
    assert before["Kyoto temples"]["retrieved"], "the query must retrieve older exchanges"
    assert before["Kyoto temples"]["retrieved"][0] in out["ids"]["pages"]
    assert out["left"] == []
    imported = out["imported"]
    assert (imported["pages_added"], imported["facts_added"], imported["agents"]) == (9, 4, ["bot"])

    assert out["after"] == before, "same pages, same order, same facts after export, forget, import"
    assert out["facts_after"]["facts"] == out["facts_before"]["facts"]
    assert out["export_again"]["pages"] == out["export"]["pages"]
    assert out["export_again"]["agents"]["bot"]["pages"] == out["export"]["agents"]["bot"]["pages"]

    assert out["fresh"] == before, "an empty data dir reproduces the same retrieval results"
    assert page_ids(out["fresh_export"]["pages"]) == out["ids"]["pages"]
    assert out["fresh_export"]["memory"]["facts"] == out["export"]["memory"]["facts"]


def test_export_document_and_import_validation_merge_replace_and_other_user(home: Path, errlog: TextIO) -> None:
    async def body() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with connect(home, errlog=errlog) as client:
            out["ids"] = await seed(client)
            document = out["export"] = await call(client, "export_memory", user_id="alice")
            out["agent_export"] = await call(client, "export_memory", user_id="alice", agent_name="bot")

            def broken(change: Any) -> dict[str, Any]:
                copied = copy.deepcopy(document)
                change(copied)
                return copied

            invalid = {
                "wrong format": broken(lambda d: d.update(format="other/format")),
                "bad user id": broken(lambda d: d.update(user_id="../bob")),
                "duplicate page ids": broken(lambda d: d["pages"].append(dict(d["pages"][0]))),
                "bad timestamp": broken(lambda d: d["pages"][3].update(timestamp="31/12/2024")),
                "deep wrong type": broken(lambda d: d["memory"]["facts"][1].update(confidence="sure")),
                "agent page wrong type": broken(lambda d: d["agents"]["bot"]["pages"][0].update(meta_data="text")),
                "extra key": broken(lambda d: d.update(comment="hand edited")),
            }
            before = snapshot(home)
            out["errors"] = {}
            for name, data in invalid.items():
                for mode in ("merge", "replace"):
                    out["errors"][name, mode] = await fails(client, "import_memory", data=data, mode=mode)
            out["errors"]["bad target", "merge"] = await fails(client, "import_memory", data=document, user_id="a/b")
            out["errors"]["bad mode", "x"] = await fails(client, "import_memory", data=document, mode="overwrite")
            out["unchanged"] = snapshot(home) == before

            out["merged_again"] = await call(client, "import_memory", data=document)
            out["unchanged_by_merge"] = (await call(client, "export_memory", user_id="alice"))["pages"] == document[
                "pages"
            ]

            out["other_user"] = await call(client, "import_memory", data=document, user_id="carol")
            out["carol"] = await call(client, "export_memory", user_id="carol")

            await add(client, "Said after the export", "ok", user_id="alice")
            await call(client, "add_fact", content="Learned after the export", user_id="alice")
            no_agents = {**document, "agents": {}}
            out["replaced"] = await call(client, "import_memory", data=no_agents, mode="replace")
            out["after_replace"] = await call(client, "export_memory", user_id="alice")
        return out

    out = run(body)
    document, ids = out["export"], out["ids"]
    assert set(document) == {"format", "version", "exported_at", "user_id", "agent_name", "memory", "pages", "agents"}
    assert (document["format"], document["version"], document["user_id"], document["agent_name"]) == (
        "memory-mcp/export",
        1,
        "alice",
        None,
    )
    assert page_ids(document["pages"]) == ids["pages"]
    first = document["pages"][0]
    assert set(first) >= {"page_id", "user_input", "agent_response", "timestamp", "meta_data", "thread_id"}
    assert (first["timestamp"], first["thread_id"], first["meta_data"]) == (
        "2024-03-01T09:00:00Z",
        "trip",
        {"n": 0, "l": [1.5, None]},
    )
    assert document["pages"][4]["thread_id"] is None
    facts = {f["id"]: f for f in document["memory"]["facts"]}
    assert facts[ids["old_fact"]]["supersededBy"] == ids["new_fact"], "superseded facts are exported"
    assert list(document["agents"]) == ["bot"]
    bot = document["agents"]["bot"]
    assert page_ids(bot["pages"]) == [ids["agent_page"]] and bot["pages"][0]["thread_id"] == "deck"
    assert [f["content"] for f in bot["memory"]["facts"]] == ["Wants to be called captain"]
    assert (out["agent_export"]["agent_name"], out["agent_export"]["agents"]) == ("bot", {})

    errors = out["errors"]
    expected = {
        "wrong format": "memory-mcp/export",
        "bad user id": "user_id",
        "duplicate page ids": "appears twice",
        "bad timestamp": "31/12/2024",
        "deep wrong type": "memory.facts.1.confidence",
        "agent page wrong type": "agents.bot.pages.0.meta_data",
        "extra key": "comment",
        "bad target": "user_id",
        "bad mode": "mode",
    }
    for (name, mode), message in errors.items():
        assert expected[name] in message, f"{name} ({mode}): {message}"
    assert out["unchanged"], "an invalid import changed the data dir"

    merged = out["merged_again"]
    assert (merged["pages_added"], merged["facts_added"]) == (0, 0)
    assert (merged["pages_skipped"], merged["facts_skipped"]) == (9, 4)
    assert out["unchanged_by_merge"]

    assert out["other_user"]["user_id"] == "carol"
    carol = out["carol"]
    assert carol["user_id"] == "carol" and carol["pages"] == document["pages"]
    assert carol["memory"]["facts"] == document["memory"]["facts"] and list(carol["agents"]) == ["bot"]

    assert out["replaced"]["mode"] == "replace"
    after_replace = out["after_replace"]
    assert after_replace["pages"] == document["pages"], "replace erases what was added after the export"
    assert after_replace["memory"]["facts"] == document["memory"]["facts"]
    assert after_replace["agents"] == {}, "replacing a whole user erases their agents too"


def test_replace_import_after_forget_restores_the_user(home: Path, errlog: TextIO) -> None:
    async def body() -> tuple[dict[str, Any], Any, list[str]]:
        async with connect(home, errlog=errlog) as client:
            await seed(client)
            document = await call(client, "export_memory", user_id="alice")
            await call(client, "forget", user_id="alice", confirm="alice")
            result = await client.call_tool("import_memory", {"data": document, "mode": "replace"})
            users = [u["user_id"] for u in (await call(client, "memory_status"))["users"]]
            return document, result, users

    document, result, users = run(body)
    assert ok(result)["pages_added"] == len(document["pages"]) + 1
    assert users == ["alice"]


def test_deerflow_memory_json_imports_through_the_tool(home: Path, errlog: TextIO) -> None:
    async def body() -> dict[str, Any]:
        async with connect(home, errlog=errlog) as client:
            result = await call(client, "import_memory", data=DEERFLOW_MEMORY, user_id="dana")
            again = await call(client, "import_memory", data=DEERFLOW_MEMORY, user_id="dana")
            profile = json.loads((await client.read_resource("memory://users/dana/profile")).contents[0].text)
            facts = await call(client, "search_facts", category="preference", user_id="dana")
            exported = await call(client, "export_memory", user_id="dana")
            return {"result": result, "again": again, "profile": profile, "facts": facts, "export": exported}

    out = run(body)
    assert (out["result"]["user_id"], out["result"]["facts_added"], out["result"]["pages_added"]) == ("dana", 2, 0)
    assert (out["again"]["facts_added"], out["again"]["facts_skipped"]) == (0, 2)
    profile = out["profile"]
    for group, name in (
        ("user", "workContext"),
        ("user", "personalContext"),
        ("history", "recentMonths"),
        ("history", "longTermBackground"),
    ):
        assert profile[group][name] == DEERFLOW_MEMORY[group][name], (group, name)
    by_id = {f["id"]: f for f in profile["facts"]}
    assert by_id["fact_df2"]["sourceError"] == "said three cats at first"
    assert by_id["fact_df1"]["source"] == "thread-42"
    assert [f["id"] for f in out["facts"]["facts"]] == ["fact_df1"]
    exported = out["export"]["memory"]["facts"]
    assert [{key: f[key] for key in original} for f, original in zip(exported, DEERFLOW_MEMORY["facts"])] == (
        DEERFLOW_MEMORY["facts"]
    ), "facts arrive exactly as written"
    assert len(exported) == 2
    assert out["export"]["pages"] == []


# --- bad user ids: every tool refuses, nothing is written ---------------------------------------------


def test_bad_user_ids_are_refused_by_every_ownership_tool_and_nothing_is_written(home: Path, errlog: TextIO) -> None:
    async def body() -> tuple[list[tuple[str, str, str]], bool, dict[str, Any]]:
        messages = []
        async with connect(home, errlog=errlog) as client:
            await add(client, "hello", "hi", user_id="alice")
            fact = await call(client, "add_fact", content="Likes tea", user_id="alice")
            document = await call(client, "export_memory", user_id="alice")
            before = snapshot(home)
            fact_id = fact["fact"]["id"]
            for bad in BAD_IDENTIFIERS:
                calls = [
                    ("search_facts", {"user_id": bad}),
                    ("add_fact", {"content": "x", "user_id": bad}),
                    ("add_fact", {"content": "x", "user_id": "alice", "agent_name": bad}),
                    ("update_fact", {"fact_id": fact_id, "content": "y", "user_id": bad}),
                    ("delete_fact", {"fact_id": fact_id, "user_id": bad}),
                    ("forget", {"user_id": bad, "confirm": bad}),
                    ("forget", {"user_id": "alice", "confirm": "alice", "agent_name": bad}),
                    ("export_memory", {"user_id": bad}),
                    ("import_memory", {"data": document, "user_id": bad}),
                    ("import_memory", {"data": {**document, "user_id": bad}}),
                    ("import_memory", {"data": {**document, "agents": {bad: {"memory": {}, "pages": []}}}}),
                ]
                for tool, arguments in calls:
                    messages.append((tool, bad, await fails(client, tool, **arguments)))
            unchanged = snapshot(home) == before
            status = await call(client, "memory_status")
        return messages, unchanged, status

    messages, unchanged, status = run(body)
    for tool, bad, message in messages:
        assert IDENTIFIER_RULE in message, f"{tool} with {bad!r}: {message}"
        assert any(name in message for name in ("user_id", "agent_name", "agents key")), f"{tool}: {message}"
    assert unchanged, "a refused call wrote to the data dir"
    assert [u["user_id"] for u in status["users"]] == ["alice"]
