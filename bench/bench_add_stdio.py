#!/usr/bin/env python
"""add_memory over stdio against the floor: a bare SDK server whose tool only appends to a list.

The servers are real processes spoken to in newline-delimited JSON-RPC over pipes, one call at
a time (as a host does): (a) a bare `MCPServer` with one tool that appends its two arguments to a
list; (b) the same, whose tool also appends them as a line to a file in the data directory and
fsyncs it; (c) the product (`python server.py`, MEMORY_MCP_HOME in a temp directory, no LLM
endpoint). The calls alternate in blocks (--block, default 50) so that all see the same machine
load; --calls (default 1,000) are timed per server after --warm-up (100) untimed ones.

An add is durable before it is acknowledged, so it waits for one fsync; what that fsync costs a
server is (b) - (a), measured as the server lives it (a thread that sleeps in fsync and wakes
again costs more than the fsync alone: ~0.35 ms against ~0.12 ms timed in a loop here).

Target: product p50 <= 1.5 x bare p50 + fsync, fsync = (b) p50 - (a) p50.

Usage:  .venv/bin/python bench/bench_add_stdio.py [--calls 1000] [--block 50] [--python PATH]
Always exits 0 (a report).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from bench.stats import percentile, report_only

PROTOCOL_VERSION = "2025-11-25"
TARGET_RATIO = 1.5
USER_INPUT = "I finally booked the train to Lyon for the conference in March; the hotel is near the station."
AGENT_RESPONSE = "Noted: train to Lyon booked for the March conference, hotel close to the station."

BARE_SERVER = """\
from mcp.server import MCPServer

app = MCPServer("bare")
kept: list[tuple[str, str]] = []


@app.tool()
def add_memory(user_input: str, agent_response: str) -> str:
    kept.append((user_input, agent_response))
    return "stored"


app.run()
"""

BARE_FSYNC_SERVER = """\
import json
import os
import sys

from mcp.server import MCPServer

app = MCPServer("bare-fsync")
kept: list[tuple[str, str]] = []
log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)


@app.tool()
def add_memory(user_input: str, agent_response: str) -> str:
    kept.append((user_input, agent_response))
    os.write(log, (json.dumps([user_input, agent_response]) + "\\n").encode())
    os.fsync(log)
    return "stored"


app.run()
"""


class StdioServer:
    """A server process and a blocking one-call-at-a-time JSON-RPC client over its pipes."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path) -> None:
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd
        )
        self._next_id = 0
        self.call("initialize", {
            "protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"},
        })  # fmt: skip
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _send(self, message: dict) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(message) + "\n").encode())
        self.process.stdin.flush()

    def call(self, method: str, params: dict) -> dict:
        self._next_id += 1
        self._send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        assert self.process.stdout is not None
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"{method}: the server closed its output")
            message = json.loads(line)
            if message.get("id") == self._next_id:
                if "error" in message or message.get("result", {}).get("isError"):
                    raise RuntimeError(f"{method} failed: {message}")
                return message

    def timed_adds(self, count: int) -> list[float]:
        """Milliseconds per tools/call of add_memory, request written to response read."""
        arguments = {"user_input": USER_INPUT, "agent_response": AGENT_RESPONSE}
        times = []
        for _ in range(count):
            started = time.perf_counter()
            self.call("tools/call", {"name": "add_memory", "arguments": arguments})
            times.append((time.perf_counter() - started) * 1e3)
        return times

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="timed add_memory calls per server (default 1000)")
    parser.add_argument("--block", type=int, default=50, help="calls per server before switching (default 50)")
    parser.add_argument("--warm-up", type=int, default=100, help="untimed calls per server first (default 100)")
    parser.add_argument("--python", default=sys.executable, help="interpreter to run both servers with")
    return report_only(report, parser.parse_args(argv))


def report(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-add-stdio-") as temp:
        temp_dir = Path(temp)
        (temp_dir / "bare_server.py").write_text(BARE_SERVER)
        (temp_dir / "bare_fsync_server.py").write_text(BARE_FSYNC_SERVER)
        home = temp_dir / "memory-home"
        home.mkdir()
        env = {key: value for key, value in os.environ.items() if key not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
        env["MEMORY_MCP_HOME"] = str(home)
        fsync_log = str(home / "bare-fsync.jsonl")
        servers = {
            "bare SDK server": StdioServer([args.python, str(temp_dir / "bare_server.py")], env, temp_dir),
            "bare + append, fsync": StdioServer(
                [args.python, str(temp_dir / "bare_fsync_server.py"), fsync_log], env, temp_dir
            ),
            "memory-mcp": StdioServer([args.python, str(PROJECT_ROOT / "server.py")], env, PROJECT_ROOT),
        }
        times: dict[str, list[float]] = {name: [] for name in servers}
        try:
            for server in servers.values():
                server.timed_adds(args.warm_up)
            while len(times["memory-mcp"]) < args.calls:
                block = min(args.block, args.calls - len(times["memory-mcp"]))
                for name, server in servers.items():
                    times[name] += server.timed_adds(block)
        finally:
            for server in servers.values():
                server.close()

    bare, with_fsync, product = (percentile(values, 50) for values in times.values())
    fsync = with_fsync - bare
    target = TARGET_RATIO * bare + fsync
    print(f"add_memory over stdio, one call at a time ({args.calls} per server, alternating blocks of {args.block})")
    print(f"python {args.python} ({sys.version.split()[0]}), {os.cpu_count()} CPUs")
    print(f"{'':<26}{'p50':>9}{'p95':>9}")
    for name, values in times.items():
        print(f"{name:<26}{percentile(values, 50):>8.2f} {percentile(values, 95):>8.2f}  ms")
    verdict = "ok" if product <= target else "MISSED"
    print(
        f"memory-mcp p50 {product:.2f} ms = {product / bare:.2f}x bare, {product / with_fsync:.2f}x bare + fsync; "
        f"target {TARGET_RATIO} x {bare:.2f} + fsync {fsync:.2f} = {target:.2f} ms: {verdict}"
    )


if __name__ == "__main__":
    sys.exit(main())
