"""Periods named in a query's words, resolved against a fixed moment: English and Chinese; and what
they do for recall on the synthetic set of bench/relative_dates.py."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory_mcp.base.clock import now
from memory_mcp.base.settings import Settings
from memory_mcp.recall.periods import periods_in
from memory_mcp.service.memory_service import MemoryService

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


def test_time_words_lift_the_exchange_from_then_on_the_synthetic_set(data_dir: Path) -> None:
    """bench/relative_dates.py's memory: the same activities again and again over two years, told
    apart only by when. By words alone the right one comes first about one time in seven; a quarter
    of the questions name a period their exchange falls a little outside of."""
    from bench.relative_dates import build, measure

    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=1, heat_ranking_weight=0))
    questions = build(service, now(), random.Random(5))

    at1, at5 = measure(service, questions, hard=False)

    assert at1 >= 0.6 and at5 >= 0.9, (at1, at5)
