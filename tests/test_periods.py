"""Periods named in a query's words, resolved against a fixed moment: English and Chinese."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_mcp.periods import periods_in

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
