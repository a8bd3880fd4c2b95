"""The updater LLM's reply: the JSON schema it is asked to follow, and how a reply is read.

The schema is sent as `response_format`, so endpoints that constrain generation (OpenAI, llama.cpp,
vLLM, Ollama, LM Studio) return the shape and nothing else. Its strings and lists are bounded: a
small model otherwise loops inside one string until the token cap. Replies from endpoints that
ignore the schema are read tolerantly (code fences, reasoning blocks and prose around the JSON).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from pydantic import Field, ValidationError

from memory_mcp.base.errors import LLMTransientError
from memory_mcp.base.model import Model
from memory_mcp.memory.rules import UpdateProposal
from memory_mcp.models import FactCategory

MAX_SUMMARY_CHARS = 600
MAX_FACT_CHARS = 300
MAX_NEW_FACTS = 12
MAX_KNOWLEDGE = 5
_THINKING = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_UPDATE_KEYS = {"user", "history", "newFacts", "factsToRemove", "assistantKnowledge"}


class ReplyError(LLMTransientError):
    """The reply held no usable update (invalid, cut off, the wrong shape, or against the rules).
    `batch` names the page numbers whose reply it was, once known."""

    batch: list[int] | None = None


class TruncatedReply(ReplyError):
    """The reply was cut off at the output-token cap: nothing of it may be applied."""


# --- the shape the LLM is asked for --------------------------------------------------------
# These models exist for their JSON schema only: replies are read by UpdateProposal, which
# accepts the partial shapes that endpoints without schema support produce.


class _Section(Model):
    summary: str = Field(max_length=MAX_SUMMARY_CHARS)
    shouldUpdate: bool


class _UserSections(Model):
    workContext: _Section
    personalContext: _Section
    topOfMind: _Section


class _HistorySections(Model):
    recentMonths: _Section
    earlierContext: _Section
    longTermBackground: _Section


class _Fact(Model):
    content: str = Field(max_length=MAX_FACT_CHARS)
    category: FactCategory
    confidence: float
    sourceError: str | None = Field(max_length=MAX_FACT_CHARS)
    replaces: str | None = Field(max_length=16)


class _Knowledge(Model):
    content: str = Field(max_length=MAX_FACT_CHARS)
    confidence: float


class _Session(Model):
    summary: str = Field(max_length=MAX_FACT_CHARS)
    keywords: list[str] = Field(max_length=8)


class _Reply(Model):
    user: _UserSections
    history: _HistorySections
    newFacts: list[_Fact] = Field(max_length=MAX_NEW_FACTS)
    factsToRemove: list[str]
    assistantKnowledge: list[_Knowledge] = Field(max_length=MAX_KNOWLEDGE)
    session: _Session


def reply_schema(max_removals: int) -> dict[str, Any]:
    """The reply's JSON schema in the strict form structured-output endpoints require: every
    property required (optional ones nullable), no other properties, references inlined."""
    schema = _Reply.model_json_schema()
    definitions = schema.pop("$defs", {})
    schema["properties"]["factsToRemove"]["maxItems"] = max_removals
    schema["properties"]["factsToRemove"]["items"]["maxLength"] = 16
    strict: dict[str, Any] = _strict(schema, definitions)
    return strict


def _strict(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_strict(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _strict(copy.deepcopy(definitions[node["$ref"].rsplit("/", 1)[-1]]), definitions)
    node = {key: _strict(value, definitions) for key, value in node.items() if key not in ("title", "default")}
    if node.get("type") == "object" and "properties" in node:
        node["required"] = list(node["properties"])
        node["additionalProperties"] = False
    if node.get("type") == "array" and node.get("items", {}).get("type") == "string":
        node["items"].setdefault("maxLength", 80)
    return node


# --- reading a reply ---------------------------------------------------------------------


def parse_reply(reply: str) -> UpdateProposal:
    """Find the JSON update in a reply that may wrap it in reasoning, code fences or prose."""
    text = _THINKING.sub("", reply)
    candidates = [match.group(1) for match in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        for start in (i for i, char in enumerate(candidate) if char == "{"):
            try:
                value, _end = decoder.raw_decode(candidate, start)
            except json.JSONDecodeError:
                continue
            # An inner object of a reply cut off mid-way must not pass for the whole update.
            if isinstance(value, dict) and value.keys() & _UPDATE_KEYS:
                try:
                    return UpdateProposal.model_validate(value)
                except ValidationError as exc:
                    raise ReplyError(f"LLM reply has the wrong shape: {exc.errors()[0]['msg']}") from None
    raise ReplyError("LLM reply held no complete JSON object (invalid or truncated)")
