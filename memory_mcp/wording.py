"""Counts as people write them in messages: "1 fact", "2 facts"."""

from __future__ import annotations


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`count` and the noun, singular for one; `nouns` where adding an s is wrong."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"
