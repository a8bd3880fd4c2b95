"""The one clock of the product and the one stored form of a time: UTC, to the second, `Z` suffix."""

from __future__ import annotations

from datetime import UTC, datetime

TIMESTAMP_RULE = "ISO 8601 (2024-05-01T13:56:00Z) or 'YYYY-MM-DD HH:MM:SS'"


def now() -> datetime:
    """The current moment, timezone-aware in UTC."""
    return datetime.now(UTC)


def utc_now() -> str:
    """The current moment in the stored form."""
    return format_timestamp(now())


def format_timestamp(moment: datetime) -> str:
    """Stored form: UTC, second precision, `Z` suffix, the year in four digits (strftime leaves
    years before 1000 short, and those then sorted as the newest). Naive times are taken as UTC.
    Stored forms compare as the times they name."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    utc = moment.astimezone(UTC)
    return f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}Z"


def normalise_timestamp(value: str) -> str:
    """Accept ISO 8601 or `YYYY-MM-DD HH:MM:SS` and return the stored form."""
    try:
        return format_timestamp(datetime.fromisoformat(value.strip()))
    except (ValueError, OverflowError):  # OverflowError: a valid date that leaves the calendar in UTC
        raise ValueError(f"timestamp must be {TIMESTAMP_RULE} (got {value!r:.60})") from None
