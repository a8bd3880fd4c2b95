"""A scripted Anthropic Messages API on 127.0.0.1, for driving the real Claude Code CLI offline.

Claude Code talks to whatever `ANTHROPIC_BASE_URL` names. This server answers every
`POST /v1/messages` with what the test's `respond(request)` returns (text, or a tool call),
streamed as server-sent events when the request asks for a stream, and records each request's
body: what the model was actually sent, for the test to assert on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from recording_server import Answer, RecordingServer


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


Reply = str | ToolCall


def said_text(request: dict[str, Any]) -> str:
    """Everything the request carries as text: system prompt, messages, tool results, JSON-dumped."""
    return json.dumps({"system": request.get("system"), "messages": request.get("messages")}, ensure_ascii=False)


def last_tool_results(request: dict[str, Any]) -> list[str]:
    """The text of the tool results in the request's last user message (what a tool call returned)."""
    messages = request.get("messages") or []
    if not messages or messages[-1].get("role") != "user" or not isinstance(messages[-1].get("content"), list):
        return []
    results = []
    for block in messages[-1]["content"]:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            content = block.get("content")
            if isinstance(content, str):
                results.append(content)
            elif isinstance(content, list):
                results.append("".join(part.get("text", "") for part in content if isinstance(part, dict)))
    return results


@dataclass
class ScriptedAnthropic(RecordingServer):
    respond: Callable[[dict[str, Any]], Reply] = lambda request: "Done."
    requests: list[dict[str, Any]] = field(default_factory=list)

    # GET: probes Claude Code may make, answered with an empty object.

    def answer_post(self, path: str, body: dict[str, Any]) -> Answer:
        if "count_tokens" in path:
            return "application/json", json.dumps({"input_tokens": 100}).encode()
        self.requests.append(body)
        reply = self.respond(body)
        model = str(body.get("model", "claude"))
        if body.get("stream"):
            return "text/event-stream", _stream(reply, model, len(self.requests))
        return "application/json", json.dumps(_message(reply, model, len(self.requests))).encode()


def _content(reply: Reply, number: int) -> tuple[list[dict[str, Any]], str]:
    if isinstance(reply, ToolCall):
        block = {"type": "tool_use", "id": f"toolu_{number:04d}", "name": reply.name, "input": reply.arguments}
        return [block], "tool_use"
    return [{"type": "text", "text": reply}], "end_turn"


def _message(reply: Reply, model: str, number: int) -> dict[str, Any]:
    content, stop = _content(reply, number)
    return {
        "id": f"msg_{number:04d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 10},
    }


def _stream(reply: Reply, model: str, number: int) -> bytes:
    """The reply as the Messages API streams it."""
    content, stop = _content(reply, number)
    start = {**_message(reply, model, number), "content": [], "stop_reason": None}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(content):
        if block["type"] == "text":
            opening, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            opening = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": opening}),
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]
    events += [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 10},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()
