"""A scripted OpenAI Responses API on 127.0.0.1, for driving the real Codex CLI offline.

Codex talks to the `base_url` of the model provider its config.toml names (with `wire_api =
"responses"`). This server answers every `POST .../responses` with the text the test's
`respond(request)` returns, streamed as the three server-sent events Codex needs, and records
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

    def answer_get(self, path: str) -> Answer:  # probes Codex may make (a model list): an empty one
        return "application/json", json.dumps({"object": "list", "data": []}).encode()

    def answer_post(self, path: str, body: dict[str, Any]) -> Answer:
        self.requests.append(body)
        reply = self.respond(body)
        return "text/event-stream", _stream(reply, len(self.requests))


def _stream(reply: str, number: int) -> bytes:
    """`reply` as the Responses API streams a finished assistant message."""
    response_id = f"resp_{number:04d}"
    item = {
        "type": "message",
        "id": f"msg_{number:04d}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": reply, "annotations": []}],
    }
    usage = {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 10,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 110,
    }
    events = [
        {"type": "response.created", "response": {"id": response_id}},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": {"id": response_id, "usage": usage}},
    ]
    return "".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events).encode()
