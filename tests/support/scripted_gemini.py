"""A scripted Gemini API on 127.0.0.1, for driving the real Gemini CLI offline.

Gemini CLI talks to whatever `GOOGLE_GEMINI_BASE_URL` names (with an API key and
`security.auth.selectedType: "gemini-api-key"` in its settings). This server answers every
`POST /v1beta/models/<model>:streamGenerateContent` (one server-sent event) and
`:generateContent` (JSON) with the text the test's `respond(request)` returns, and records each
request's body: what the model was actually sent, for the test to assert on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from recording_server import Answer, RecordingServer

USAGE = {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110}


def user_texts(request: dict[str, Any]) -> list[str]:
    """The text parts of the request's user turns, in order (the prompt and any hook context)."""
    return [
        part["text"]
        for content in request.get("contents") or []
        if content.get("role") == "user"
        for part in content.get("parts") or []
        if isinstance(part, dict) and isinstance(part.get("text"), str)
    ]


@dataclass
class ScriptedGemini(RecordingServer):
    respond: Callable[[dict[str, Any]], str] = lambda request: "Done."
    requests: list[dict[str, Any]] = field(default_factory=list)

    # GET: probes Gemini CLI may make, answered with an empty object.

    def answer_post(self, path: str, body: dict[str, Any]) -> Answer:
        if ":countTokens" in path:
            return "application/json", json.dumps({"totalTokens": 100}).encode()
        self.requests.append(body)
        answer = _answer(self.respond(body))
        if ":streamGenerateContent" in path:
            return "text/event-stream", f"data: {json.dumps(answer)}\r\n\r\n".encode()
        return "application/json", json.dumps(answer).encode()


def _answer(text: str) -> dict[str, Any]:
    """A whole reply as one response: streamed, it is the single event of the stream."""
    candidate = {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}
    return {"candidates": [candidate], "usageMetadata": USAGE, "modelVersion": "scripted"}
