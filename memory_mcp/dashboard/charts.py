"""Pictures of memory over time, drawn here as SVG: no chart library, nothing fetched."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta

WEEKS_SHOWN = 26


@dataclass(frozen=True)
class WeeklySeries:
    """Counts per week (Mondays, oldest first) of named series, for a bar chart."""

    weeks: list[date]
    series: dict[str, list[int]]

    @property
    def peak(self) -> int:
        return max((max(counts) for counts in self.series.values() if counts), default=0)


def weekly(named: dict[str, Iterable[str]], until: date, weeks: int = WEEKS_SHOWN) -> WeeklySeries:
    """How many of each series' timestamps fall in each of the `weeks` weeks up to `until`;
    timestamps that are not times are left out."""
    last_monday = until - timedelta(days=until.weekday())
    mondays = [last_monday - timedelta(weeks=n) for n in range(weeks - 1, -1, -1)]
    series = {}
    for name, stamps in named.items():
        counted = Counter(_monday_of(stamp) for stamp in stamps)
        series[name] = [counted.get(monday, 0) for monday in mondays]
    return WeeklySeries(mondays, series)


def _monday_of(timestamp: str) -> date | None:
    try:
        day = datetime.fromisoformat(timestamp).date()
    except ValueError:
        return None
    return day - timedelta(days=day.weekday())
