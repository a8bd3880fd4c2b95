"""A scripted Gemini API on 127.0.0.1, for driving the real Gemini CLI offline.

Gemini CLI talks to whatever `GOOGLE_GEMINI_BASE_URL` names (with an API key and
`security.auth.selectedType: "gemini-api-key"` in its settings). This server answers every
`POST /v1beta/models/<model>:streamGenerateContent` (one server-sent event) and
`:generateContent` (JSON) with the text the test's `respond(request)` returns, and records each
request's body: what the model was actually sent, for the test to assert on.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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
class ScriptedGemini:
    respond: Callable[[dict[str, Any]], str] = lambda request: "Done."
    requests: list[dict[str, Any]] = field(default_factory=list)

    def start(self) -> ScriptedGemini:
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # probes Gemini CLI may make: an empty answer
                self._send("application/json", b"{}")

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                if ":countTokens" in self.path:
                    self._send("application/json", json.dumps({"totalTokens": 100}).encode())
                    return
                scripted.requests.append(body)
                answer = _answer(scripted.respond(body))
                if ":streamGenerateContent" in self.path:
                    self._send("text/event-stream", f"data: {json.dumps(answer)}\r\n\r\n".encode())
                else:
                    self._send("application/json", json.dumps(answer).encode())

            def _send(self, kind: str, payload: bytes) -> None:
                self.send_response(200)
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
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def _answer(text: str) -> dict[str, Any]:
    """A whole reply as one response: streamed, it is the single event of the stream."""
    candidate = {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}
    return {"candidates": [candidate], "usageMetadata": USAGE, "modelVersion": "scripted"}
