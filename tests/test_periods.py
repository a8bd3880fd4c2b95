"""Periods named in a query's words, resolved against a fixed moment: English and Chinese; and what
they do for recall on the synthetic set of bench/relative_dates.py."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

import pytest
from scripted_llm import ScriptedLLM

from memory_mcp.base.clock import now
from memory_mcp.base.settings import EmbeddingSettings, Settings
from memory_mcp.models import AddMemoryRequest, RetrieveMemoryRequest
from memory_mcp.recall import scope_recall
from memory_mcp.recall.periods import periods_in, without_relative_times
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

NOW = datetime(2026, 11, 24, 15, 0, tzinfo=UTC)  # a Tuesday


@pytest.mark.parametrize(
    ("query", "span"),
    [
        ("what did I say yesterday", ("2026-11-22T12:00:00Z", "2026-11-24T12:00:00Z")),
        ("the day before yesterday", ("2026-11-21T12:00:00Z", "2026-11-23T12:00:00Z")),
        ("what did we plan last week", ("2026-11-15T00:00:00Z", "2026-11-24T00:00:00Z")),
        ("anything this week?", ("2026-11-22T00:00:00Z", "2026-11-24T15:00:00Z")),
        ("the trip last month", ("2026-09-28T00:00:00Z", "2026-11-04T00:00:00Z")),
        ("books I read last year", ("2024-12-17T00:00:00Z", "2026-01-16T00:00:00Z")),
        ("the concert in March", ("2026-02-26T00:00:00Z", "2026-04-04T00:00:00Z")),
        ("the concert in December", ("2025-11-28T00:00:00Z", "2026-01-04T00:00:00Z")),
        ("the move in March 2024", ("2024-02-27T00:00:00Z", "2024-04-04T00:00:00Z")),
        ("two years ago", ("2024-05-10T12:00:00Z", "2025-06-09T18:00:00Z")),
        ("about 3 weeks ago", ("2026-10-30T03:00:00Z", "2026-11-08T03:00:00Z")),
        ("what I baked in the past two weeks", ("2026-11-09T15:00:00Z", "2026-11-24T15:00:00Z")),
        ("over the last few days", ("2026-11-21T03:00:00Z", "2026-11-24T15:00:00Z")),
        ("我昨天说了什么", ("2026-11-22T12:00:00Z", "2026-11-24T12:00:00Z")),
        ("上周的计划", ("2026-11-15T00:00:00Z", "2026-11-24T00:00:00Z")),
        ("上个月去了哪里", ("2026-09-28T00:00:00Z", "2026-11-04T00:00:00Z")),
        ("去年读的书", ("2024-12-17T00:00:00Z", "2026-01-16T00:00:00Z")),
        ("三个月前", ("2026-08-07T05:24:00Z", "2026-09-12T15:00:00Z")),
        ("两年前的旅行", ("2024-05-10T12:00:00Z", "2025-06-09T18:00:00Z")),
        ("十二月的音乐会", ("2025-11-28T00:00:00Z", "2026-01-04T00:00:00Z")),
        ("2024年3月搬家", ("2024-02-27T00:00:00Z", "2024-04-04T00:00:00Z")),
    ],
)
def test_a_named_period_is_resolved_against_now_with_a_margin(query: str, span: tuple[str, str]) -> None:
    assert [(period.start, period.end) for period in periods_in(query, NOW)] == [span]


@pytest.mark.parametrize("query", ["May I ask something?", "I may go hiking", "weekly review", "3个月的计划", ""])
def test_words_that_only_look_like_a_time_name_none(query: str) -> None:
    assert periods_in(query, NOW) == []


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("How many times did I bake in the past two weeks?", "how many times did i bake  ?"),
        ("What did I say yesterday about the garden", "what did i say   about the garden"),
        ("the milestone I mentioned four weeks ago", "the milestone i mentioned  "),
        ("the concert in March", "the concert in march"),  # a month's name is what pages say too
        ("上周的计划", " 的计划"),
    ],
)
def test_words_naming_a_time_relative_to_now_are_left_to_the_period(query: str, words: str) -> None:
    assert without_relative_times(query) == words


def test_a_time_named_in_the_query_does_not_rank_what_mentions_the_past(data_dir: Path) -> None:
    """ "In the past two weeks" once ranked a talk about Rome's past above the two baking
    exchanges from those weeks: its words matched as words."""
    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=1, heat_ranking_weight=0))
    said = [
        ("2026-11-20 10:00:00", "I baked sourdough bread on Tuesday", "Lovely."),
        (
            "2026-11-05 10:00:00",
            "Rome has so much history from the past",
            "Two thousand years of past times, weeks of sights.",
        ),
        ("2026-11-18 10:00:00", "I baked a chocolate cake for my sister", "Happy birthday to her."),
        ("2026-11-23 10:00:00", "Just a note", "ok"),
    ]
    for timestamp, user_input, agent_response in said:
        service.add_memory(
            AddMemoryRequest.build(user_input=user_input, agent_response=agent_response, timestamp=timestamp)
        )
    with mock.patch.object(scope_recall, "now", lambda: NOW):
        found = service.retrieve_memory(
            RetrieveMemoryRequest.build(
                query="How many times did I bake something in the past two weeks?", max_results=3
            )
        )
    assert [page.user_input for page in found.retrieved_pages][:2] == [said[0][1], said[2][1]]


def test_a_time_named_that_holds_no_memory_is_matched_as_words(data_dir: Path) -> None:
    """Nothing was said last year (by now's clock): the asker may be quoting what was said, so the
    words still count."""
    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=1, heat_ranking_weight=0))
    for user_input in ("I want a road trip to Utah some day", "Last year I went on a road trip to Oregon", "A note"):
        service.add_memory(
            AddMemoryRequest.build(user_input=user_input, agent_response="ok", timestamp="2026-11-20 10:00:00")
        )
    with mock.patch.object(scope_recall, "now", lambda: NOW):
        found = service.retrieve_memory(RetrieveMemoryRequest.build(query="Where did I go on a road trip last year?"))
    assert found.retrieved_pages[0].user_input == "Last year I went on a road trip to Oregon"


def test_a_time_named_whose_only_exchange_is_not_ranked_is_matched_as_words(data_dir: Path) -> None:
    """The only exchange from last week is the newest, shown as the recent conversation and never
    ranked: for the ranking, the time holds nothing, and its words still count."""
    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=1, heat_ranking_weight=0))
    for user_input, timestamp in (
        ("I want a road trip to Utah some day", "2026-10-01 10:00:00"),
        ("Last week I went on a road trip to Oregon", "2026-10-02 10:00:00"),
        ("A note", "2026-11-18 10:00:00"),
    ):
        service.add_memory(AddMemoryRequest.build(user_input=user_input, agent_response="ok", timestamp=timestamp))
    with mock.patch.object(scope_recall, "now", lambda: NOW):
        found = service.retrieve_memory(RetrieveMemoryRequest.build(query="Where did I go on a road trip last week?"))
    assert found.retrieved_pages[0].user_input == "Last week I went on a road trip to Oregon"


def test_time_words_lift_the_exchange_from_then_on_the_synthetic_set(data_dir: Path) -> None:
    """bench/relative_dates.py's memory: the same activities again and again over two years, told
    apart only by when. By words alone the right one comes first about one time in seven; a quarter
    of the questions name a period their exchange falls a little outside of."""
    from bench.relative_dates import build, measure

    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=1, heat_ranking_weight=0))
    questions = build(service, now(), random.Random(5))

    at1, at5 = measure(service, questions, hard=False)

    assert at1 >= 0.6 and at5 >= 0.9, (at1, at5)


def test_a_time_named_lifts_its_exchange_with_vectors_on_too(data_dir: Path, llm: ScriptedLLM) -> None:
    """With vectors the words weigh half or less: the walk from last week, found by its words and
    its time, must not fall below an older exchange that only sounds more like the question (the
    scripted endpoint puts "dog", "greyhound" and "puppy" on one dimension, "car" and "doctor" on
    others)."""
    embeddings = EmbeddingSettings(backend="openai", base_url=llm.base_url, model="concepts-1")
    settings = Settings(data_storage_path=data_dir, short_term_capacity=1, heat_ranking_weight=0, embeddings=embeddings)
    service = MemoryService(settings)
    said = [
        ("2026-11-19 08:00:00", "Walked the dog, then took the car to the garage and saw the doctor"),
        ("2026-09-10 18:00:00", "Our dog met a greyhound and a puppy"),
        ("2026-08-02 10:00:00", "Booked the dentist for Thursday"),
        ("2026-10-12 10:00:00", "Paid the electricity bill"),
        ("2026-11-17 10:00:00", "Ordered new running shoes"),
        ("2026-11-20 10:00:00", "Called my sister about the holidays"),
        ("2026-11-21 10:00:00", "Cleaned the kitchen windows"),
        ("2026-11-23 10:00:00", "Just a note"),
    ]
    try:
        for timestamp, user_input in said:
            service.add_memory(AddMemoryRequest.build(user_input=user_input, agent_response="ok", timestamp=timestamp))
        service.embed_missing("default", None)
        assert len(service.store.read_vectors(Scope("default"), 0)[0]) == len(said)
        with mock.patch.object(scope_recall, "now", lambda: NOW):
            found = service.retrieve_memory(RetrieveMemoryRequest.build(query="What did I do with my dog last week?"))
            older = service.retrieve_memory(RetrieveMemoryRequest.build(query="What did I do with my dog?"))
        assert found.retrieved_pages[0].user_input == said[0][1]
        assert older.retrieved_pages[0].user_input == said[1][1], "without the time, meaning puts the other first"
    finally:
        service.close()
