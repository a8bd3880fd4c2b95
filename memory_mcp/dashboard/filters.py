"""How the dashboard's templates print what is remembered: escaped, with matches marked, times
readable. Each function here is a Jinja2 filter; all of them return safe markup or plain text."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime

from markupsafe import Markup, escape

from memory_mcp.base.projects import project_name
from memory_mcp.memory.sessions import SessionView, session_of
from memory_mcp.recall.terms import index_terms

_WORDS = re.compile(r"(\w+)")  # split keeping the words, so each can be marked or not
_CAMEL_HUMPS = re.compile(r"(?<=[a-z])(?=[A-Z])")  # where workContext becomes two words


def marked(text: str, terms: Iterable[str]) -> Markup:
    """`text`, escaped, with the words that match one of the query's index `terms` in <mark>."""
    wanted = set(terms)
    if not wanted:
        return escape(text)
    return Markup("").join(
        Markup("<mark>{}</mark>").format(part) if wanted & set(index_terms(part)) else escape(part)
        for part in _WORDS.split(text)
    )


def spelled(name: str) -> str:
    """A section's stored name as words: workContext -> Work context."""
    words = _CAMEL_HUMPS.sub(" ", name).lower()
    return words[:1].upper() + words[1:]


def moment(timestamp: str | None) -> Markup:
    """A stored time as a person reads it (2026-11-24 09:31 UTC) in a <time> that keeps the exact
    value; a time without a zone is shown as written, and anything unparsable as it is."""
    if not timestamp:
        return Markup("—")
    try:
        parsed = datetime.fromisoformat(timestamp)
    except ValueError:
        return escape(timestamp)
    if parsed.tzinfo is None:
        shown = parsed.strftime("%Y-%m-%d %H:%M") if "T" in timestamp or " " in timestamp else timestamp
    else:
        shown = parsed.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return Markup('<time datetime="{}">{}</time>').format(timestamp, shown)


def counted(count: int, noun: str) -> str:
    """`count` in groups of thousands and the noun, singular for one: 20,000 exchanges."""
    return f"{count:,} {noun if count == 1 else noun + 's'}"


def session_name(view: SessionView) -> str:
    """thread:trip-planning -> thread trip-planning; day:2026-11-24 -> 2026-11-24 (no thread)."""
    kind, _, key = view.name.partition(":")
    return f"thread {key}" if kind == "thread" else f"{key} (no thread)"


FILTERS = {
    "project_name": project_name,
    "marked": marked,
    "spelled": spelled,
    "moment": moment,
    "counted": counted,
    "session_name": session_name,
    "session": session_of,
}
