"""Phrases said the same way everywhere: counts as people write them ("1 fact", "2 facts"), and who
extracts structured memory."""

from __future__ import annotations


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`count` and the noun, singular for one; `nouns` where adding an s is wrong."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


EXTRACTION_WORDS = {"server": "by this server", "host": "by the host model", "off": "off"}
# Where nothing here will analyse waiting exchanges, what to do about it.
NO_ANALYSIS_HINT = "set an LLM endpoint and llm_model to have this server analyse them"


def extraction_said(mode: str, model: str | None = None) -> str:
    """Who extracts structured memory, as every place names it: `extraction by this server (model)`."""
    words = EXTRACTION_WORDS[mode]
    return f"extraction {words} ({model})" if mode == "server" and model else f"extraction {words}"


def waiting_said(count: int, mode: str) -> str:
    """Exchanges waiting for analysis: pending when this server will analyse them, otherwise what
    would make it do so."""
    if mode == "server":
        return f"{count} pending"
    return f"{plural(count, 'exchange')} not analysed ({NO_ANALYSIS_HINT})"
