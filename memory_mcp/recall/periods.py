"""Periods a query names in words ("last week", "in March", "two years ago", "昨天"), resolved
against the present moment.

Recall uses them as a soft hint, never a filter: a period is guessed from words, and people are
loose with time ("last week" said of something nine days ago). So each period is widened by a
margin before use, and pages inside it are lifted rather than the others dropped (a hard window
is what `since` / `until` are for).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from memory_mcp.base.clock import format_timestamp

if TYPE_CHECKING:
    from memory_mcp.store.page_sequence import PageSequence

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")  # fmt: skip
_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                 "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "couple of": 2, "few": 3}  # fmt: skip
_CHINESE_DIGITS = {"一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30.4, "year": 365.25}
_CHINESE_UNITS = {"天": "day", "日": "day", "周": "week", "星期": "week", "个星期": "week", "个月": "month", "月": "month",
                  "年": "year"}  # fmt: skip

_NUMBER = r"\d{1,3}|" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True))
_AGO = re.compile(rf"\b({_NUMBER})\s+(day|week|month|year)s?\s+ago\b")
_LAST_OR_THIS = re.compile(r"\b(last|past|previous|this)\s+(week|month|year)\b")
_LATEST = re.compile(
    rf"\b(?:in\s+|within\s+|over\s+|during\s+)?(?:the\s+)?(?:last|past|previous)\s+({_NUMBER})\s+(day|week|month|year)s?\b"
)
_IN_MONTH = re.compile(rf"\b(?:in|during|since|of|last)\s+({'|'.join(MONTHS)})(?:\s+(\d{{4}}))?\b")
_DAY_WORDS = re.compile(r"\b(yesterday|today|tonight|this morning|day before yesterday)\b")
_CHINESE_NUMBER = rf"\d{{1,3}}|[{''.join(_CHINESE_DIGITS)}]{{1,3}}"
_CHINESE_AGO = re.compile(rf"({_CHINESE_NUMBER})\s*(个星期|星期|个月|周|天|日|月|年)(?:以)?前")
_CHINESE_MONTH = re.compile(rf"(?:(\d{{4}})年)?(?<![上这本个{''.join(_CHINESE_DIGITS)}])({_CHINESE_NUMBER})月(?!前)")
_CHINESE_FIXED = {
    "前天": ("day", -2),
    "昨天": ("day", -1),
    "昨晚": ("day", -1),
    "今天": ("day", 0),
    "上周": ("week", -1),
    "上星期": ("week", -1),
    "上个星期": ("week", -1),
    "这周": ("week", 0),
    "本周": ("week", 0),
    "这个星期": ("week", 0),
    "上个月": ("month", -1),
    "上月": ("month", -1),
    "这个月": ("month", 0),
    "本月": ("month", 0),
    "前年": ("year", -2),
    "去年": ("year", -1),
    "今年": ("year", 0),
}
# How far beyond a named period a page still counts as in it, by the period's length.
_MARGIN = {
    "day": timedelta(hours=12),
    "week": timedelta(days=1),
    "month": timedelta(days=3),
    "year": timedelta(days=15),
}


@dataclass(frozen=True)
class Period:
    """From `start` to `end`, both in the stored timestamp form, margins included."""

    start: str
    end: str

    def holds(self, timestamp: str) -> bool:
        return self.start <= timestamp <= self.end


def periods_in(query: str, now: datetime) -> list[Period]:
    """The periods `query` names, relative to `now` (aware, UTC), each widened by its margin."""
    return [
        Period(format_timestamp(start - _MARGIN[unit]), format_timestamp(min(end + _MARGIN[unit], now)))
        for unit, start, end in _named(query.casefold(), now)
    ]


def without_relative_times(query: str) -> str:
    """`query` without the words that name a time relative to now ("last week", "three days ago",
    "yesterday"): they say when, which the periods carry (recall drops them when the period holds
    memory), not what, and matched as words they find whatever mentions a week or the past.
    Names of months stay: pages say them too."""
    text = query.casefold()
    for pattern in (_DAY_WORDS, _LAST_OR_THIS, _LATEST, _AGO, _CHINESE_AGO):
        text = pattern.sub(" ", text)
    for phrase in _CHINESE_FIXED:
        text = text.replace(phrase, " ")
    return text


def _named(text: str, now: datetime) -> Iterator[tuple[str, datetime, datetime]]:
    for match in _DAY_WORDS.finditer(text):
        yield _calendar("day", now, {"yesterday": -1, "day before yesterday": -2}.get(match.group(1), 0))
    for match in _LAST_OR_THIS.finditer(text):
        yield _calendar(match.group(2), now, 0 if match.group(1) == "this" else -1)
    for match in _LATEST.finditer(text):
        count = _NUMBER_WORDS.get(match.group(1)) or int(match.group(1))
        yield match.group(2), now - timedelta(days=count * _UNIT_DAYS[match.group(2)]), now
    for match in _AGO.finditer(text):
        yield _ago(match.group(2), _NUMBER_WORDS.get(match.group(1)) or int(match.group(1)), now)
    for match in _IN_MONTH.finditer(text):
        yield _month(MONTHS.index(match.group(1)) + 1, int(match.group(2)) if match.group(2) else None, now)
    for phrase, (unit, offset) in _CHINESE_FIXED.items():
        if phrase in text:
            yield _calendar(unit, now, offset)
    for match in _CHINESE_AGO.finditer(text):
        yield _ago(_CHINESE_UNITS[match.group(2)], _chinese_number(match.group(1)), now)
    for match in _CHINESE_MONTH.finditer(text):
        month = _chinese_number(match.group(2))
        if 1 <= month <= 12:
            yield _month(month, int(match.group(1)) if match.group(1) else None, now)


def _calendar(unit: str, now: datetime, offset: int) -> tuple[str, datetime, datetime]:
    """The day, week (Monday first), month or year `offset` of them from the current one."""
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "day":
        start = day + timedelta(days=offset)
        return unit, start, start + timedelta(days=1)
    if unit == "week":
        start = day - timedelta(days=day.weekday()) + timedelta(weeks=offset)
        return unit, start, start + timedelta(weeks=1)
    if unit == "month":
        month_index = day.year * 12 + day.month - 1 + offset
        start = day.replace(year=month_index // 12, month=month_index % 12 + 1, day=1)
        return unit, start, _next_month(start)
    start = day.replace(year=day.year + offset, month=1, day=1)
    return unit, start, start.replace(year=start.year + 1)


def _ago(unit: str, count: int, now: datetime) -> tuple[str, datetime, datetime]:
    """About `count` units before now: the unit-long stretch centred there."""
    centre = now - timedelta(days=count * _UNIT_DAYS[unit])
    half = timedelta(days=_UNIT_DAYS[unit] / 2)
    return unit, centre - half, centre + half


def _month(month: int, year: int | None, now: datetime) -> tuple[str, datetime, datetime]:
    """That month of `year`, or its latest occurrence that has begun."""
    if year is None:
        year = now.year if month <= now.month else now.year - 1
    start = now.replace(year=year, month=month, day=1, hour=0, minute=0, second=0, microsecond=0)
    return "month", start, _next_month(start)


def _next_month(start: datetime) -> datetime:
    return start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)


def _chinese_number(text: str) -> int:
    """1-99 written in digits or in Chinese numerals (十, 十二, 二十, 二十三)."""
    if text.isdigit():
        return int(text)
    if "十" not in text:
        return _CHINESE_DIGITS.get(text, 0)
    tens, _, ones = text.partition("十")
    return (_CHINESE_DIGITS.get(tens, 1) if tens else 1) * 10 + (_CHINESE_DIGITS.get(ones, 0) if ones else 0)


def time_window(pages: PageSequence, since: str | None, until: str | None) -> Any:
    """Which pages (by their timestamps) fall between `since` and `until`, both included, as a
    boolean numpy array; None when neither is given (and the timestamps are not copied out)."""
    if since is None and until is None:
        return None
    return pages_within(pages.timestamps, [Period(since or "", until or "\uffff")])


def pages_within(timestamps: Sequence[str], periods: Sequence[Period]) -> Any:
    """Which pages (by their `timestamps`) fall in any of `periods`. Stored timestamps share one
    form: they compare as text."""
    import numpy as np

    return np.fromiter(
        (any(period.holds(stamp) for period in periods) for stamp in timestamps), dtype=bool, count=len(timestamps)
    )
