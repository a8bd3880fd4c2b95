"""MemoryService through its request models: what MCP tools and the CLI rely on."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from core_calls import add

from memory_mcp.base.clock import format_timestamp, now
from memory_mcp.base.errors import InvalidInput
from memory_mcp.base.settings import Settings
from memory_mcp.models import (
    AddMemoryRequest,
    Fact,
    KnowledgeEntry,
    MemoryDocument,
    ProfileRequest,
    RetrieveMemoryRequest,
    Section,
)
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.service.notes import (
    EMPTY_PROFILE_HOST_NOTE,
    EMPTY_PROFILE_NOTE,
    HOST_EXTRACTION_NOTE,
    NO_MODEL_NOTE,
)
from memory_mcp.store import Scope


def retrieve(service: MemoryService, query: str, **fields: Any):
    return service.retrieve_memory(RetrieveMemoryRequest.build(query=query, **fields))


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` with its content (None for directories)."""
    if not root.exists():
        return {}
    return {
        str(path.relative_to(root)): (None if path.is_dir() else path.read_bytes()) for path in sorted(root.rglob("*"))
    }


def stored_pages(data_dir: Path, user: str = "default") -> list[dict]:
    path = data_dir / "users" / user / "pages.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# --- add_memory -----------------------------------------------------------------------------


def test_add_returns_a_page_id_and_timestamp_and_stores_the_exchange(service: MemoryService, data_dir: Path) -> None:
    result = add(service, "I adopted a cat named Miso", "Congratulations on Miso!", user_id="alice", thread_id="t-1")

    assert result.status == "success"
    assert re.fullmatch(r"page_[0-9a-f]{16}", result.page_id)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", result.timestamp)
    assert (result.user_id, result.agent_name, result.thread_id) == ("alice", None, "t-1")
    [record] = stored_pages(data_dir, "alice")
    assert record["page_id"] == result.page_id
    assert record["timestamp"] == result.timestamp
    assert record["user_input"] == "I adopted a cat named Miso"
    assert record["agent_response"] == "Congratulations on Miso!"


def test_page_ids_are_unique(service: MemoryService) -> None:
    ids = {add(service, f"message {i}").page_id for i in range(50)}

    assert len(ids) == 50


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("2024-05-01T13:56:00Z", "2024-05-01T13:56:00Z"),
        ("2024-05-01T13:56:00", "2024-05-01T13:56:00Z"),
        ("2024-05-01 13:56:00", "2024-05-01T13:56:00Z"),
        ("2024-05-01T15:56:00+02:00", "2024-05-01T13:56:00Z"),
        ("2024-05-01T08:26:00-05:30", "2024-05-01T13:56:00Z"),
        ("2024-05-01T13:56:00.987654Z", "2024-05-01T13:56:00Z"),
        ("0999-05-01T13:56:00Z", "0999-05-01T13:56:00Z"),
        ("0001-01-01 00:00:00", "0001-01-01T00:00:00Z"),
    ],
)
def test_timestamps_are_normalised_to_utc(service: MemoryService, data_dir: Path, given: str, stored: str) -> None:
    result = add(service, "hello", timestamp=given)

    assert result.timestamp == stored
    assert stored_pages(data_dir)[0]["timestamp"] == stored


def test_an_exchange_dated_before_the_year_1000_is_the_oldest_not_the_newest(service: MemoryService) -> None:
    add(service, "said in 2024", timestamp="2024-05-01T13:56:00Z")
    add(service, "said in 999", timestamp="0999-05-01T13:56:00Z")
    recent = service.retrieve_memory(RetrieveMemoryRequest.build(query="said"))
    assert [page.user_input for page in recent.short_term_memory] == ["said in 999", "said in 2024"]


@pytest.mark.parametrize("bad", ["yesterday", "2024-13-01 00:00:00", "01/05/2024 13:56", "2024-05-01T25:00:00Z"])
def test_bad_timestamp_is_rejected_naming_the_field(bad: str) -> None:
    with pytest.raises(InvalidInput, match="timestamp"):
        AddMemoryRequest.build(user_input="x", agent_response="y", timestamp=bad)


def test_empty_optional_fields_mean_not_given(service: MemoryService, data_dir: Path) -> None:
    result = add(service, "hello", user_id="", agent_name="", timestamp="", thread_id="")

    assert (result.user_id, result.agent_name, result.thread_id) == ("default", None, None)
    assert len(stored_pages(data_dir, "default")) == 1
    assert retrieve(service, "hello", user_id="").short_term_memory[0].page_id == result.page_id


def test_configured_user_and_assistant_are_the_defaults(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir, user_id="bob", assistant_id="helper"))

    result = add(service, "hello")

    assert (result.user_id, result.agent_name) == ("bob", "helper")
    assert (data_dir / "users" / "bob" / "agents" / "helper" / "pages.jsonl").is_file()


@pytest.mark.parametrize("field", ["user_id", "agent_name"])
@pytest.mark.parametrize("value", ["../etc", "a/b", "x" * 129, "bob\n", ".dotted", "spa ce", "..", "ümlaut", "@x.org"])
def test_identifier_rule_violation_is_rejected_and_nothing_is_written(
    service: MemoryService, data_dir: Path, field: str, value: str
) -> None:
    add(service, "an existing page", user_id="alice")
    before = snapshot(data_dir)

    for build in (
        lambda: AddMemoryRequest.build(user_input="x", agent_response="y", **{field: value}),
        lambda: RetrieveMemoryRequest.build(query="x", **{field: value}),
        lambda: ProfileRequest.build(**{field: value}),
    ):
        with pytest.raises(InvalidInput) as caught:
            build()
        assert str(caught.value).startswith(field)

    assert snapshot(data_dir) == before


def test_unknown_request_field_is_rejected() -> None:
    with pytest.raises(InvalidInput, match="usre_id"):
        AddMemoryRequest.build(user_input="x", agent_response="y", usre_id="alice")


def test_text_longer_than_max_text_chars_is_rejected_and_nothing_written(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir, max_text_chars=10))
    add(service, "x" * 10, "y" * 10)  # exactly at the limit is fine
    before = snapshot(data_dir)

    with pytest.raises(InvalidInput, match="user_input.*max_text_chars"):
        add(service, "x" * 11, "short")
    with pytest.raises(InvalidInput, match="agent_response.*max_text_chars"):
        add(service, "short", "猫" * 11)  # characters, not bytes

    assert snapshot(data_dir) == before


def test_meta_data_larger_than_max_meta_data_bytes_is_rejected(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir, max_meta_data_bytes=20))
    fits = {"k": "x" * 12}  # {"k":"xxxxxxxxxxxx"} is exactly 20 bytes
    assert len(json.dumps(fits, separators=(",", ":"))) == 20
    add(service, "hello", meta_data=fits)
    before = snapshot(data_dir)

    with pytest.raises(InvalidInput, match="meta_data.*max_meta_data_bytes"):
        add(service, "hello", meta_data={"k": "x" * 13})
    with pytest.raises(InvalidInput, match="meta_data"):
        add(service, "hello", meta_data={"k": "é" * 7})  # 14 characters' worth of UTF-8 bytes

    assert snapshot(data_dir) == before
    assert stored_pages(data_dir)[0]["meta_data"] == fits


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_meta_data_with_non_finite_numbers_is_rejected(bad: float) -> None:
    with pytest.raises(InvalidInput, match="meta_data.*NaN"):
        AddMemoryRequest.build(user_input="x", agent_response="y", meta_data={"outer": [{"score": bad}]})


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"child": value}
    return value


def test_meta_data_nesting_is_limited_to_32_levels(service: MemoryService, data_dir: Path) -> None:
    add(service, "deep but allowed", meta_data=nested(32))
    add(service, "deep list but allowed", meta_data={"list": _deep_list(32)})
    assert stored_pages(data_dir)[0]["meta_data"] == nested(32)

    for depth in (33, 100_000):  # a hostile depth is refused, not a crash
        with pytest.raises(InvalidInput, match="meta_data.*32"):
            AddMemoryRequest.build(user_input="x", agent_response="y", meta_data=nested(depth))
    with pytest.raises(InvalidInput, match="meta_data"):
        AddMemoryRequest.build(user_input="x", agent_response="y", meta_data={"list": _deep_list(33)})


def _deep_list(depth: int) -> list:
    value: list = []
    for _ in range(depth - 2):
        value = [value]
    return value


def test_exchange_with_no_text_at_all_is_rejected(service: MemoryService, data_dir: Path) -> None:
    with pytest.raises(InvalidInput, match="nothing to remember"):
        add(service, "  ", "\n")
    assert snapshot(data_dir) == {}


# --- retrieve_memory ------------------------------------------------------------------------


def test_short_term_memory_is_the_most_recent_pages(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=3))
    ids = [add(service, f"message {i}").page_id for i in range(7)]

    result = retrieve(service, "message")

    assert [page.page_id for page in result.short_term_memory] == ids[-3:]


def test_short_term_memory_with_fewer_pages_than_capacity(service: MemoryService) -> None:
    ids = [add(service, f"message {i}").page_id for i in range(2)]

    result = retrieve(service, "message")

    assert [page.page_id for page in result.short_term_memory] == ids
    assert result.retrieved_pages == []  # everything is already in short-term memory


def test_retrieved_pages_exclude_short_term_and_are_ordered_by_score(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=2))
    # Separate threads, so no page borrows a neighbour's words.
    weak = add(service, "I went hiking last weekend with my sister and friends", thread_id="a").page_id
    add(service, "the weather report said rain", thread_id="b")
    strong = add(service, "hiking boots hiking trails", thread_id="c").page_id
    add(service, "my favourite colour is blue", thread_id="d")
    recent = [add(service, f"hiking again today {i}", thread_id=f"e{i}").page_id for i in range(2)]  # short-term

    result = retrieve(service, "hiking")

    retrieved = [page.page_id for page in result.retrieved_pages]
    assert retrieved == [strong, weak]
    assert [page.page_id for page in result.short_term_memory] == recent
    scores = [page.score for page in result.retrieved_pages]
    assert scores == sorted(scores, reverse=True) and scores[0] > scores[1] > 0


def test_a_page_is_found_by_its_date_and_by_its_neighbours_words(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=1))
    question = add(
        service, "Any plans for the long weekend?", "Not yet!", thread_id="chat", timestamp="2023-05-26 09:00:00"
    )
    answer = add(
        service, "We'll rent a cabin by the lake.", "Lovely.", thread_id="chat", timestamp="2023-05-26 09:01:00"
    )
    add(
        service,
        "Unrelated chatter about taxes and a cabin",
        "Sure.",
        thread_id="other",
        timestamp="2023-08-02 10:00:00",
    )
    add(service, "newest page, kept as short-term memory", "ok", thread_id="other")

    by_neighbour = [page.page_id for page in retrieve(service, "cabin for the long weekend").retrieved_pages]
    by_date = [page.page_id for page in retrieve(service, "what happened in May 2023").retrieved_pages]

    # The answer says "cabin" and borrows "long weekend" from the question before it, so it comes
    # before the other page about a cabin; one tied to the query only by its neighbour would not score.
    assert set(by_neighbour[:2]) == {question.page_id, answer.page_id} and len(by_neighbour) == 3
    assert set(by_date[:2]) == {question.page_id, answer.page_id}  # August 2023 matches only the year


def test_max_results_limits_retrieved_pages(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=1))
    for i in range(8):
        add(service, f"coffee talk number {i}")

    assert len(retrieve(service, "coffee", max_results=3).retrieved_pages) == 3


@pytest.mark.parametrize("query", ["", "   ", "?!"])
def test_query_without_words_retrieves_no_pages(data_dir: Path, query: str) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=1))
    for i in range(4):
        add(service, f"page {i}")

    result = retrieve(service, query)

    assert result.retrieved_pages == []
    assert len(result.short_term_memory) == 1


def test_retrieve_for_unknown_user_is_empty_and_writes_nothing(service: MemoryService, data_dir: Path) -> None:
    result = retrieve(service, "anything", user_id="nobody")

    assert result.short_term_memory == [] and result.retrieved_pages == []
    assert result.retrieved_user_knowledge == []
    assert not (data_dir / "users" / "nobody").exists()


def test_chinese_exchange_is_retrieved_by_a_chinese_query(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=1))
    target = add(service, "我最喜欢的动物是猫", "橘猫很可爱").page_id
    add(service, "明天下午开会")
    add(service, "latest")

    result = retrieve(service, "用户喜欢什么动物")

    assert [page.page_id for page in result.retrieved_pages][:1] == [target]


def write_knowledge(service: MemoryService, scope: Scope) -> None:
    service.store.write_document(
        scope,
        MemoryDocument(
            user={"workContext": Section(summary="Nurse on night shifts")},
            facts=[
                Fact(id="f1", content="drinks green tea every morning", confidence=0.75),
                Fact(id="f2", content="has two cats named Miso and Tofu", confidence=0.95),
                Fact(id="f3", content="is learning to play the piano", confidence=0.85),
                Fact(id="f4", content="prefers tea over coffee", confidence=0.8, category="preference"),
            ],
            assistantKnowledge=[
                KnowledgeEntry(id="k1", content="recommended a jasmine tea brand", confidence=0.9),
                KnowledgeEntry(id="k2", content="promised to explain piano scales", confidence=0.6),
            ],
        ),
    )


def test_facts_and_assistant_knowledge_are_ranked_for_the_query(service: MemoryService) -> None:
    write_knowledge(service, Scope("alice"))

    result = retrieve(service, "what tea does she like", user_id="alice")

    # Relevant facts outrank the more confident but unrelated ones; all are returned, best first.
    assert {fact.id for fact in result.retrieved_user_knowledge[:2]} == {"f1", "f4"}
    scores = [fact.score for fact in result.retrieved_user_knowledge]
    assert scores == sorted(scores, reverse=True) and len(scores) == 4
    assert [entry.id for entry in result.retrieved_assistant_knowledge] == ["k1", "k2"]
    assert result.user_profile.user.workContext.summary == "Nurse on night shifts"

    piano = retrieve(service, "piano", user_id="alice")
    assert piano.retrieved_user_knowledge[0].id == "f3"
    assert [entry.id for entry in piano.retrieved_assistant_knowledge] == ["k2", "k1"]


def test_fact_score_weighs_similarity_and_confidence(data_dir: Path) -> None:
    only_confidence = MemoryService(
        Settings(data_storage_path=data_dir, memory={"similarity_weight": 0, "confidence_weight": 1})
    )
    write_knowledge(only_confidence, Scope("alice"))

    result = retrieve(only_confidence, "what tea does she like", user_id="alice")

    assert [fact.id for fact in result.retrieved_user_knowledge] == ["f2", "f3", "f4", "f1"]
    assert [fact.score for fact in result.retrieved_user_knowledge] == [0.95, 0.85, 0.8, 0.75]


def test_empty_query_returns_knowledge_by_confidence(service: MemoryService) -> None:
    write_knowledge(service, Scope("alice"))

    result = retrieve(service, "", user_id="alice", max_results=3)

    assert [fact.id for fact in result.retrieved_user_knowledge] == ["f2", "f3", "f4"]


def test_profile_orders_facts_by_confidence(service: MemoryService) -> None:
    write_knowledge(service, Scope("alice"))

    profile = service.get_user_profile(ProfileRequest.build(user_id="alice"))

    assert [fact.id for fact in profile.facts] == ["f2", "f3", "f4", "f1"]
    assert profile.assistant_knowledge is None
    assert profile.user.workContext.summary == "Nurse on night shifts"
    assert profile.lastUpdated != ""


def test_profile_switches(service: MemoryService) -> None:
    write_knowledge(service, Scope("alice"))

    without = service.get_user_profile(ProfileRequest.build(user_id="alice", include_knowledge=False))
    with_assistant = service.get_user_profile(ProfileRequest.build(user_id="alice", include_assistant_knowledge=True))

    assert without.facts is None
    assert [entry.id for entry in with_assistant.assistant_knowledge] == ["k1", "k2"]


def test_without_an_llm_notes_say_what_fills_structured_memory(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir))

    empty = service.get_user_profile(ProfileRequest.build()).notes
    assert empty == retrieve(service, "x").notes == [EMPTY_PROFILE_HOST_NOTE]
    assert "add_memory" in EMPTY_PROFILE_HOST_NOTE and "endpoint" in EMPTY_PROFILE_HOST_NOTE
    # Nothing fills the profile by itself here, so no note may promise that it will.
    assert not any("fills in as conversations are remembered" in note for note in empty)
    write_knowledge(service, Scope("default"))
    assert service.get_user_profile(ProfileRequest.build()).notes == [HOST_EXTRACTION_NOTE]
    assert "OPENAI_BASE_URL" in HOST_EXTRACTION_NOTE and "`facts`" in HOST_EXTRACTION_NOTE


def test_with_an_llm_notes_promise_the_profile_fills_in(data_dir: Path) -> None:
    endpoint = "http://127.0.0.1:11434/v1"
    on = MemoryService(Settings(data_storage_path=data_dir, openai_base_url=endpoint, llm_model="qwen2.5:7b"))
    disabled = MemoryService(Settings(data_storage_path=data_dir, openai_api_key="sk-x", memory={"enabled": False}))

    assert on.get_user_profile(ProfileRequest.build()).notes == [EMPTY_PROFILE_NOTE]
    # Switched off by the user rather than for want of an endpoint: the note names the setting.
    disabled_notes = disabled.get_user_profile(ProfileRequest.build()).notes
    assert EMPTY_PROFILE_NOTE not in disabled_notes
    assert any("memory.enabled" in note for note in disabled_notes)
    # An endpoint without a model: no model is guessed, and the note names the missing setting.
    unnamed = MemoryService(Settings(data_storage_path=data_dir, openai_base_url=endpoint))
    assert not unnamed.extraction_on
    assert unnamed.memory_status().notes[0] == NO_MODEL_NOTE and "llm_model" in NO_MODEL_NOTE


def test_empty_profile_is_explained_and_filled_profile_is_not(service: MemoryService) -> None:
    empty_notes = service.get_user_profile(ProfileRequest.build(user_id="alice")).notes
    write_knowledge(service, Scope("alice"))
    filled_notes = service.get_user_profile(ProfileRequest.build(user_id="alice")).notes

    assert any("Nothing is known" in note for note in empty_notes)
    assert not any("Nothing is known" in note for note in filled_notes)


# --- scoping and sharing --------------------------------------------------------------------


def test_users_and_agents_are_isolated(service: MemoryService) -> None:
    add(service, "alice own secret zebra", user_id="alice")
    add(service, "alice coder secret zebra", user_id="alice", agent_name="coder")
    add(service, "bob secret zebra", user_id="bob")
    write_knowledge(service, Scope("alice", "coder"))

    own = retrieve(service, "zebra", user_id="alice")
    coder = retrieve(service, "zebra", user_id="alice", agent_name="coder")
    writer = retrieve(service, "zebra", user_id="alice", agent_name="writer")
    bob = retrieve(service, "zebra", user_id="bob", agent_name="coder")

    assert [p.user_input for p in own.short_term_memory] == ["alice own secret zebra"]
    assert [p.user_input for p in coder.short_term_memory] == ["alice coder secret zebra"]
    assert writer.short_term_memory == [] and bob.short_term_memory == []
    assert coder.agent_name == "coder" and own.agent_name is None
    assert service.get_user_profile(ProfileRequest.build(user_id="alice")).facts == []
    assert len(service.get_user_profile(ProfileRequest.build(user_id="alice", agent_name="coder")).facts) == 4
    assert service.store.list_users() == ["alice", "bob"]


def test_page_added_by_another_service_instance_is_found(data_dir: Path) -> None:
    settings = Settings(data_storage_path=data_dir, short_term_capacity=1)
    first, second = MemoryService(settings), MemoryService(settings)
    add(first, "we talked about gardening", thread_id="a")
    add(first, "filler one", thread_id="b")
    assert retrieve(first, "volcano").retrieved_pages == []  # builds first's index

    target = add(second, "my trip to the volcano in Iceland", thread_id="c").page_id
    add(second, "filler two", thread_id="d")  # keeps the target out of short-term memory

    result = retrieve(first, "volcano")
    assert [page.page_id for page in result.retrieved_pages] == [target]
    assert retrieve(first, "gardening").retrieved_pages[0].user_input == "we talked about gardening"


def test_since_and_until_are_a_hard_window_for_recent_and_ranked_exchanges(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=1))
    for day, place in ((3, "Lisbon"), (12, "Porto"), (20, "Faro"), (31, "Braga")):
        add(service, f"Trip to {place}: the hiking was great", "Noted.", timestamp=f"2024-05-{day:02d} 10:00:00")
    add(service, "Hiking boots need new laces", "Noted.", timestamp="2024-06-15T08:00:00Z")

    def window(**bounds: str) -> tuple[list[str], list[str]]:
        result = retrieve(service, "hiking", **bounds)
        return [p.user_input.split(":")[0] for p in result.short_term_memory], [
            p.user_input.split(":")[0] for p in result.retrieved_pages
        ]

    recent, ranked = window(since="2024-05-10", until="2024-05-20T10:00:00Z")
    assert recent == ["Trip to Faro"], "the newest exchange inside the window, bounds included"
    assert ranked == ["Trip to Porto"]
    recent, ranked = window(until="2024-06-01")
    assert recent == ["Trip to Braga"] and set(ranked) == {"Trip to Lisbon", "Trip to Porto", "Trip to Faro"}
    recent, ranked = window(since="2024-06-01")
    assert (recent, ranked) == (["Hiking boots need new laces"], [])
    assert window(since="2025-01-01") == ([], [])
    recent, ranked = window()
    assert recent == ["Hiking boots need new laces"] and len(ranked) == 4


@pytest.mark.parametrize(
    ("bounds", "problem"),
    [
        ({"since": "2024-06-01", "until": "2024-05-01"}, "since (2024-06-01T00:00:00Z) must not be later than until"),
        ({"since": "last week"}, "since"),
        ({"until": "2024-13-01"}, "until"),
    ],
)
def test_a_wrong_window_is_refused_with_what_is_wrong(
    service: MemoryService, bounds: dict[str, str], problem: str
) -> None:
    add(service, "hello")
    with pytest.raises(InvalidInput, match=re.escape(problem)):
        retrieve(service, "hello", **bounds)


def test_a_time_the_query_names_lifts_exchanges_from_then_without_dropping_the_others(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=1, heat_ranking_weight=0))
    moment = now()
    last_monday = (moment - timedelta(days=moment.weekday() + 7)).replace(hour=12)
    for when, place in ((moment - timedelta(days=400), "Alder"), (last_monday, "Birch"), (moment, "Cedar")):
        add(service, f"We went hiking near {place}", "Noted.", timestamp=format_timestamp(when), thread_id=place)
    add(service, "Unrelated: my landlord replied", "Good.")  # the newest: short-term memory

    def ranked(query: str) -> list[str]:
        return [page.user_input.rsplit(" ", 1)[-1] for page in retrieve(service, query).retrieved_pages]

    assert ranked("where did I go hiking?") == ["Cedar", "Birch", "Alder"], "words alone: the newest first"
    assert ranked("where did I go hiking last week?") == ["Birch", "Cedar", "Alder"]
    assert ranked("我上周去哪里 hiking?")[0] == "Birch"
    assert ranked("hiking last year")[0] == "Alder"


def test_status_for_one_user_shows_nothing_of_the_instance_or_the_others(make_service: Any) -> None:
    service = make_service(memory={"debounce_seconds": 300})
    service.start()
    for user in ("alice", "bob", "carol"):
        add(service, f"{user} says hi", user_id=user)
    service.retrieve_memory(RetrieveMemoryRequest.build(query="hi", user_id="bob"))
    whole = service.memory_status()
    mine = service.memory_status(only_user="alice")
    assert whole.data_dir and whole.queued_updates == 3 and whole.scopes_in_memory >= 1
    assert [user.user_id for user in mine.users] == ["alice"]
    assert (mine.data_dir, mine.queued_updates, mine.scopes_in_memory) == (None, 1, 0)
    assert str(service.settings.data_storage_path) not in mine.model_dump_json()
