"""A scripted OpenAI Responses API on 127.0.0.1, for driving the real Codex CLI offline.

Codex talks to the `base_url` of the model provider its config.toml names (with `wire_api =
"responses"`). This server answers every `POST .../responses` with the text the test's
`respond(request)` returns, streamed as the three server-sent events Codex needs, and records
each request's body: what the model was actually sent, for the test to assert on.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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
class ScriptedResponses:
    respond: Callable[[dict[str, Any]], str] = lambda request: "Done."
    requests: list[dict[str, Any]] = field(default_factory=list)

    def start(self) -> ScriptedResponses:
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # probes Codex may make (a model list): an empty one
                self._send(200, "application/json", json.dumps({"object": "list", "data": []}).encode())

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                scripted.requests.append(body)
                reply = scripted.respond(body)
                self._send(200, "text/event-stream", _stream(reply, len(scripted.requests)))

            def _send(self, status: int, kind: str, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


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
