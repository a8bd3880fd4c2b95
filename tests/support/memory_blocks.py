"""The <memory> blocks a host put before the model, found in the requests a scripted API recorded."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

BLOCK = re.compile(r"<memory>\n.*?\n</memory>", re.DOTALL)


def texts(value: Any) -> Iterator[str]:
    """Every string in a request body."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from texts(item)


def blocks(request: dict[str, Any], after_prompt: str | None = None) -> list[str]:
    """The <memory> blocks a Messages API request carries (in its system prompt and messages); with
    `after_prompt`, only those after the last user message saying it (what that prompt brought)."""
    messages = request.get("messages") or []
    if after_prompt is not None:
        said = [n for n, m in enumerate(messages) if m.get("role") == "user" and after_prompt in json.dumps(m)]
        messages = messages[said[-1] :] if said else []
        return [found for text in texts(messages) for found in BLOCK.findall(text)]
    return [found for text in texts([request.get("system"), messages]) for found in BLOCK.findall(text)]
