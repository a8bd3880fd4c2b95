"""Helpers for tests that run the real server over streamable HTTP, as a subprocess.

- `HttpServer`: `python -m memory_mcp --config C --transport streamable-http --port P`, started
  on a free loopback port and waited for until GET /health answers; stopped with SIGTERM.
- `http_client(url, token)`: an `mcp.Client` over the SDK's streamable-HTTP client transport,
  sending `Authorization: Bearer <token>` when a token is given.
- `issue_token(config, user)`: the `memory-mcp token add` command, returning the token.
- `post_jsonrpc(...)`: one raw JSON-RPC POST, to see HTTP statuses the SDK client hides.
- `StallingProxy(host, port)`: a TCP proxy on 127.0.0.1 that can be made to stall, like a database
  that accepts connections and never answers.
"""

from __future__ import annotations

import json
import select
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Self

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from project import PROJECT_ROOT, PYTHON
from stdio_helpers import server_env

MCP_ACCEPT = "application/json, text/event-stream"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def memory_mcp(config: Path, *arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a `memory-mcp` command to completion."""
    command = [PYTHON, "-m", "memory_mcp", "--config", str(config), *arguments]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=60, cwd=PROJECT_ROOT, env=env or server_env(), check=False
    )


def issue_token(config: Path, user_id: str) -> str:
    issued = memory_mcp(config, "token", "add", user_id)
    assert issued.returncode == 0, issued.stderr
    return issued.stdout.strip()


class HttpServer:
    """The server as a subprocess on a free loopback port, ready when `start()` returns."""

    def __init__(
        self,
        config: Path,
        log_path: Path,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        max_open_files: int | None = None,
    ):
        """`max_open_files`: the server's open-file limit (RLIMIT_NOFILE), to run it short of descriptors."""
        self.port = free_port()
        self.log_path = log_path
        self._log = log_path.open("w", encoding="utf-8")
        command = [PYTHON, "-m", "memory_mcp", "--config", str(config), "--transport", "streamable-http"]
        if max_open_files is not None:  # the shell sets the limit, then becomes the server (same pid)
            command = ["sh", "-c", f'ulimit -n {max_open_files} && exec "$@"', "sh", *command]
        self.process = subprocess.Popen(
            [*command, "--port", str(self.port), *extra_args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=PROJECT_ROOT,
            env=env or server_env(),
        )

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/mcp"

    def start(self, timeout: float = 30) -> Self:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited with {self.process.returncode}:\n{self.output()}")
            try:
                with urllib.request.urlopen(f"{self.base}/health", timeout=2):
                    return self
            except urllib.error.HTTPError:
                return self  # answering, if only to say it is unhealthy
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)
        self.kill()
        raise AssertionError(f"the server did not answer /health within {timeout} s:\n{self.output()}")

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then wait for the graceful stop; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self._log.close()

    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@asynccontextmanager
async def http_client(url: str, token: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def post_jsonrpc(url: str, message: Any, token: str | None = None) -> tuple[int, dict[str, str], Any]:
    """POST one JSON-RPC message; returns (status, headers, parsed JSON body or None)."""
    headers = {"Content-Type": "application/json", "Accept": MCP_ACCEPT}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return _exchange(urllib.request.Request(url, data=json.dumps(message).encode(), headers=headers, method="POST"))


def get_json(url: str) -> tuple[int, dict[str, str], Any]:
    return _exchange(urllib.request.Request(url))


def _exchange(request: urllib.request.Request) -> tuple[int, dict[str, str], Any]:
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, response_headers, body = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        status, response_headers, body = error.code, dict(error.headers), error.read()
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = body.decode("utf-8", errors="replace")
    return status, {key.lower(): value for key, value in response_headers.items()}, parsed


def tool_call(name: str, arguments: dict[str, Any], request_id: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


class StallingProxy:
    """A TCP proxy on 127.0.0.1 to `host:port` that `stall()` turns into a server that hangs: it
    keeps accepting connections and reading what they send, and answers nothing, on old connections
    and new ones alike. `resume()` closes the stalled connections and forwards again."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._listening = socket.create_server(("127.0.0.1", 0))
        self.port = self._listening.getsockname()[1]
        self._forwarding = threading.Event()
        self._forwarding.set()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def stall(self) -> None:
        self._forwarding.clear()

    def resume(self) -> None:
        with self._lock:
            stalled, self._open = self._open, []
        self._forwarding.set()
        for connection in stalled:
            try:
                connection.shutdown(socket.SHUT_RDWR)  # wakes its relay, and the client sees the end
            except OSError:
                pass  # already closed by the other side
            connection.close()

    def stop(self) -> None:
        self._stopping.set()
        self._listening.close()
        self.resume()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listening.accept()
            except OSError:
                return
            with self._lock:
                self._open.append(client)
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        """Forward both ways; while stalled, read and drop what either end sends."""
        upstream = socket.create_connection(self.target) if self._forwarding.is_set() else None
        try:
            while True:
                ends = [client] if upstream is None else [client, upstream]
                readable, _, _ = select.select(ends, [], [], 0.2)
                for end in readable:
                    data = end.recv(65536)
                    if not data:
                        return
                    if upstream is not None and self._forwarding.is_set():
                        (upstream if end is client else client).sendall(data)
        except (OSError, ValueError):  # ValueError: select on a socket resume() closed
            return
        finally:
            with self._lock:
                if client in self._open:
                    self._open.remove(client)
            client.close()
            if upstream is not None:
                upstream.close()
