"""Helpers for tests that run the real server as a subprocess and talk to it over stdio.

Two ways in:

- `connect(...)`: an async context manager yielding an `mcp.Client` connected to a fresh
  `python server.py` process (the SDK's own stdio client). Leaving the block closes stdin and
  waits for the process to exit.
- `RawServer`: the process spawned with `subprocess.Popen`, spoken to in raw newline-delimited
  JSON-RPC, for tests about the wire itself (what appears on stdout, how the process exits).

Plus small utilities: `run` (anyio.run with a deadline), `ok`/`error_text` (unwrap tool
results), `add`/`recall`/`profile` (tool calls that must succeed), `snapshot` (a full listing
of a data directory, to prove nothing was written).
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any, TextIO, TypeVar

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from project import PYTHON, SERVER_SCRIPT

# A handshake-era protocol version the SDK negotiates (mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS).
HANDSHAKE_PROTOCOL_VERSION = "2025-11-25"
# Variables that must never leak from the test process into a server under test.
_SCRUBBED_VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMORY_MCP_LLM_MODEL", "MEMORY_MCP_HOME")

T = TypeVar("T")


def server_command(config: Path | None = None, extra_args: Sequence[str] = ()) -> list[str]:
    """The argv that starts the server the way a host does: `python server.py [--config PATH]`."""
    command = [PYTHON, str(SERVER_SCRIPT)]
    if config is not None:
        command += ["--config", str(config)]
    return command + list(extra_args)


def server_env(home: Path | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A full environment for `subprocess`: the test's own, minus LLM and data settings, plus `home`."""
    env = {key: value for key, value in os.environ.items() if key not in _SCRUBBED_VARIABLES}
    if home is not None:
        env["MEMORY_MCP_HOME"] = str(home)
    env.update(extra or {})
    return env


def write_config(path: Path, settings: Mapping[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings), encoding="utf-8")
    return path


@asynccontextmanager
async def connect(
    home: Path | None = None,
    *,
    config: Path | None = None,
    extra_args: Sequence[str] = (),
    errlog: TextIO | None = None,
    cwd: Path | None = None,
) -> AsyncIterator[Client]:
    """A connected client of a new server process.

    `home` becomes MEMORY_MCP_HOME (the data directory when no config names one); `errlog`
    receives the server's stderr (an open text file; default: this process's stderr).
    The SDK's stdio client passes only a safe subset of our environment, plus what we give.
    """
    env = {"MEMORY_MCP_HOME": str(home)} if home is not None else {}
    async with connect_command(server_command(config, extra_args), env, errlog=errlog, cwd=cwd) as client:
        yield client


@asynccontextmanager
async def connect_command(
    command: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    errlog: TextIO | None = None,
    cwd: Path | None = None,
) -> AsyncIterator[Client]:
    """A connected client of the server a host starts with `command`, the argv its settings hold."""
    params = StdioServerParameters(command=command[0], args=list(command[1:]), env=dict(env or {}), cwd=cwd)
    transport = stdio_client(params, errlog=errlog if errlog is not None else sys.stderr)
    async with Client(transport) as client:
        yield client


def run(function: Callable[[], Awaitable[T]], timeout: float = 60) -> T:
    """Run an async test body under anyio with a deadline, so a hung server fails the test.

    An assertion failing inside `async with connect(...)` reaches us wrapped in the transport's
    exception group; a lone failure is re-raised unwrapped so pytest reports it plainly.
    """

    async def bounded() -> T:
        with anyio.fail_after(timeout):
            return await function()

    try:
        return anyio.run(bounded)
    except BaseExceptionGroup as group:
        leaves = _leaf_exceptions(group)
        if len(leaves) == 1:
            raise leaves[0] from group
        raise


def _leaf_exceptions(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaf_exceptions(inner)]
    return [error]


def ok(result: Any) -> dict[str, Any]:
    """The structured result of a successful tool call (fails the test on a tool error)."""
    text = result.content[0].text if result.content else ""
    assert not result.is_error, f"tool call failed: {text}"
    assert isinstance(result.structured_content, dict), f"no structured result: {text}"
    return result.structured_content


def error_text(result: Any) -> str:
    """The message of a failed tool call (fails the test if the call succeeded)."""
    texts = [block.text for block in result.content if getattr(block, "text", None)]
    assert result.is_error, f"expected a tool error, got: {texts or result.structured_content}"
    assert texts, "a tool error must carry a message"
    return "\n".join(texts)


async def add(client: Client, user_input: str, agent_response: str, **fields: Any) -> dict[str, Any]:
    """add_memory, which must succeed; returns its structured result."""
    arguments = {"user_input": user_input, "agent_response": agent_response, **fields}
    return ok(await client.call_tool("add_memory", arguments))


async def recall(client: Client, query: str, **fields: Any) -> dict[str, Any]:
    """retrieve_memory, which must succeed; returns its structured result."""
    return ok(await client.call_tool("retrieve_memory", {"query": query, **fields}))


async def profile(client: Client, **fields: Any) -> dict[str, Any]:
    """get_user_profile, which must succeed; returns its structured result."""
    return ok(await client.call_tool("get_user_profile", fields))


def result_json(result: Any) -> str:
    """Everything the host receives for a call, as one string: structured content and text blocks."""
    parts = [json.dumps(result.structured_content, ensure_ascii=False, sort_keys=True)]
    parts += [block.text for block in result.content if getattr(block, "text", None)]
    return "\n".join(parts)


def canonical(value: Any) -> str:
    """JSON text that tells 1 from 1.0 and true from 1, to compare values exactly."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False)


def snapshot(root: Path) -> dict[str, tuple[str, str]]:
    """Every entry under `root` (hidden ones too): relative path -> (kind, content digest or mode).

    Two equal snapshots mean nothing was created, removed or rewritten in between.
    """
    if not root.exists():
        return {}
    listing: dict[str, tuple[str, str]] = {".": ("dir", oct(root.stat().st_mode))}
    for directory, subdirs, files in os.walk(root):
        for name in subdirs:
            path = Path(directory, name)
            listing[str(path.relative_to(root))] = ("dir", oct(path.stat().st_mode))
        for name in files:
            path = Path(directory, name)
            if path.is_socket():  # a shared memory process listening: nothing to read
                listing[str(path.relative_to(root))] = ("socket", oct(path.stat().st_mode))
                continue
            if path.parent.name == "run" and path.name.startswith("shared-") and path.suffix == ".log":
                continue  # the shared process's log: what a server in a process of its own prints on stderr
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            listing[str(path.relative_to(root))] = ("file", f"{digest}:{path.stat().st_size}")
    return listing


class RawServer:
    """The server as a subprocess, spoken to in raw JSON-RPC lines over its stdin and stdout.

    stdout lines are collected verbatim (`stdout_lines`) by a reader thread, so a test can both
    wait for a response with a timeout and later check every byte the server wrote. stderr goes
    to `stderr_path`.
    """

    def __init__(
        self,
        home: Path | None,
        stderr_path: Path,
        *,
        config: Path | None = None,
        extra_args: Sequence[str] = (),
        extra_env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.stderr_path = stderr_path
        self._stderr_file: IO[bytes] = stderr_path.open("wb")
        self.process = subprocess.Popen(
            server_command(config, extra_args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr_file,
            env=server_env(home, extra_env),
            cwd=cwd,
        )
        self.stdout_lines: list[bytes] = []
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._next_id = 1
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.stdout_lines.append(line)
            self._lines.put(line)
        self._lines.put(None)

    # --- sending ----------------------------------------------------------------------------

    def send_line(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.rstrip(b"\n") + b"\n")
        self.process.stdin.flush()

    def send(self, message: Mapping[str, Any]) -> None:
        self.send_line(json.dumps(message).encode("utf-8"))

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        self.send(message)

    def request(self, method: str, params: Mapping[str, Any] | None = None, timeout: float = 15) -> dict[str, Any]:
        """Send a request and return its response; anything else arriving first is skipped
        (and still recorded in `stdout_lines`)."""
        request_id = self._next_id
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = dict(params)
        self.send(message)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no response to {method} (id {request_id}) within {timeout}s")
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise EOFError(f"server closed stdout before answering {method} (id {request_id})")
            try:
                response = json.loads(line)
            except ValueError:
                continue  # recorded in stdout_lines; the test decides what to make of it
            if isinstance(response, dict) and response.get("id") == request_id and "method" not in response:
                return response

    def initialize(self, protocol_version: str = HANDSHAKE_PROTOCOL_VERSION) -> dict[str, Any]:
        response = self.request(
            "initialize",
            {
                "protocolVersion": protocol_version,
                "capabilities": {},
                "clientInfo": {"name": "memory-mcp-tests", "version": "0"},
            },
        )
        self.notify("notifications/initialized")
        return response

    def call_tool(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("tools/call", {"name": name, "arguments": dict(arguments)})

    # --- ending -----------------------------------------------------------------------------

    def close_stdin_and_wait(self, timeout: float = 10) -> int | None:
        """Close stdin as a host does to end the session; return the exit code, or None if the
        process was still running after `timeout` seconds (it is then killed)."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.close()
        except BrokenPipeError:
            pass
        try:
            code: int | None = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        self.kill()
        return code

    def kill(self) -> None:
        """Make sure the process is gone and its pipes are drained (idempotent)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._reader.join(10)
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr_file.close()

    def stderr_text(self) -> str:
        if not self._stderr_file.closed:
            self._stderr_file.flush()
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.kill()
