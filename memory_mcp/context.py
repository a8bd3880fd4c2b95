"""The `<memory>` block a host puts in its system prompt, never larger than its token budget.

Everything stored is untrusted text (users and models wrote it), so each item is escaped and
flattened onto one line: stored text cannot close the block, open a tag, or start a line that
looks like a fact of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memory_mcp.models import Fact, MemoryDocument, Page
from memory_mcp.tokens import TokenCounter

# Corrections are claimed first, up to this share of the budget: repeating a mistake the user
# already pointed out costs more than missing any other fact.
CORRECTION_SHARE = 0.25
MAX_EXCHANGE_SIDE_CHARS = 600
_AFTER_CORRECTIONS = 1_000_000

_USER_SECTIONS = (("workContext", "Work"), ("personalContext", "Personal"), ("topOfMind", "Current Focus"))
_HISTORY_SECTIONS = (("recentMonths", "Recent"), ("earlierContext", "Earlier"), ("longTermBackground", "Background"))
_HEADINGS = {
    "header": None,
    "user": "## User Context",
    "history": "## History",
    "facts": "## Facts",
    "pages": "## Relevant Past Exchanges",
}


@dataclass(frozen=True)
class _Item:
    section: str
    order: int  # position within its section when rendered
    line: str


@dataclass(frozen=True)
class MemoryContext:
    text: str
    tokens: int
    left_out: dict[str, int]  # section -> items that did not fit


def escape(text: str) -> str:
    """One line of inert text: markup characters and the exchange separator `|` escaped, line
    breaks folded into spaces (so stored text cannot fake the assistant's side of an exchange)."""
    flat = " ".join(text.split())
    return flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "&#124;")


def build_context(
    document: MemoryDocument,
    facts: Sequence[Fact],
    pages: Sequence[Page],
    budget: int,
    counter: TokenCounter,
    relationship_with_user: str = "",
    style_hint: str = "",
) -> MemoryContext:
    """Fill the budget in priority order: header, corrections (up to their share), profile
    sections, other facts (in the order given: best first), then past exchanges (best first)."""
    header = _header_items(relationship_with_user, style_hint)
    corrections = [_fact_item(i, fact) for i, fact in enumerate(facts) if fact.category == "correction"]
    others = [_fact_item(i, fact) for i, fact in enumerate(facts) if fact.category != "correction"]
    sections = _section_items(document)
    exchanges = [_page_item(i, page) for i, page in enumerate(pages)]

    chosen: list[_Item] = []
    taken: set[_Item] = set()
    used = counter.count(_render([]))
    for group, share in (
        (header, 1.0),
        (corrections, CORRECTION_SHARE),
        (sections, 1.0),
        (corrections + others, 1.0),
        (exchanges, 1.0),
    ):
        ceiling = min(budget, used + int(budget * share))
        for item in group:
            if item in taken:
                continue
            cost = _cost(item, chosen, counter)
            if used + cost <= ceiling:
                chosen.append(item)
                taken.add(item)
                used += cost

    # Line-by-line costs can differ from the count of the joined text by a token where the
    # tokenizer merges across a boundary: the rendered text is what must fit, so check it.
    text = _render(chosen)
    tokens = counter.count(text)
    while tokens > budget and chosen:
        taken.discard(chosen.pop())
        text = _render(chosen)
        tokens = counter.count(text)
    left_out: dict[str, int] = {}
    for item in header + corrections + others + sections + exchanges:
        if item not in taken:
            left_out[item.section] = left_out.get(item.section, 0) + 1
    return MemoryContext(text=text, tokens=tokens, left_out=left_out)


def _cost(item: _Item, chosen: list[_Item], counter: TokenCounter) -> int:
    """Tokens the item adds: its line, and its section's heading if it opens the section."""
    heading = _HEADINGS[item.section]
    opens_section = heading is not None and all(other.section != item.section for other in chosen)
    return counter.count(item.line + "\n") + (counter.count(heading + "\n") if opens_section else 0)


def _render(items: Sequence[_Item]) -> str:
    lines = ["<memory>"]
    for section, heading in _HEADINGS.items():
        members = sorted((item for item in items if item.section == section), key=lambda item: item.order)
        if not members:
            continue
        if heading:
            lines.append(heading)
        lines.extend(item.line for item in members)
    lines.append("</memory>")
    return "\n".join(lines)


def _header_items(relationship: str, style_hint: str) -> list[_Item]:
    items = []
    if relationship.strip():
        items.append(_Item("header", 0, f"Your relationship with the user: {escape(relationship)}."))
    if style_hint.strip():
        items.append(_Item("header", 1, f"Answer style: {escape(style_hint)}."))
    return items


def _section_items(document: MemoryDocument) -> list[_Item]:
    items = []
    for group, names in (("user", _USER_SECTIONS), ("history", _HISTORY_SECTIONS)):
        sections = getattr(document, group)
        for order, (name, label) in enumerate(names):
            summary = getattr(sections, name).summary
            if summary.strip():
                items.append(_Item(group, order, f"- {label}: {escape(summary)}"))
    return items


def _fact_item(rank: int, fact: Fact) -> _Item:
    line = f"- [{fact.category} | {fact.confidence:.2f}] {escape(fact.content)}"
    if fact.category == "correction" and fact.sourceError:
        line += f" (avoid: {escape(fact.sourceError)})"
    # Corrections are listed before the other facts, each group best first.
    return _Item("facts", rank if fact.category == "correction" else _AFTER_CORRECTIONS + rank, line)


def _page_item(order: int, page: Page) -> _Item:
    said = escape(_clip(page.user_input))
    answered = escape(_clip(page.agent_response))
    return _Item("pages", order, f"- [{page.timestamp[:10]}] User: {said} | Assistant: {answered}")


def _clip(text: str) -> str:
    return text if len(text) <= MAX_EXCHANGE_SIDE_CHARS else text[: MAX_EXCHANGE_SIDE_CHARS - 1] + "…"
