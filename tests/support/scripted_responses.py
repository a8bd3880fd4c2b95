"""A scripted OpenAI Responses API on 127.0.0.1, for driving the real Codex and Copilot CLIs offline.

Codex talks to the `base_url` of the model provider its config.toml names (with `wire_api =
"responses"`); Copilot CLI to COPILOT_PROVIDER_BASE_URL (with COPILOT_PROVIDER_WIRE_API=responses).
This server answers every `POST .../responses` with the text the test's `respond(request)`
returns, streamed as the Responses API streams a message (every event of it: given only the three
Codex needs, Copilot CLI finds no reply), and records
each request's body: what the model was actually sent, for the test to assert on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from recording_server import Answer, RecordingServer


def input_texts(request: dict[str, Any], role: str | None = None) -> list[str]:
    """The text of each input message of the request (of `role` only, when given), in order."""
    found = []
    for item in request.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "message" and role in (None, item.get("role")):
            for part in item.get("content") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    found.append(part["text"])
    return found


@dataclass
class ScriptedResponses(RecordingServer):
    respond: Callable[[dict[str, Any]], str] = lambda request: "Done."
    requests: list[dict[str, Any]] = field(default_factory=list)

    url_path = "/v1"

    def answer_get(self, path: str) -> Answer:  # probes a CLI may make (a model list): an empty one
        return "application/json", json.dumps({"object": "list", "data": []}).encode()

    def answer_post(self, path: str, body: dict[str, Any]) -> Answer:
        self.requests.append(body)
        reply = self.respond(body)
        return "text/event-stream", _stream(reply, len(self.requests))


def _stream(reply: str, number: int) -> bytes:
    """`reply` as the Responses API streams a finished assistant message: the response opened, the
    message and its text part added, the text in one delta, each of them done, the response completed."""
    response_id, item_id = f"resp_{number:04d}", f"msg_{number:04d}"
    part = {"type": "output_text", "text": reply, "annotations": []}
    item = {"type": "message", "id": item_id, "role": "assistant", "status": "completed", "content": [part]}
    usage = {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 10,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 110,
    }
    at = {"item_id": item_id, "output_index": 0, "content_index": 0}
    response = {"id": response_id, "object": "response", "status": "in_progress", "output": []}
    events = [
        {"type": "response.created", "response": response},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": item | {"status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **at, "part": part | {"text": ""}},
        {"type": "response.output_text.delta", **at, "delta": reply},
        {"type": "response.output_text.done", **at, "text": reply},
        {"type": "response.content_part.done", **at, "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {
            "type": "response.completed",
            "response": response | {"status": "completed", "output": [item], "usage": usage},
        },
    ]
    return "".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events).encode()
