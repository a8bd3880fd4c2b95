"""A server on raw pipes that a test can SIGKILL at any instant and read to the last byte.

The crash and concurrency suites drive it with JSON-RPC lines of their own, so that nothing
between the test and the process (no client library, no buffering) hides what was answered.
"""

from __future__ import annotations

import json
import os
import queue
import select
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

from stdio_helpers import HANDSHAKE_PROTOCOL_VERSION, server_command, server_env


class ServerProcess:
    """A server on pipes we own, killed with SIGKILL through a pidfd (no race with pid reuse)."""

    def __init__(
        self, pid: int, stdin_fd: int, stdout_fd: int, stderr_path: Path, kind: str, popen: Any = None
    ) -> None:
        self.pid = pid
        self.kind = kind
        self.popen = popen
        self.stderr_path = stderr_path
        self.started = time.monotonic()
        try:
            self.pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            self.pidfd = None  # already gone
        self.stdin: IO[bytes] = os.fdopen(stdin_fd, "wb", buffering=0)
        self._stdout: IO[bytes] = os.fdopen(stdout_fd, "rb")
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._next_id = 0

    def _read(self) -> None:
        for line in self._stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, message: dict[str, Any]) -> bool:
        """Write one JSON-RPC message; False if the process is gone."""
        try:
            self.stdin.write(json.dumps(message).encode("utf-8") + b"\n")
            return True
        except (BrokenPipeError, ValueError):
            return False

    def request(self, method: str, params: dict[str, Any]) -> int:
        self._next_id += 1
        self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        return self._next_id

    def call(self, method: str, params: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
        """Send a request and wait for its response (anything else arriving first is skipped)."""
        request_id = self.request(method, params)
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no answer to {method} in {timeout}s:\n{self.stderr()[-3000:]}") from None
            assert line is not None, f"the server exited before answering {method}:\n{self.stderr()[-3000:]}"
            message = json.loads(line)
            if message.get("id") == request_id and "method" not in message:
                return message

    def initialize(self) -> None:
        response = self.call(
            "initialize",
            {
                "protocolVersion": HANDSHAKE_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "crash-test", "version": "0"},
            },
        )
        assert "result" in response, response
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A tool call that must succeed: its structured result."""
        response = self.call("tools/call", {"name": name, "arguments": arguments})
        result = response.get("result")
        assert result is not None and not result.get("isError"), f"{name} failed: {json.dumps(response)[:1500]}"
        return result["structuredContent"]

    def kill(self) -> None:
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait_dead(self, timeout: float = 10) -> None:
        if self.pidfd is not None and not select.select([self.pidfd], [], [], timeout)[0]:
            raise AssertionError(f"server {self.pid} still alive {timeout}s after SIGKILL")
        if self.popen is not None:
            self.popen.wait(timeout)

    def drain(self, timeout: float = 10) -> list[bytes]:
        """What the dead process wrote and was not read yet (until its stdout's end of file)."""
        lines = []
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            if line is None:
                return lines
            lines.append(line)

    def close_stdin_and_wait(self, timeout: float) -> int | None:
        """End the session as a host does; the exit code, or None if it had to be killed."""
        try:
            self.stdin.close()
        except OSError:
            pass
        try:
            if self.popen is not None:
                return self.popen.wait(timeout)
            if self.pidfd is not None and not select.select([self.pidfd], [], [], timeout)[0]:
                return None
            return 0  # a forked server's status belongs to the zygote; it exited by itself
        except subprocess.TimeoutExpired:
            return None
        finally:
            self.kill()

    def close(self) -> None:
        self._reader.join(10)
        for stream in (self.stdin, self._stdout):
            try:
                stream.close()
            except OSError:
                pass
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")


def start_spawned(home: Path, workdir: Path, name: str) -> ServerProcess:
    """`python server.py` (no LLM) on `home`, initialized."""
    stderr_path = workdir / f"{name}.stderr.log"
    with stderr_path.open("wb") as stderr:
        popen = subprocess.Popen(
            server_command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=server_env(home),
            cwd=workdir,
        )
    assert popen.stdin is not None and popen.stdout is not None
    server = ServerProcess(
        popen.pid, os.dup(popen.stdin.fileno()), os.dup(popen.stdout.fileno()), stderr_path, "spawned", popen
    )
    popen.stdin.close()
    popen.stdout.close()
    server.initialize()
    return server
