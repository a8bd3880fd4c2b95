"""The LLM memory updater through the service API: parsing replies, the apply rules, signals,
LLM failures, and flush_memory.

The LLM is tests/scripted_llm.py, a real HTTP server the product's `openai` client talks to.
Services here are not started (no background workers), so only flush_memory runs updates:
every test is deterministic and nothing depends on timing. The queue has its own tests.
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from core_calls import add, flush
from scripted_llm import ScriptedLLM, Step, conversation_of, reply
from update_helpers import ServiceFactory, fact, section, update

from memory_mcp.base.errors import LLMTransientError
from memory_mcp.extraction.updater import MAX_BATCH_PAGES, parse_reply
from memory_mcp.models import (
    Fact,
    FlushResult,
    MemoryDocument,
    ProfileRequest,
    RetrieveMemoryRequest,
    Section,
)
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

CORRECTION_HINT = "appears to correct the assistant"
REINFORCEMENT_HINT = "appears to confirm the assistant"
FACT_ID = re.compile(r"^fact_[0-9a-f]{8}$")
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def memory_file(data_dir: Path, user: str = "alice", agent: str | None = None) -> Path:
    scope_dir = data_dir / "users" / user
    return (scope_dir / "agents" / agent if agent else scope_dir) / "memory.json"


def stored(data_dir: Path, user: str = "alice") -> dict[str, Any]:
    return json.loads(memory_file(data_dir, user).read_text(encoding="utf-8"))


def remembered(data_dir: Path, user: str = "alice") -> dict[str, Any]:
    """The stored memory without its bookkeeping (when it was written, which replies failed)."""
    document = stored(data_dir, user)
    document.pop("lastUpdated")
    document["analysis"].pop("failing", None)
    return document


def current_facts(data_dir: Path, user: str = "alice") -> list[dict[str, Any]]:
    """The stored facts that hold now: a removed fact may be kept as history, marked with validTo."""
    return [fact for fact in stored(data_dir, user)["facts"] if fact.get("validTo") is None]


def seed(service: MemoryService, owner: str = "alice", **document: Any) -> bytes:
    """Write a memory document for `owner` and return the file's bytes."""
    service.store.write_document(Scope(owner), MemoryDocument(**document))
    return memory_file(service.settings.data_storage_path, owner).read_bytes()


def existing_fact(number: int, content: str, confidence: float = 0.8, **extra: Any) -> Fact:
    return Fact(
        id=f"fact_{number:08x}", content=content, confidence=confidence, createdAt="2024-01-01T00:00:00Z", **extra
    )


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def service(make_service: ServiceFactory) -> MemoryService:
    return make_service()


# --- finding the JSON in a reply ---------------------------------------------------------------

GOOD = json.dumps(update(facts=[fact("Alice writes Go at Acme", "knowledge", 0.95)]))
DECOY = '{"newFacts": [{"content": "DECOY from reasoning", "category": "context", "confidence": 1.0}]}'

WRAPPED_REPLIES = {
    "bare": GOOD,
    "json fence": f"Here is the update.\n```json\n{GOOD}\n```\nDone.",
    "plain fence": f"```\n{GOOD}\n```",
    "think with braces": f"<think>The user said {{x}}; maybe {DECOY}? No, {{not this}}.</think>\n{GOOD}",
    "thinking tag then fence": f"<thinking>Consider {DECOY} and {{braces}}</thinking>\n```json\n{GOOD}\n```",
    "prose around": f"Sure! Based on the conversation, the update is {GOOD} and that is all. Let me know.",
    "multiline think": f"<THINK>\nstep 1: {{\nstep 2: }}\n{DECOY}\n</THINK>\n\nFinal answer:\n{GOOD}",
}


@pytest.mark.parametrize("wrapped", list(WRAPPED_REPLIES.values()), ids=list(WRAPPED_REPLIES))
def test_the_update_is_found_however_the_reply_wraps_it(
    service: MemoryService, llm: ScriptedLLM, data_dir: Path, wrapped: str
) -> None:
    llm.enqueue(reply(wrapped))
    add(service, "I write Go at Acme", user_id="alice")

    result = flush(service, user_id="alice")

    assert result.errors == []
    assert result.facts_added == ["Alice writes Go at Acme"]
    assert [f["content"] for f in current_facts(data_dir)] == ["Alice writes Go at Acme"]
    assert result.pending_pages == 0


UNUSABLE_REPLIES = [
    pytest.param("I could not find anything worth remembering.", id="not json"),
    pytest.param('{"user": {"workContext": {"summary": "Alice is', id="truncated before any inner object"),
    pytest.param(json.dumps({"newFacts": "Alice writes Go", "user": {}}), id="wrong shape"),
    pytest.param(json.dumps({"user": {"workContext": None}}), id="null section"),
    pytest.param(GOOD[: len(GOOD) // 2], id="truncated"),
    pytest.param(f"```json\n{GOOD[:-3]}\n```", id="truncated in fence"),
    pytest.param(
        '{"user": {"workContext": {"summary": "Alice is an engineer.", "shouldUpdate": true}, "personalCon',
        id="truncated after a section",
    ),
    pytest.param(f"<think>{DECOY}</think>\n{GOOD[: len(GOOD) // 2]}", id="reasoning then truncated"),
]


@pytest.mark.parametrize("bad", UNUSABLE_REPLIES)
def test_an_unusable_reply_changes_nothing_and_is_retried_later(
    service: MemoryService, llm: ScriptedLLM, data_dir: Path, bad: str
) -> None:
    seed(service, facts=[existing_fact(1, "Alice lives in Lyon")])
    before = remembered(data_dir)
    add(service, "I moved to Berlin", "Noted", user_id="alice")
    add(service, "I write Go at Acme", "Nice", user_id="alice")
    llm.enqueue(reply(bad), reply(GOOD))

    failed = flush(service, user_id="alice")

    assert failed.errors and failed.pages_analysed == 0 and failed.facts_added == []
    assert failed.pending_pages == 2
    assert remembered(data_dir) == before
    assert stored(data_dir)["analysis"]["failing"][""]["attempts"] == 1  # counted, towards setting it aside

    retried = flush(service, user_id="alice")

    assert retried.errors == []
    assert retried.facts_added == ["Alice writes Go at Acme"]
    assert retried.pending_pages == 0
    assert [f["content"] for f in current_facts(data_dir)] == ["Alice lives in Lyon", "Alice writes Go at Acme"]
    second_try = conversation_of(llm.requests[1])
    assert "I moved to Berlin" in second_try and "I write Go at Acme" in second_try


@pytest.mark.parametrize("bad", UNUSABLE_REPLIES)
def test_parse_reply_raises_a_transient_error_for_unusable_replies(bad: str) -> None:
    """A reply that cannot be used is worth retrying, never a permanent failure."""
    with pytest.raises(LLMTransientError):
        parse_reply(bad)


# --- apply rules ---------------------------------------------------------------------------------


def test_sections_are_replaced_only_when_should_update_is_true_and_the_summary_is_not_empty(
    service: MemoryService, llm: ScriptedLLM, data_dir: Path
) -> None:
    old = Section(summary="old", updatedAt="2024-01-01T00:00:00Z")
    seed(
        service,
        user={"workContext": old, "personalContext": old, "topOfMind": old},
        history={"recentMonths": old, "earlierContext": old, "longTermBackground": old},
    )
    llm.enqueue(
        reply(
            update(
                user={
                    "workContext": section("Alice is a backend engineer at Acme."),
                    "personalContext": section("Should not be written.", should_update=False),
                    "topOfMind": section("   ", should_update=True),
                },
                history={
                    "recentMonths": section("Alice migrated billing to PostgreSQL."),
                    "earlierContext": section(""),
                },
            )
        )
    )
    add(service, "I'm a backend engineer at Acme; we just moved billing to PostgreSQL", user_id="alice")

    result = flush(service, user_id="alice")

    assert result.sections_updated == ["user.workContext", "history.recentMonths"]
    document = stored(data_dir)
    assert document["user"]["workContext"]["summary"] == "Alice is a backend engineer at Acme."
    assert TIMESTAMP.match(document["user"]["workContext"]["updatedAt"])
    assert document["user"]["workContext"]["updatedAt"] != old.updatedAt
    assert document["history"]["recentMonths"]["summary"] == "Alice migrated billing to PostgreSQL."
    for group, name in [
        ("user", "personalContext"),
        ("user", "topOfMind"),
        ("history", "earlierContext"),
        ("history", "longTermBackground"),
    ]:
        assert document[group][name] == {"summary": "old", "updatedAt": old.updatedAt}, name


def test_new_facts_need_the_confidence_threshold(service: MemoryService, llm: ScriptedLLM, data_dir: Path) -> None:
    llm.enqueue(
        reply(
            update(
                facts=[
                    fact("Exactly at the threshold", confidence=0.7),
                    fact("Just below the threshold", confidence=0.69),
                    fact("A guess", confidence=0.2),
                    fact("Stated outright", confidence=1.0),
                ]
            )
        )
    )
    add(service, "some exchange", user_id="alice")

    result = flush(service, user_id="alice")

    assert result.facts_added == ["Exactly at the threshold", "Stated outright"]
    assert [f["content"] for f in current_facts(data_dir)] == ["Exactly at the threshold", "Stated outright"]


def test_the_confidence_threshold_is_configurable(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    service = make_service(memory={"fact_confidence_threshold": 0.9})
    llm.enqueue(reply(update(facts=[fact("Strongly implied", confidence=0.85), fact("Stated", confidence=0.9)])))
    add(service, "x", user_id="alice")

    assert flush(service, user_id="alice").facts_added == ["Stated"]


def test_duplicate_facts_are_skipped_ignoring_case_and_whitespace(
    service: MemoryService, llm: ScriptedLLM, data_dir: Path
) -> None:
    seed(service, facts=[existing_fact(1, "Prefers dark mode in every editor")])
    llm.enqueue(
        reply(
            update(
                facts=[
                    fact("  prefers DARK   mode in\nevery editor "),  # the existing fact again
                    fact("Uses Vim keybindings"),
                    fact("uses vim    KEYBINDINGS", confidence=0.99),  # repeated within the reply
                    fact("Uses Vim keybinding"),  # a different text is not a duplicate
                ]
            )
        )
    )
    add(service, "x", user_id="alice")

    result = flush(service, user_id="alice")

    assert result.facts_added == ["Uses Vim keybindings", "Uses Vim keybinding"]
    assert [f["content"] for f in current_facts(data_dir)] == [
        "Prefers dark mode in every editor",
        "Uses Vim keybindings",
        "Uses Vim keybinding",
    ]


def test_facts_to_remove_are_removed_and_their_replacement_added(
    service: MemoryService, llm: ScriptedLLM, data_dir: Path
) -> None:
    lyon, go = existing_fact(1, "Lives in Lyon"), existing_fact(2, "Writes Go")
    seed(service, facts=[lyon, go])
    llm.enqueue(reply(update(facts=[fact("Lives in Berlin", confidence=0.95)], remove=[lyon.id, "fact_deadbeef"])))
    add(service, "I moved from Lyon to Berlin", user_id="alice")

    result = flush(service, user_id="alice")

    assert result.facts_removed == ["Lives in Lyon"]
    assert result.facts_added == ["Lives in Berlin"]
    facts = current_facts(data_dir)
    assert [f["content"] for f in facts] == ["Writes Go", "Lives in Berlin"]
    assert facts[0]["id"] == go.id
    # Gone, or kept only as history (marked as no longer holding).
    assert all(f.get("validTo") for f in stored(data_dir)["facts"] if f["id"] == lyon.id)


def test_a_removed_fact_may_come_back_as_its_new_version(
    service: MemoryService, llm: ScriptedLLM, data_dir: Path
) -> None:
    """Replacing a fact by the same text (to change its confidence) is not a duplicate."""
    old = existing_fact(1, "Lives in Berlin", confidence=0.75)
    seed(service, facts=[old])
    llm.enqueue(reply(update(facts=[fact("lives in berlin", confidence=0.98)], remove=[old.id])))
    add(service, "Yes, I definitely live in Berlin", user_id="alice")

    flush(service, user_id="alice")

    [current] = current_facts(data_dir)
    assert (current["content"], current["confidence"]) == ("lives in berlin", 0.98)
    assert current["id"] != old.id


MALFORMED_FACTS = {
    "unknown category": fact("Likes chess", category="hobby"),
    "empty content": fact(""),
    "no content": {"category": "goal", "confidence": 0.9},
    "confidence over 1": fact("Runs marathons", confidence=1.5),
    "confidence not a number": fact("Runs marathons", confidence="high"),
    "a bare string": "Likes chess",
}


@pytest.mark.parametrize("malformed", list(MALFORMED_FACTS.values()), ids=list(MALFORMED_FACTS))
def test_removals_with_a_malformed_new_fact_reject_the_whole_update(
    service: MemoryService, llm: ScriptedLLM, data_dir: Path, malformed: Any
) -> None:
    lyon = existing_fact(1, "Lives in Lyon")
    seed(service, facts=[lyon])
    before = remembered(data_dir)
    llm.enqueue(
        reply(
            update(
                facts=[fact("Works at Acme"), malformed],
                remove=[lyon.id],
                user={"workContext": section("Alice works at Acme.")},
            )
        )
    )
    add(service, "I moved; and I joined Acme", user_id="alice")

    result = flush(service, user_id="alice")

    assert result.errors and "reject" in result.errors[0]
    assert (result.facts_added, result.facts_removed, result.sections_updated) == ([], [], [])
    assert result.pending_pages == 1
    assert remembered(data_dir) == before

    llm.enqueue(reply(update(facts=[fact("Lives in Berlin")], remove=[lyon.id])))
    fixed = flush(service, user_id="alice")

    assert fixed.errors == [] and fixed.pending_pages == 0
    assert [f["content"] for f in current_facts(data_dir)] == ["Lives in Berlin"]


@pytest.mark.parametrize("malformed", list(MALFORMED_FACTS.values()), ids=list(MALFORMED_FACTS))
def test_a_malformed_new_fact_without_removals_is_skipped_alone(
    service: MemoryService, llm: ScriptedLLM, data_dir: Path, malformed: Any
) -> None:
    llm.enqueue(
        reply(
            update(
                facts=[fact("Works at Acme"), malformed, fact("Has a cat named Miso", "context", 0.95)],
                user={"workContext": section("Alice works at Acme.")},
            )
        )
    )
    add(service, "I joined Acme. My cat Miso says hi", user_id="alice")

    result = flush(service, user_id="alice")

    assert result.errors == [] and result.pending_pages == 0
    assert result.facts_added == ["Works at Acme", "Has a cat named Miso"]
    document = stored(data_dir)
    assert [f["content"] for f in current_facts(data_dir)] == ["Works at Acme", "Has a cat named Miso"]
    assert document["user"]["workContext"]["summary"] == "Alice works at Acme."


def test_whitespace_only_content_is_never_stored(service: MemoryService, llm: ScriptedLLM, data_dir: Path) -> None:
    lyon = existing_fact(1, "Lives in Lyon")
    seed(service, facts=[lyon])
    llm.enqueue(reply(update(facts=[fact("   \n")], remove=[lyon.id], knowledge=["  "])))
    add(service, "x", user_id="alice")

    flush(service, user_id="alice")

    document = stored(data_dir)
    assert all(f["content"].strip() for f in current_facts(data_dir))
    assert all(k["content"].strip() for k in document["assistantKnowledge"])
    assert [f["content"] for f in current_facts(data_dir)] == ["Lives in Lyon"]  # the update was rejected whole


def test_facts_over_max_facts_are_trimmed_by_confidence(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    service = make_service(memory={"max_facts": 10})  # the least allowed
    weakest = existing_fact(0, "Existing weakest", confidence=0.71)
    others = [existing_fact(n, f"Existing {n}", confidence=0.8) for n in range(1, 9)]
    seed(service, facts=[weakest, *others])  # 9 facts
    llm.enqueue(
        reply(
            update(
                facts=[
                    fact("New strong", confidence=0.95),
                    fact("New weak", confidence=0.72),
                    fact("New medium", confidence=0.9),
                ]
            )
        )
    )
    add(service, "x", user_id="alice")

    flush(service, user_id="alice")

    facts = current_facts(data_dir)
    assert len(facts) == 10
    # The two least confident (one old, one new) went; the rest keep their order.
    assert [f["content"] for f in facts] == [f"Existing {n}" for n in range(1, 9)] + ["New strong", "New medium"]


def test_equal_confidence_trimming_keeps_the_newer_facts(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    service = make_service(memory={"max_facts": 10})
    seed(service, facts=[existing_fact(n, f"Old {n}", confidence=0.8) for n in range(10)])
    llm.enqueue(reply(update(facts=[fact("New A", confidence=0.8), fact("New B", confidence=0.8)])))
    add(service, "x", user_id="alice")

    flush(service, user_id="alice")

    assert [f["content"] for f in current_facts(data_dir)] == [f"Old {n}" for n in range(2, 10)] + ["New A", "New B"]


def test_flush_does_not_report_a_fact_that_was_trimmed_away_at_once(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    service = make_service(memory={"max_facts": 10})
    seed(service, facts=[existing_fact(n, f"Old {n}", confidence=0.95) for n in range(10)])
    llm.enqueue(reply(update(facts=[fact("Barely confident", confidence=0.75)])))
    add(service, "x", user_id="alice")

    result = flush(service, user_id="alice")

    assert "Barely confident" not in [f["content"] for f in current_facts(data_dir)]
    assert result.facts_added == []


def test_upload_mentions_are_stripped_from_summaries_facts_and_knowledge(
    service: MemoryService, llm: ScriptedLLM, data_dir: Path
) -> None:
    llm.enqueue(
        reply(
            update(
                user={
                    "workContext": section(
                        "Alice is a data engineer at Acme. She uploaded a file with the Q3 numbers. "
                        "She prefers concise answers."
                    ),
                    "personalContext": section("The user attached two files to the chat."),  # nothing else left
                    "topOfMind": section("她在准备季度报告。她上传了一个表格。她下周休假。"),
                },
                facts=[
                    fact("Uploaded the sales file for review"),
                    fact("Files attached: report.pdf and notes.txt"),
                    fact("用户上传了季度报告"),
                    fact("Works with Q3 sales numbers"),
                ],
                knowledge=["Read the attached file and summarised it", "Recommended DuckDB for the Q3 analysis"],
            )
        )
    )
    add(service, "Here's my Q3 file (uploaded). I'm a data engineer at Acme", user_id="alice")

    result = flush(service, user_id="alice")

    document = stored(data_dir)
    assert document["user"]["workContext"]["summary"] == (
        "Alice is a data engineer at Acme. She prefers concise answers."
    )
    assert document["user"]["personalContext"]["summary"] == ""
    assert document["user"]["topOfMind"]["summary"] == "她在准备季度报告。她下周休假。"
    assert [f["content"] for f in current_facts(data_dir)] == ["Works with Q3 sales numbers"]
    assert [k["content"] for k in document["assistantKnowledge"]] == ["Recommended DuckDB for the Q3 analysis"]
    assert "user.personalContext" not in result.sections_updated
    assert "upload" not in json.dumps(document, ensure_ascii=False).lower()


def test_new_facts_get_an_id_a_timestamp_and_their_thread_as_source(
    service: MemoryService, llm: ScriptedLLM, data_dir: Path
) -> None:
    llm.enqueue(reply(update(facts=[fact("From a thread")])), reply(update(facts=[fact("From no thread")])))
    add(service, "x", user_id="alice", thread_id="chat-42")
    flush(service, user_id="alice")
    add(service, "y", user_id="alice")
    flush(service, user_id="alice")

    facts = current_facts(data_dir)
    assert [(f["content"], f["source"]) for f in facts] == [("From a thread", "chat-42"), ("From no thread", "unknown")]
    for stored_fact in facts:
        assert FACT_ID.match(stored_fact["id"]), stored_fact["id"]
        assert TIMESTAMP.match(stored_fact["createdAt"])
    assert facts[0]["id"] != facts[1]["id"]


def test_correction_facts_keep_source_error_and_others_drop_it(
    service: MemoryService, llm: ScriptedLLM, data_dir: Path
) -> None:
    llm.enqueue(
        reply(
            update(
                facts=[
                    fact(
                        "Alice's project uses Rust, not Go",
                        "correction",
                        0.95,
                        sourceError="Assumed the project uses Go",
                    ),
                    fact("Prefers short answers", "preference", 0.9, sourceError="should not be kept"),
                ]
            )
        )
    )
    add(service, "That's wrong, the project is in Rust", "Sorry, Rust it is", user_id="alice")

    flush(service, user_id="alice")

    correction, preference = current_facts(data_dir)
    assert (correction["category"], correction["sourceError"]) == ("correction", "Assumed the project uses Go")
    assert preference["category"] == "preference"
    assert preference.get("sourceError") is None


def test_assistant_knowledge_is_stored_deduplicated_and_capped(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    service = make_service(long_term_knowledge_capacity=2)
    llm.enqueue(
        reply(
            update(
                knowledge=[
                    {"content": "Recommended PostgreSQL over MySQL", "confidence": 0.9},
                    "Adopted snake_case for all examples",  # a bare string is accepted (confidence 0.8)
                    {"content": "recommended  postgresql over mysql", "confidence": 0.99},  # duplicate
                    {"content": "Offered a migration checklist", "confidence": 0.95},
                    {"confidence": 0.9},  # malformed: skipped
                ]
            )
        )
    )
    add(service, "Which database?", "PostgreSQL; here is a checklist", user_id="alice", thread_id="db")

    result = flush(service, user_id="alice")

    # Only what was kept is reported: the bare string (0.8) was trimmed at once.
    assert result.assistant_knowledge_added == ["Recommended PostgreSQL over MySQL", "Offered a migration checklist"]
    knowledge = stored(data_dir)["assistantKnowledge"]
    assert [k["content"] for k in knowledge] == ["Recommended PostgreSQL over MySQL", "Offered a migration checklist"]
    assert all(k["source"] == "db" and re.match(r"^know_[0-9a-f]{8}$", k["id"]) for k in knowledge)
    profile = service.get_user_profile(ProfileRequest.build(user_id="alice", include_assistant_knowledge=True))
    assert [k.content for k in profile.assistant_knowledge or []] == [k["content"] for k in knowledge]


def test_the_users_language_is_kept(service: MemoryService, llm: ScriptedLLM, data_dir: Path) -> None:
    summary = "用户是上海的一名后端工程师，主要使用 Go 和 PostgreSQL。她喜欢简洁、直接的回答！"
    llm.enqueue(
        reply(
            update(
                user={"workContext": section(summary)},
                facts=[fact("喜欢简洁的回答", "preference", 0.95)],
            )
        )
    )
    add(service, "我是上海的后端工程师，主要写 Go。回答简洁一点。", "好的！", user_id="alice")

    flush(service, user_id="alice")

    document = stored(data_dir)
    assert document["user"]["workContext"]["summary"] == summary
    assert [f["content"] for f in current_facts(data_dir)] == ["喜欢简洁的回答"]
    assert "我是上海的后端工程师" in conversation_of(llm.requests[0])  # sent as is, not escaped


def test_the_request_carries_the_current_memory_and_the_exchanges_in_order(
    service: MemoryService, llm: ScriptedLLM
) -> None:
    known = existing_fact(7, "Lives in Lyon")
    seed(service, facts=[known], user={"workContext": Section(summary="Alice works at Acme.")})
    for number in range(3):
        add(service, f"user message {number}", f"agent answer {number}", user_id="alice", thread_id="t")

    flush(service, user_id="alice")

    [request] = llm.requests
    assert request["messages"][0]["role"] == "system"
    text = conversation_of(request)
    assert known.id in text and "Lives in Lyon" in text and "Alice works at Acme." in text
    positions = [text.index(f"user message {n}") for n in range(3)]
    assert positions == sorted(positions)
    assert all(f"agent answer {n}" in text for n in range(3))


def test_a_long_backlog_is_sent_in_batches_and_each_page_only_once(service: MemoryService, llm: ScriptedLLM) -> None:
    total = MAX_BATCH_PAGES + 5
    for number in range(total):
        add(service, f"exchange number {number:03d}", user_id="alice", thread_id="t")
    llm.default = reply(update(facts=[fact("Backlog fact")]))

    result = flush(service, user_id="alice")

    assert (result.llm_calls, result.pages_analysed, result.pending_pages) == (2, total, 0)
    first, second = (conversation_of(r) for r in llm.requests)
    assert all(f"exchange number {n:03d}" in first for n in range(MAX_BATCH_PAGES))
    assert not any(f"exchange number {n:03d}" in first for n in range(MAX_BATCH_PAGES, total))
    assert all(f"exchange number {n:03d}" in second for n in range(MAX_BATCH_PAGES, total))
    assert not any(f"exchange number {n:03d}" in second for n in range(MAX_BATCH_PAGES))
    assert result.facts_added == ["Backlog fact"]  # the second batch repeats it: skipped as a duplicate

    again = flush(service, user_id="alice")

    assert (again.llm_calls, again.pages_analysed, again.pending_pages) == (0, 0, 0)
    assert len(llm.requests) == 2


# --- correction and reinforcement signals ------------------------------------------------------

CORRECTIONS = [
    "That's wrong, I said Rust.",
    "you misunderstood me",
    "Try again please",
    "不对，是 Rust",
    "你理解错了",
    "重新来",
    "THATS WRONG",
    "No, that's not what I asked",
    "That’s wrong, the deadline is Friday",
]  # a typographic apostrophe, as phones type it
REINFORCEMENTS = [
    "Exactly right, thanks",
    "Perfect!",
    "keep doing that",
    "完全正确",
    "对，就是这个意思",
    "这正是我想要的",
    "Yes, that’s right",
]
NEUTRAL = ["What's the weather in Lyon?", "Can you write a haiku about autumn?", "I like tea more than coffee."]


@pytest.mark.parametrize("text", CORRECTIONS)
def test_a_correction_sets_the_correction_hint(service: MemoryService, llm: ScriptedLLM, text: str) -> None:
    add(service, text, "Sorry, let me fix that", user_id="alice")
    flush(service, user_id="alice")

    request = conversation_of(llm.requests[0])
    assert CORRECTION_HINT in request
    assert REINFORCEMENT_HINT not in request


@pytest.mark.parametrize("text", REINFORCEMENTS)
def test_a_confirmation_sets_the_reinforcement_hint(service: MemoryService, llm: ScriptedLLM, text: str) -> None:
    add(service, text, "Glad it helped", user_id="alice")
    flush(service, user_id="alice")

    request = conversation_of(llm.requests[0])
    assert REINFORCEMENT_HINT in request
    assert CORRECTION_HINT not in request


def test_plain_conversation_sets_no_hint(service: MemoryService, llm: ScriptedLLM) -> None:
    for text in NEUTRAL:
        add(service, text, "Sure", user_id="alice")
    flush(service, user_id="alice")

    request = conversation_of(llm.requests[0])
    assert "Hints:" not in request
    assert CORRECTION_HINT not in request and REINFORCEMENT_HINT not in request


def test_signals_from_several_pending_pages_are_merged(service: MemoryService, llm: ScriptedLLM) -> None:
    add(service, "No, that's wrong: the deadline is Friday", "Sorry, Friday it is", user_id="alice", thread_id="t")
    add(service, "Thanks. Now draft the email", "Here is the draft", user_id="alice", thread_id="t")
    add(service, "Perfect, keep doing that", "Will do", user_id="alice", thread_id="t")
    add(service, "What's next on my list?", "The budget review", user_id="alice", thread_id="t")

    flush(service, user_id="alice")

    [request] = llm.requests
    text = conversation_of(request)
    assert CORRECTION_HINT in text and REINFORCEMENT_HINT in text


def test_a_hint_does_not_leak_into_a_later_update(service: MemoryService, llm: ScriptedLLM) -> None:
    add(service, "That's wrong, it's Rust", "Sorry", user_id="alice", thread_id="t")
    flush(service, user_id="alice")
    add(service, "What should I cook tonight?", "Risotto", user_id="alice", thread_id="t")
    flush(service, user_id="alice")

    first, second = (conversation_of(r) for r in llm.requests)
    assert CORRECTION_HINT in first
    assert CORRECTION_HINT not in second


# --- LLM failures ------------------------------------------------------------------------------


def assert_still_pending_and_untouched(result: FlushResult, data_dir: Path, pages: int, before: bytes | None) -> None:
    assert result.errors, "the failure is reported"
    assert result.pages_analysed == 0 and result.facts_added == []
    assert result.pending_pages == pages
    path = memory_file(data_dir)
    assert (path.read_bytes() if path.exists() else None) == before


@pytest.mark.integration
@pytest.mark.parametrize(("status", "attempts"), [(429, 3), (500, 2), (503, 2)])
def test_rate_limits_and_server_errors_are_retried_then_left_pending(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path, status: int, attempts: int
) -> None:
    service = make_service(memory={"llm_max_attempts": attempts})
    add(service, "I write Go at Acme", user_id="alice")
    llm.enqueue(*[Step(status=status)] * attempts)

    result = flush(service, user_id="alice")

    assert len(llm.requests) == attempts
    assert_still_pending_and_untouched(result, data_dir, pages=1, before=None)
    assert str(status) in result.errors[0]

    llm.enqueue(reply(GOOD))
    retried = flush(service, user_id="alice")

    assert retried.errors == [] and retried.facts_added == ["Alice writes Go at Acme"]
    document = memory_file(data_dir).read_text(encoding="utf-8")
    assert "scripted failure" not in document and "LLM endpoint" not in document and "rate limit" not in document


@pytest.mark.integration
def test_a_timeout_is_retried_then_left_pending(make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path) -> None:
    service = make_service(memory={"llm_timeout_seconds": 0.3, "llm_max_attempts": 2})
    before = seed(service, facts=[existing_fact(1, "Lives in Lyon")])
    add(service, "I moved to Berlin", user_id="alice")
    llm.enqueue(reply(GOOD, delay=1.5), reply(GOOD, delay=1.5))

    result = flush(service, user_id="alice")

    assert len(llm.requests) == 2
    assert_still_pending_and_untouched(result, data_dir, pages=1, before=before)
    assert "slow" in result.errors[0] or "unreachable" in result.errors[0]


@pytest.mark.integration
def test_an_unreachable_endpoint_is_retried_then_left_pending(make_service: ServiceFactory, data_dir: Path) -> None:
    service = make_service(base_url=f"http://127.0.0.1:{closed_port()}/v1", memory={"llm_max_attempts": 2})
    add(service, "I moved to Berlin", user_id="alice")

    result = flush(service, user_id="alice")

    assert_still_pending_and_untouched(result, data_dir, pages=1, before=None)
    assert "unreachable" in result.errors[0]
    assert result.extraction == "server"


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_a_refused_request_is_not_retried(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path, status: int
) -> None:
    service = make_service(memory={"llm_max_attempts": 3})
    add(service, "I moved to Berlin", user_id="alice")
    llm.enqueue(Step(status=status))

    result = flush(service, user_id="alice")

    assert len(llm.requests) == 1
    assert_still_pending_and_untouched(result, data_dir, pages=1, before=None)
    assert str(status) in result.errors[0] and "key" in result.errors[0]


def test_a_broken_response_body_changes_nothing(service: MemoryService, llm: ScriptedLLM, data_dir: Path) -> None:
    add(service, "I moved to Berlin", user_id="alice")
    llm.enqueue(
        Step(raw=b'{"id": "chatcmpl-1", "choices": [{"mess'), Step(raw=b'{"id": "chatcmpl-1", "choices": [{"mess')
    )

    result = flush(service, user_id="alice")

    assert_still_pending_and_untouched(result, data_dir, pages=1, before=None)


@pytest.mark.integration
def test_a_broken_response_body_is_retried_like_other_transient_failures(
    service: MemoryService, llm: ScriptedLLM
) -> None:
    add(service, "I moved to Berlin", user_id="alice")
    llm.enqueue(Step(raw=b'{"id": "chatcmpl-1", "choices": [{"mess'), reply(GOOD))

    result = flush(service, user_id="alice")

    assert len(llm.requests) == 2
    assert result.errors == [] and result.facts_added == ["Alice writes Go at Acme"]


# --- flush_memory ------------------------------------------------------------------------------


def test_flush_reports_what_changed(service: MemoryService, llm: ScriptedLLM, data_dir: Path) -> None:
    old = existing_fact(1, "Lives in Lyon")
    seed(service, facts=[old])
    llm.enqueue(
        reply(
            update(
                user={"workContext": section("Alice is a backend engineer at Acme."), "topOfMind": section("Moving.")},
                facts=[fact("Lives in Berlin", confidence=0.95), fact("Works at Acme", "context", 0.9)],
                remove=[old.id],
                knowledge=["Suggested a moving checklist"],
            )
        )
    )
    add(service, "I moved to Berlin and joined Acme", "Congrats! Here's a checklist", user_id="alice")
    add(service, "Thanks", "You're welcome", user_id="alice")

    result = flush(service, user_id="alice")

    assert result.model_dump() == {
        "status": "success",
        "user_id": "alice",
        "agent_name": None,
        "extraction": "server",
        "pages_analysed": 2,
        "llm_calls": 1,
        "facts_added": ["Lives in Berlin", "Works at Acme"],
        "facts_removed": ["Lives in Lyon"],
        "sections_updated": ["user.workContext", "user.topOfMind"],
        "assistant_knowledge_added": ["Suggested a moving checklist"],
        "pending_pages": 0,
        "set_aside_pages": 0,
        "errors": [],
        "notes": [],
    }


def test_flush_is_scoped_to_one_user_and_agent(service: MemoryService, llm: ScriptedLLM, data_dir: Path) -> None:
    add(service, "alice's own exchange", user_id="alice")
    add(service, "alice's exchange with her coding agent", user_id="alice", agent_name="coder")
    add(service, "bob's exchange", user_id="bob")
    llm.default = reply(update(facts=[fact("Learned something")]))

    result = flush(service, user_id="alice")

    assert (result.pages_analysed, result.pending_pages) == (1, 0)
    [request] = llm.requests
    text = conversation_of(request)
    assert "alice's own exchange" in text
    assert "coding agent" not in text and "bob's exchange" not in text
    assert not memory_file(data_dir, "bob").exists()
    assert not memory_file(data_dir, "alice", "coder").exists()
    assert flush(service, user_id="bob", agent_name=None).pages_analysed == 1
    assert flush(service, user_id="alice", agent_name="coder").pages_analysed == 1
    assert len(llm.requests) == 3


def test_flush_of_several_threads_runs_one_update_per_thread(service: MemoryService, llm: ScriptedLLM) -> None:
    add(service, "thread one, first", user_id="alice", thread_id="one")
    add(service, "thread two, first", user_id="alice", thread_id="two")
    add(service, "thread one, second", user_id="alice", thread_id="one")
    add(service, "no thread at all", user_id="alice")

    result = flush(service, user_id="alice")

    assert (result.llm_calls, result.pages_analysed, result.pending_pages) == (3, 4, 0)
    texts = [conversation_of(r) for r in llm.requests]
    assert "thread one, first" in texts[0] and "thread one, second" in texts[0]
    assert "thread two" not in texts[0] and "no thread" not in texts[0]
    assert sum("thread two, first" in t for t in texts) == 1
    assert sum("no thread at all" in t for t in texts) == 1


def test_flush_with_nothing_pending_calls_no_llm(service: MemoryService, llm: ScriptedLLM) -> None:
    result = flush(service, user_id="nobody")

    assert (result.extraction, result.llm_calls, result.pending_pages, result.errors) == ("server", 0, 0, [])
    assert llm.requests == []


def test_flush_without_an_llm_says_extraction_is_off_and_how_to_turn_it_on(
    make_service: ServiceFactory, data_dir: Path
) -> None:
    service = make_service(base_url=None)
    add(service, "I moved to Berlin", user_id="alice")
    add(service, "I joined Acme", user_id="alice")

    result = flush(service, user_id="alice")

    assert result.extraction == "off"
    assert (result.pending_pages, result.pages_analysed, result.llm_calls, result.errors) == (2, 0, 0, [])
    notes = " ".join(result.notes)
    assert "openai_base_url" in notes and "OPENAI_BASE_URL" in notes
    assert not memory_file(data_dir).exists()


def test_flush_with_memory_disabled_says_so(make_service: ServiceFactory, llm: ScriptedLLM) -> None:
    service = make_service(memory={"enabled": False})
    add(service, "I moved to Berlin", user_id="alice")

    result = flush(service, user_id="alice")

    assert (result.extraction, result.pending_pages) == ("off", 1)
    assert any("enabled" in note for note in result.notes)
    assert llm.requests == []


# --- what the tools return after an update ------------------------------------------------------


def test_profile_and_retrieval_show_the_update(service: MemoryService, llm: ScriptedLLM) -> None:
    llm.enqueue(
        reply(
            update(
                user={
                    "workContext": section("Alice is a backend engineer at Acme, working in Go."),
                    "personalContext": section("Alice speaks French and English."),
                },
                history={"recentMonths": section("Alice moved from Lyon to Berlin.")},
                facts=[
                    fact("Prefers concise answers", "preference", 0.75),
                    fact("Has a cat named Miso", "context", 0.99),
                    fact("Knows Go and PostgreSQL", "knowledge", 0.85),
                ],
            )
        )
    )
    add(service, "I'm a Go engineer at Acme; I moved to Berlin with my cat Miso", user_id="alice")
    flush(service, user_id="alice")

    profile = service.get_user_profile(ProfileRequest.build(user_id="alice"))

    assert profile.user.workContext.summary == "Alice is a backend engineer at Acme, working in Go."
    assert profile.user.personalContext.summary == "Alice speaks French and English."
    assert profile.history.recentMonths.summary == "Alice moved from Lyon to Berlin."
    assert [f.content for f in profile.facts or []] == [
        "Has a cat named Miso",
        "Knows Go and PostgreSQL",
        "Prefers concise answers",
    ]
    assert TIMESTAMP.match(profile.lastUpdated)

    recalled = service.retrieve_memory(RetrieveMemoryRequest.build(query="what is my cat called", user_id="alice"))

    assert recalled.retrieved_user_knowledge[0].content == "Has a cat named Miso"
    assert recalled.user_profile.user.workContext.summary.startswith("Alice is a backend engineer")
