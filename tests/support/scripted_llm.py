"""A small OpenAI-compatible chat-completions server on 127.0.0.1, driven by a script.

Tests point the real `openai` client (inside the product) at it. Each request takes the next
scripted step: a reply text, an HTTP error status, a delay, or a raw (possibly broken) body.
When the script is empty, `default` answers, or, with `upstream` set, a real endpoint behind it
does (the script then records what the product sent to a real model). Every request body is
recorded for assertions, and each answer's finish reason.
It runs in a thread of the test process, or as its own process (`python scripted_llm.py SCRIPT`)
when the server under test is a subprocess that the test kills.
"""

from __future__ import annotations

import json
import math
import re
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib
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
    finish_reason: str = "stop"  # "length": the reply was cut off at max_tokens
    error_message: str = "scripted failure"  # the error's message, with an error status
    error_param: str | None = None  # the parameter an error status blames, as OpenAI names it


def reply(update: dict[str, Any] | str, delay: float = 0.0) -> Step:
    """A step answering with `update` (a dict becomes its JSON text)."""
    return Step(content=update if isinstance(update, str) else json.dumps(update), delay=delay)


# The model tests name: extraction needs one (none is guessed); the scripted endpoint takes any.
SCRIPTED_MODEL = "scripted-model"

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
    upstream: str | None = None  # a real endpoint's base URL, asked when the script is empty
    finish_reasons: list[str | None] = field(default_factory=list)
    # /v1/embeddings: every text embedded (in order), and how the endpoint behaves.
    embedded: list[str] = field(default_factory=list)
    embedding_status: int = 200
    embedding_gate: threading.Event | None = None  # while set to an unset Event, embeddings wait for it
    embedding_delay: float = 0.0  # seconds each embeddings request takes
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
                if self.path.endswith("/embeddings"):
                    self._send(*script._embeddings(body))
                    return
                with script._lock:
                    script.requests.append(body)
                    index = len(script.arrivals)
                    script.arrivals.append(time.monotonic())
                    script.answered.append(None)
                    script.in_flight += 1
                    script.max_in_flight = max(script.max_in_flight, script.in_flight)
                    step = script.steps.popleft() if script.steps else None if script.upstream else script.default
                try:
                    status, payload = script._forward(body) if step is None else _answer(step, body)
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

    def _embeddings(self, body: dict[str, Any]) -> tuple[int, bytes]:
        texts = [body["input"]] if isinstance(body["input"], str) else list(body["input"])
        if self.embedding_gate is not None:
            self.embedding_gate.wait(timeout=60)
        time.sleep(self.embedding_delay)
        with self._lock:
            self.embedded.extend(texts)
            status = self.embedding_status
        if status != 200:
            return status, json.dumps({"error": {"message": "embeddings are down", "type": "server_error"}}).encode()
        data = [{"object": "embedding", "index": i, "embedding": concept_vector(text)} for i, text in enumerate(texts)]
        return 200, json.dumps({"object": "list", "data": data, "model": body.get("model", "")}).encode()

    def _forward(self, body: dict[str, Any]) -> tuple[int, bytes]:
        """Ask the real endpoint, and note how its answer finished."""
        assert self.upstream is not None
        request = urllib.request.Request(
            self.upstream.rstrip("/") + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                status, payload = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, payload = error.code, error.read()
        choices = json.loads(payload).get("choices") if status == 200 else None
        with self._lock:
            self.finish_reasons.append(choices[0].get("finish_reason") if choices else None)
        return status, payload

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


# Words that mean the same thing share a dimension, as they would in a real embedding model;
# any other word lands, more faintly, in one of the remaining dimensions by its hash.
CONCEPTS = {
    **dict.fromkeys(["dog", "dogs", "greyhound", "puppy", "canine", "hound"], 0),
    **dict.fromkeys(["cat", "cats", "kitten", "feline"], 1),
    **dict.fromkeys(["car", "cars", "vehicle", "sedan", "automobile"], 2),
    **dict.fromkeys(["doctor", "physician", "gp", "clinic"], 3),
}
CONCEPT_DIMENSIONS = 4
DIMENSIONS = 16


def concept_vector(text: str) -> list[float]:
    """A deterministic unit vector for `text`: its concepts strongly, its other words faintly."""
    vector = [0.0] * DIMENSIONS
    for word in re.findall(r"[a-z]+", text.lower()):
        if word in CONCEPTS:
            vector[CONCEPTS[word]] += 1.0
        else:
            vector[CONCEPT_DIMENSIONS + zlib.crc32(word.encode()) % (DIMENSIONS - CONCEPT_DIMENSIONS)] += 0.1
    norm = math.sqrt(sum(value * value for value in vector)) or 1.0
    return [value / norm for value in vector]


def conversation_of(request: dict[str, Any]) -> str:
    """The user message of a recorded request: what the updater sent (current memory, new
    exchanges, hints)."""
    [message] = [m for m in request["messages"] if m["role"] == "user"]
    return message["content"]


def exchanges_of(request: dict[str, Any]) -> list[dict[str, str]]:
    """The exchanges a recorded update request carried, as the JSON list it sends them in."""
    text = conversation_of(request)
    start = text.index("[", text.index("New conversation"))
    exchanges, _end = json.JSONDecoder().raw_decode(text, start)
    return exchanges


def _answer(step: Step, request: dict[str, Any]) -> tuple[int, bytes]:
    """The status and body a scripted step answers with."""
    if step.delay:
        time.sleep(step.delay)
    if step.raw is not None:
        return step.status, step.raw
    if step.status != 200:
        error = {
            "message": step.error_message,
            "type": "invalid_request_error" if step.status < 500 else "server_error",
            "param": step.error_param,
            "code": step.status,
        }
        return step.status, json.dumps({"error": error}).encode()
    return 200, json.dumps(_completion(request, step.content or "", step.finish_reason)).encode()


def _completion(request: dict[str, Any], content: str, finish_reason: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "scripted"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
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
