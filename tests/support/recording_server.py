"""A model API on 127.0.0.1 for driving a real host CLI offline: the HTTP server the scripted
APIs share (`scripted_anthropic`, `scripted_responses`, `scripted_gemini`).

It serves HTTP/1.1 in a thread of the test process on a free port. Each GET and POST is answered
with what the subclass's `answer_get` and `answer_post` return, always status 200 with a
content-length; a POST's JSON body is read for it first. The subclass records what it means to.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

Answer = tuple[str, bytes]  # content type, body


class RecordingServer:
    """Start it with `start()`, point the CLI at `base_url`, and `stop()` it when done."""

    url_path = ""  # what `base_url` ends with after the address (an API's version prefix)

    _server: ThreadingHTTPServer
    _thread: threading.Thread

    def answer_get(self, path: str) -> Answer:
        """A probe the CLI may make: an empty JSON object, unless the API answers otherwise."""
        return "application/json", b"{}"

    def answer_post(self, path: str, body: dict[str, Any]) -> Answer:
        raise NotImplementedError

    def start(self) -> Self:
        recording = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._send(*recording.answer_get(self.path))

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                self._send(*recording.answer_post(self.path, body))

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
        return f"http://{host}:{port}{self.url_path}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
