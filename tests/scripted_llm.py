"""A small OpenAI-compatible chat-completions server on 127.0.0.1, driven by a script.

Tests point the real `openai` client (inside the product) at it. Each request takes the next
scripted step: a reply text, an HTTP error status, a delay, or a raw (possibly broken) body.
When the script is empty, `default` answers. Every request body is recorded for assertions.
It runs in a thread of the test process, or as its own process (`python scripted_llm.py SCRIPT`)
when the server under test is a subprocess that the test kills.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Step:
    content: str | None = None  # the assistant's reply text
    status: int = 200  # an HTTP error status instead of a reply
    delay: float = 0.0  # seconds to wait before answering
    raw: bytes | None = None  # a body sent as is (for malformed responses)


def reply(update: dict[str, Any] | str, delay: float = 0.0) -> Step:
    """A step answering with `update` (a dict becomes its JSON text)."""
    return Step(content=update if isinstance(update, str) else json.dumps(update), delay=delay)


EMPTY_UPDATE: dict[str, Any] = {"user": {}, "history": {}, "newFacts": [], "factsToRemove": []}


@dataclass
class ScriptedLLM:
    default: Step = field(default_factory=lambda: reply(EMPTY_UPDATE))
    steps: deque[Step] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    # time.monotonic() when each request arrived (same order as `requests`), when its answer was
    # sent (by arrival index; None while still in progress), and the most requests served at once.
    arrivals: list[float] = field(default_factory=list)
    answered: list[float | None] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def enqueue(self, *steps: Step) -> None:
        with self._lock:
            self.steps.extend(steps)

    @property
    def base_url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self, port: int = 0) -> ScriptedLLM:
        script = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with script._lock:
                    script.requests.append(body)
                    index = len(script.arrivals)
                    script.arrivals.append(time.monotonic())
                    script.answered.append(None)
                    script.in_flight += 1
                    script.max_in_flight = max(script.max_in_flight, script.in_flight)
                    step = script.steps.popleft() if script.steps else script.default
                try:
                    if step.delay:
                        time.sleep(step.delay)
                    if step.raw is not None:
                        payload, status = step.raw, step.status
                    elif step.status != 200:
                        error = {"error": {"message": "scripted failure", "type": "server_error", "code": step.status}}
                        payload, status = json.dumps(error).encode(), step.status
                    else:
                        payload, status = json.dumps(_completion(body, step.content or "")).encode(), 200
                finally:
                    # Recorded before the answer leaves, so a request that arrives later than this
                    # time was sent by a client that had not yet seen this answer.
                    with script._lock:
                        script.in_flight -= 1
                        script.answered[index] = time.monotonic()
                self._send(status, payload)

            def _send(self, status: int, payload: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (a timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        # A short poll interval, so that stop() returns at once rather than after up to half a second.
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def conversation_of(request: dict[str, Any]) -> str:
    """The user message of a recorded request: what the updater sent (current memory, new
    exchanges, hints)."""
    [message] = [m for m in request["messages"] if m["role"] == "user"]
    return message["content"]


def _completion(request: dict[str, Any], content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "scripted"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def main() -> None:
    """Run as a process: argv[1] is a JSON file {"default": update, "steps": [update...]}; prints
    the base URL on stdout, then serves until killed; requests are appended to argv[1] + ".log"."""
    script_path = Path(sys.argv[1])
    spec = json.loads(script_path.read_text())
    llm = ScriptedLLM(default=reply(spec.get("default", EMPTY_UPDATE), spec.get("delay", 0.0)))
    llm.enqueue(*(reply(step) for step in spec.get("steps", [])))
    llm.start()
    print(llm.base_url, flush=True)
    log_path = script_path.with_suffix(".log")
    seen = 0
    while True:
        time.sleep(0.05)
        with llm._lock:
            new = llm.requests[seen:]
            seen = len(llm.requests)
        if new:
            with log_path.open("a") as log:
                log.writelines(json.dumps(request) + "\n" for request in new)


if __name__ == "__main__":
    main()
