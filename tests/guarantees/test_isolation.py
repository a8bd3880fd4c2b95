"""One user's data never reaches another user's results, profile, context, export or error text.

A hypothesis property over random pairs of users A and B, each with an agent (the agent names may
coincide): every scope's texts carry marker tokens of their own; after interleaved exchanges,
facts and profile sections for all four scopes, nothing one scope is shown (retrieve_memory with
its context, get_user_profile, search_facts, export_memory, its memory_status entry, the
memory://users/... resources, and the error texts of its failing calls) holds another scope's
marker. The one deliberate exception: a whole user's export includes that user's agents.
Then forget(A) must leave B exactly as it was.

All calls go through the MCP layer (the SDK's in-process client). Building a server costs ~0.1 s,
so one server serves every example and each example swaps in a fresh service on a fresh
directory (ServiceSwitch).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client, MCPError
from stdio_helpers import error_text, ok, result_json, snapshot

from memory_mcp.base.settings import Settings
from memory_mcp.mcp.server import build_server
from memory_mcp.models import MemoryDocument, Section
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope, durable

VOCABULARY = ["tea", "harbour", "bees", "lisbon", "garden", "project", "deadline", "sister", "piano", "correction"]
QUERY = " ".join(VOCABULARY)
SECTIONS = {
    "user": ("workContext", "personalContext", "topOfMind"),
    "history": ("recentMonths", "earlierContext", "longTermBackground"),
}


class ServiceSwitch:
    """Stands in for the MemoryService under one built server; `target` is swapped per example."""

    # What the server is built with, before any target exists: its instructions ask the host for facts.
    extraction_on = False

    def __init__(self) -> None:
        self.target: MemoryService | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)


@dataclass
class Env:
    portal: BlockingPortal
    switch: ServiceSwitch
    client: Client
    base: Path
    examples: int = 0

    def fresh(self, **settings: Any) -> MemoryService:
        root = Path(tempfile.mkdtemp(dir=self.base)) / "data"
        service = MemoryService(Settings(data_storage_path=root, short_term_capacity=2, **settings))
        if self.switch.target is not None:
            self.switch.target.close()
        self.switch.target = service
        return service

    def call(self, tool: str, **arguments: Any) -> Any:
        arguments = {key: value for key, value in arguments.items() if value is not None}
        return self.portal.call(self.client.call_tool, tool, arguments)

    def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        return ok(self.call(tool, **arguments))

    def resource(self, uri: str) -> str:
        try:
            result = self.portal.call(self.client.read_resource, uri)
        except MCPError as exc:
            return f"error: {exc}"
        return "\n".join(getattr(content, "text", "") for content in result.contents)


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes happen as always but are not forced to the disk: isolation is about which data
    reaches whom, and durability has its own tests."""
    monkeypatch.setattr(durable.os, "fsync", lambda fd: None)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    switch = ServiceSwitch()
    server = build_server(switch)  # type: ignore[arg-type]  # duck-typed: every call is forwarded
    with start_blocking_portal() as portal:
        client_cm = portal.wrap_async_context_manager(Client(server))
        client = client_cm.__enter__()
        try:
            yield Env(portal, switch, client, tmp_path_factory.mktemp("isolation"))
        finally:
            client_cm.__exit__(None, None, None)
            if switch.target is not None:
                switch.target.close()


# --- the world of one example -------------------------------------------------------------------


@dataclass
class Plan:
    user_a: str
    user_b: str
    agent_a: str
    agent_b: str
    operations: list[tuple[int, str, list[str]]]  # (scope number, kind, words)
    markers: list[str]  # one per operation, unique
    section_markers: list[str]  # one per scope

    @property
    def scopes(self) -> list[Scope]:
        return [
            Scope(self.user_a),
            Scope(self.user_a, self.agent_a),
            Scope(self.user_b),
            Scope(self.user_b, self.agent_b),
        ]


@dataclass
class Stored:
    markers: dict[Scope, set[str]] = field(default_factory=dict)
    facts: dict[Scope, list[str]] = field(default_factory=dict)  # fact ids


identifiers = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    user_a = draw(identifiers)
    user_b = draw(
        st.one_of(
            identifiers,
            st.just(user_a + "-x"),  # A is a prefix of B
            st.just(user_a[:-1] or "z"),  # B is a prefix of A
            st.just(user_a.swapcase()),  # the same id in other case: apart on every filesystem?
            st.just(user_a + "_"),
        ).filter(lambda b: b != user_a and len(b) <= 64)
    )
    agent_a = draw(st.sampled_from(["helper", "bot", user_b[:64]]))
    agent_b = draw(st.sampled_from(["helper", agent_a, "other", user_a[:64]]))
    count = draw(st.integers(4, 12))
    noise = st.text(st.characters(codec="utf-8", categories=["L", "N", "P", "Zs"]), max_size=15)
    operations = [
        (
            draw(st.integers(0, 3)),
            draw(st.sampled_from(["page", "page", "fact", "correction"])),
            # Shared words, so that every scope's query matches every other scope's texts; and noise.
            [*draw(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=4)), draw(noise)],
        )
        for _ in range(count)
    ]
    tokens = draw(
        st.lists(
            st.text(alphabet="bcdfghjklmnpqrstvwxz", min_size=10, max_size=10),
            min_size=count + 4,
            max_size=count + 4,
            unique=True,
        )
    )
    markers = [f"mk{token}" for token in tokens]
    return Plan(user_a, user_b, agent_a, agent_b, operations, markers[:count], markers[count:])


def store_plan(env: Env, service: MemoryService, plan: Plan) -> Stored:
    stored = Stored({scope: set() for scope in plan.scopes}, {scope: [] for scope in plan.scopes})
    for (number, kind, words), marker in zip(plan.operations, plan.markers):
        scope = plan.scopes[number]
        identity = {"user_id": scope.user_id, "agent_name": scope.agent_name}
        text = f"{' '.join(words)} {marker}"
        if kind == "page":
            env.ok(
                "add_memory",
                user_input=text,
                agent_response=f"noted {marker}",
                meta_data={"note": marker},
                thread_id=f"thread-{marker}",
                **identity,
            )
        else:
            category = "correction" if kind == "correction" else "knowledge"
            added = env.ok("add_fact", content=text, category=category, **identity)
            stored.facts[scope].append(added["fact"]["id"])
        stored.markers[scope].add(marker)
    for scope, marker in zip(plan.scopes, plan.section_markers):
        # Profile sections are the updater's to write; the store writes them here, as it would.
        def with_sections(document: MemoryDocument, marker: str = marker) -> MemoryDocument:
            updates = {}
            for group, names in SECTIONS.items():
                sections = getattr(document, group).model_copy()
                for name in names:
                    setattr(sections, name, Section(summary=f"{QUERY} {marker}", updatedAt="2024-05-01T00:00:00Z"))
                updates[group] = sections
            return document.model_copy(update=updates)

        service.store.update_document(scope, with_sections)
        stored.markers[scope].add(marker)
    return stored


def views(env: Env, scope: Scope, foreign_facts: list[str]) -> dict[str, str]:
    """Everything `scope`'s caller is shown, by where it was shown."""
    identity = {"user_id": scope.user_id, "agent_name": scope.agent_name}
    seen = {
        "retrieve_memory": result_json(
            env.call(
                "retrieve_memory",
                query=QUERY,
                current_context=QUERY,
                max_tokens=8000,
                max_results=100,
                include_archived=True,
                **identity,
            )
        ),
        "get_user_profile": result_json(
            env.call("get_user_profile", include_knowledge=True, include_assistant_knowledge=True, **identity)
        ),
        "search_facts": result_json(
            env.call("search_facts", query=QUERY, include_superseded=True, limit=500, **identity)
        ),
        "search_facts(all)": result_json(env.call("search_facts", include_superseded=True, limit=500, **identity)),
        "flush_memory": result_json(env.call("flush_memory", **identity)),
        "export_memory": result_json(env.call("export_memory", **identity)),
    }
    status = ok(env.call("memory_status"))
    entry = [user for user in status["users"] if user["user_id"] == scope.user_id]
    seen["memory_status entry"] = json.dumps(entry, ensure_ascii=False)
    if scope.agent_name is None:
        for kind in ("profile", "facts"):
            seen[f"memory://users/{scope.user_id}/{kind}"] = env.resource(f"memory://users/{scope.user_id}/{kind}")
    # Failing calls: their error texts may echo what the caller sent, never what others stored.
    for number, fact_id in enumerate(foreign_facts):
        for tool, extra in (
            ("update_fact", {"content": f"{QUERY} changed"}),
            ("update_fact", {"confidence": 0.1}),
            ("delete_fact", {}),
        ):
            result = env.call(tool, fact_id=fact_id, **identity, **extra)
            seen[f"{tool} of another scope's fact #{number}"] = error_text(result)
    failing = {
        "forget (unconfirmed)": env.call(
            "forget", user_id=scope.user_id, agent_name=scope.agent_name, confirm=f"{scope.user_id}-not"
        ),
        "export_memory (no such agent)": env.call("export_memory", user_id=scope.user_id, agent_name="nosuchagent"),
        "retrieve_memory (bad budget)": env.call("retrieve_memory", query=QUERY, max_tokens=5, **identity),
        "add_fact (blank)": env.call("add_fact", content="   ", **identity),
    }
    for name, result in failing.items():
        seen[name] = error_text(result)
    return seen


def allowed_markers(plan: Plan, stored: Stored, viewer: Scope, view: str) -> set[str]:
    mine = set(stored.markers[viewer])
    if view == "export_memory" and viewer.agent_name is None:
        for scope in plan.scopes:  # a whole user's export carries that user's agents, by design
            if scope.user_id == viewer.user_id:
                mine |= stored.markers[scope]
    return mine


def assert_isolated(plan: Plan, stored: Stored, viewer: Scope, seen: dict[str, str]) -> None:
    every = set().union(*stored.markers.values())
    for view, text in seen.items():
        leaked = sorted(marker for marker in every - allowed_markers(plan, stored, viewer, view) if marker in text)
        owners = [scope.describe() for scope in plan.scopes for marker in leaked if marker in stored.markers[scope]]
        assert not leaked, f"{view} shown to {viewer.describe()} holds {leaked} stored by {owners}:\n{text[:1500]}"


def exported_without_time(env: Env, scope: Scope) -> dict[str, Any]:
    document = env.ok("export_memory", user_id=scope.user_id, agent_name=scope.agent_name)
    document.pop("exported_at")
    return document


# --- the property -----------------------------------------------------------------------------------


# Twenty generated plans take about ten seconds: `make test` runs it, `make test-fast` leaves it out.
@pytest.mark.slow
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
@given(plan=plans())
def test_no_scope_ever_sees_another_scopes_data_and_forget_leaves_the_other_user_intact(env: Env, plan: Plan) -> None:
    env.examples += 1
    service = env.fresh()
    stored = store_plan(env, service, plan)
    all_facts = {scope: list(ids) for scope, ids in stored.facts.items()}
    facts_before = {scope: exported_without_time(env, scope)["memory"]["facts"] for scope in plan.scopes}

    for viewer in plan.scopes:
        foreign = [fact_id for scope, ids in all_facts.items() if scope != viewer for fact_id in ids]
        seen = views(env, viewer, foreign[:4])
        assert_isolated(plan, stored, viewer, seen)
        # Its own data is there to be seen: the checks above are not vacuous.
        missing = [marker for marker in stored.markers[viewer] if marker not in seen["export_memory"]]
        assert not missing, f"{viewer.describe()}'s own {missing} are not in its export"
        assert plan.section_markers[plan.scopes.index(viewer)] in seen["get_user_profile"]

    # Failed edits by others changed no one's facts.
    for scope in plan.scopes:
        assert exported_without_time(env, scope)["memory"]["facts"] == facts_before[scope], scope.describe()

    # forget(A) erases A and A's agent, and leaves B and B's agent byte-for-byte as they were.
    b_scopes = plan.scopes[2:]
    b_before = {scope: exported_without_time(env, scope) for scope in b_scopes}
    root = service.settings.data_storage_path
    b_files = {path: entry for path, entry in snapshot(root).items() if Path(path).parts[1:2] == (plan.user_b,)}
    env.ok("forget", user_id=plan.user_a, confirm=plan.user_a)
    for scope in b_scopes:
        assert exported_without_time(env, scope) == b_before[scope], scope.describe()
    assert {path: entry for path, entry in snapshot(root).items() if Path(path).parts[1:2] == (plan.user_b,)} == b_files
    assert not (root / "users" / plan.user_a).exists()
    a_markers = stored.markers[plan.scopes[0]] | stored.markers[plan.scopes[1]]
    for scope in b_scopes:
        assert_isolated(plan, stored, scope, views(env, scope, []))
    for scope in plan.scopes[:2]:
        shown = result_json(
            env.call("retrieve_memory", query=QUERY, user_id=scope.user_id, agent_name=scope.agent_name)
        )
        assert not [marker for marker in a_markers if marker in shown], "forgotten data is still retrieved"
        assert env.call("export_memory", user_id=scope.user_id, agent_name=scope.agent_name).is_error


# --- fixed cases ---------------------------------------------------------------------------------------


def test_user_ids_differing_only_in_case_are_separate_users(env: Env) -> None:
    """Ids are directory names: on a case-insensitive filesystem (macOS, Windows by default)
    'Alice' and 'alice' would share one directory. Here they must stay apart."""
    service = env.fresh()
    env.ok("add_memory", user_input="tea mkupperalice", agent_response="ok", user_id="Alice")
    env.ok("add_memory", user_input="tea mklowerbob", agent_response="ok", user_id="alice")
    upper = result_json(env.call("retrieve_memory", query="tea", user_id="Alice"))
    lower = result_json(env.call("retrieve_memory", query="tea", user_id="alice"))
    assert "mkupperalice" in upper and "mklowerbob" not in upper
    assert "mklowerbob" in lower and "mkupperalice" not in lower
    assert [user["user_id"] for user in ok(env.call("memory_status"))["users"]] == ["Alice", "alice"]
    # Apart on disk too, even where the file system ignores case: a capital is marked in the name.
    users = service.settings.data_storage_path / "users"
    assert sorted(path.name for path in users.iterdir()) == ["alice", "alice~1"]


def test_the_default_user_and_an_empty_user_id_never_reach_a_named_user(env: Env) -> None:
    env.fresh()
    env.ok("add_memory", user_input="tea mkdefaultuser", agent_response="ok")
    env.ok("add_memory", user_input="tea mkemptyid", agent_response="ok", user_id="")
    env.ok("add_fact", content="tea mkdefaultfact")
    for user in ("alice", "default-", "Default"):
        env.ok("add_memory", user_input="tea other", agent_response="ok", user_id=user)
        shown = result_json(env.call("retrieve_memory", query="tea", user_id=user))
        shown += result_json(env.call("search_facts", query="tea", user_id=user))
        assert "mkdefault" not in shown and "mkemptyid" not in shown, user
    shown = result_json(env.call("retrieve_memory", query="tea"))
    assert "mkdefaultuser" in shown and "mkemptyid" in shown


def test_a_misspelt_user_argument_is_refused_not_stored_for_the_default_user(env: Env) -> None:
    service = env.fresh()
    for misspelt in ("userId", "user", "uid", "user_id "):
        result = env.call("add_memory", user_input="tea mksecret", agent_response="ok", **{misspelt: "alice"})
        assert result.is_error, misspelt
        assert "mksecret" not in error_text(result)
    assert service.store.list_users() == []
