#!/usr/bin/env python
"""Cold start: time from spawning a stdio MCP server to its `initialize` response.

Compares (a) a bare MCP SDK server with one trivial tool, written to a temp file, with (b) the
product, `python server.py`, with MEMORY_MCP_HOME pointing at a temp dir. Speaks raw
newline-delimited JSON-RPC over pipes, alternating a, b, a, b... (--runs each, after one
untimed warm-up of each so .pyc compilation is not counted). Then runs the product once under
`-X importtime` to list what it imported before the handshake was answered, and checks that
numpy, tiktoken and openai are not among them.

Usage:  .venv/bin/python bench/bench_startup.py [--runs 10] [--python PATH]
Target: the product's median within 0.5 s of the bare server's. Always exits 0 (a report).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from bench.result_files import add_results_option, markdown_table, write
from bench.stats import report_only

PROTOCOL_VERSION = "2025-11-25"
TARGET_DIFFERENCE_S = 0.5
HEAVY_MODULES = ("numpy", "tiktoken", "openai", "snowballstemmer", "httpx", "httpx2")
MUST_NOT_IMPORT = ("numpy", "tiktoken", "openai")
TIMEOUT_S = 30

BARE_SERVER = """\
from mcp.server import MCPServer

app = MCPServer("bare")


@app.tool()
def ping() -> str:
    return "pong"


app.run()
"""


def initialize_message(request_id: int = 1) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"},
        },
    }
    return (json.dumps(message) + "\n").encode()


class Run:
    """One server process: spawn, send initialize, wait for the answer to id 1."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path) -> None:
        self.command, self.env, self.cwd = command, env, cwd
        self.stderr_lines: list[tuple[float, str]] = []
        self.response: dict | None = None
        self.seconds: float | None = None
        self.response_at: float | None = None
        self.cpu_seconds: float | None = None  # the server's user+sys CPU, start to exit

    def execute(self) -> None:
        lines: queue.Queue[bytes | None] = queue.Queue()
        started = time.perf_counter()
        process = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            cwd=self.cwd,
        )
        # Written at once: the pipe buffers it until the server reads stdin.
        process.stdin.write(initialize_message())
        process.stdin.flush()
        readers = [
            threading.Thread(target=self._read_stdout, args=(process, lines), daemon=True),
            threading.Thread(target=self._read_stderr, args=(process,), daemon=True),
        ]
        for reader in readers:
            reader.start()
        try:
            deadline = started + TIMEOUT_S
            while True:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    raise TimeoutError(f"no initialize response within {TIMEOUT_S}s")
                try:
                    line = lines.get(timeout=remaining)
                except queue.Empty:
                    continue
                if line is None:
                    raise RuntimeError(f"server closed stdout before answering; stderr: {self._stderr_tail()}")
                now = time.perf_counter()
                try:
                    message = json.loads(line)
                except ValueError:
                    continue  # not protocol (should not happen on stdout)
                if isinstance(message, dict) and message.get("id") == 1:
                    self.seconds = now - started
                    self.response_at = now
                    self.response = message
                    break
        finally:
            try:
                process.stdin.close()  # EOF: a stdio server shuts down
            except OSError:
                pass
            self.cpu_seconds = _reap(process, timeout=10)
            for reader in readers:
                reader.join(timeout=5)
        if "error" in self.response:
            raise RuntimeError(f"initialize answered with an error: {self.response['error']}")

    def _read_stdout(self, process: subprocess.Popen, lines: queue.Queue) -> None:
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    def _read_stderr(self, process: subprocess.Popen) -> None:
        for raw in process.stderr:
            self.stderr_lines.append((time.perf_counter(), raw.decode(errors="replace").rstrip("\n")))

    def _stderr_tail(self) -> str:
        time.sleep(0.2)
        return " | ".join(line for _, line in self.stderr_lines[-10:])


def _reap(process: subprocess.Popen, timeout: float) -> float:
    """Wait for the process to exit (killing it after `timeout`); return its user+sys CPU seconds."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            process.kill()
            pid, status, usage = os.wait4(process.pid, 0)
            break
        time.sleep(0.005)
    process.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def parse_importtime(lines: list[str]) -> list[tuple[str, int, int, int]]:
    """(module, self_us, cumulative_us, depth) per `-X importtime` line, in completion order."""
    parsed = []
    for line in lines:
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        try:
            self_field, cumulative_field, raw_name = line.split(":", 1)[1].split("|", 2)
            self_us, cumulative_us = int(self_field), int(cumulative_field)
        except ValueError:
            continue
        depth = (len(raw_name) - len(raw_name.lstrip(" ")) - 3) // 2  # top level: 0
        parsed.append((raw_name.strip(), self_us, cumulative_us, depth))
    return parsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs of each server (default 10)")
    parser.add_argument("--python", default=sys.executable, help="interpreter to run both servers with")
    add_results_option(parser)
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)
    return report_only(report, args)


def report(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as temp:
        temp_dir = Path(temp)
        bare_script = temp_dir / "bare_server.py"
        bare_script.write_text(BARE_SERVER)
        env = {key: value for key, value in os.environ.items() if key not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
        env["MEMORY_MCP_HOME"] = str(temp_dir / "memory-home")
        # Bytecode is cached (as on any installed server) but in a private prefix, so the runs
        # neither depend on nor write the project's __pycache__; the warm-up run fills it.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(temp_dir / "pycache")
        servers = {
            "bare": ([args.python, str(bare_script)], temp_dir),
            "product": ([args.python, str(PROJECT_ROOT / "server.py")], PROJECT_ROOT),
        }

        for name, (command, cwd) in servers.items():  # warm-up: .pyc compilation, disk cache
            run = Run(command, env, cwd)
            run.execute()
            result = run.response["result"]
            print(
                f"warm-up {name}: {run.seconds:.3f}s; server {result['serverInfo'].get('name')!r} "
                f"answered protocolVersion {result.get('protocolVersion')}",
                file=sys.stderr,
            )

        times: dict[str, list[float]] = {name: [] for name in servers}
        cpu: dict[str, list[float]] = {name: [] for name in servers}
        for i in range(args.runs):
            for name, (command, cwd) in servers.items():
                run = Run(command, env, cwd)
                run.execute()
                times[name].append(run.seconds)
                cpu[name].append(run.cpu_seconds)
            print(
                f"run {i + 1}/{args.runs}: bare {times['bare'][-1]:.3f}s  product {times['product'][-1]:.3f}s",
                file=sys.stderr,
            )

        # Imports before the handshake: -X importtime writes one stderr line as each import
        # completes; lines read before the response arrived were imported before it.
        traced = Run([args.python, "-X", "importtime", str(PROJECT_ROOT / "server.py")], env, PROJECT_ROOT)
        traced.execute()
        time.sleep(0.3)
        before = [line for at, line in traced.stderr_lines if at <= traced.response_at]
        after = [line for at, line in traced.stderr_lines if at > traced.response_at]
        imports_before = parse_importtime(before)
        imports_after = parse_importtime(after)
        bare_traced = Run([args.python, "-X", "importtime", str(bare_script)], env, temp_dir)
        bare_traced.execute()
        time.sleep(0.3)
        bare_imports = parse_importtime(
            [line for at, line in bare_traced.stderr_lines if at <= bare_traced.response_at]
        )

    print()
    print(f"MCP stdio cold start: spawn -> initialize response ({args.runs} runs each, alternating, after 1 warm-up)")
    print(f"python {args.python} ({sys.version.split()[0]}), {os.cpu_count()} CPUs, protocolVersion {PROTOCOL_VERSION}")
    print()
    print(f"{'server':<10} {'median':>8} {'min':>8} {'max':>8}   {'CPU median':>10} (server's user+sys, spawn to exit)")
    for name, values in times.items():
        print(
            f"{name:<10} {statistics.median(values):>7.3f}s {min(values):>7.3f}s {max(values):>7.3f}s   "
            f"{statistics.median(cpu[name]):>9.3f}s"
        )
    difference = statistics.median(times["product"]) - statistics.median(times["bare"])
    difference_min = min(times["product"]) - min(times["bare"])
    paired = statistics.median(p - b for p, b in zip(times["product"], times["bare"]))
    verdict = "ok" if difference < TARGET_DIFFERENCE_S else "MISSED"
    print(
        f"difference (product - bare): medians {difference:+.3f}s, mins {difference_min:+.3f}s, "
        f"median of paired runs {paired:+.3f}s; target: medians < {TARGET_DIFFERENCE_S}s: {verdict}"
    )
    cpu_difference = statistics.median(cpu["product"]) - statistics.median(cpu["bare"])
    print(f"CPU difference (medians): {cpu_difference:+.3f}s (less sensitive to other load on the machine)")
    print()

    def heavy(imports: list[tuple[str, int, int, int]]) -> dict[str, int]:
        found: dict[str, int] = {}
        for name, _, cumulative, _ in imports:
            root = name.split(".")[0]
            if root in HEAVY_MODULES and (root not in found or name == root):
                found[root] = cumulative if name == root else found.get(root, cumulative)
        return found

    heavy_before = heavy(imports_before)
    heavy_after = heavy(imports_after)
    top_level_us = sum(cum for _, _, cum, depth in imports_before if depth == 0)
    bare_top_level_us = sum(cum for _, _, cum, depth in bare_imports if depth == 0)
    print(
        f"imports before the handshake (-X importtime): product {len(imports_before)} modules, "
        f"{top_level_us / 1e6:.3f}s; bare {len(bare_imports)} modules, {bare_top_level_us / 1e6:.3f}s"
    )
    for module in MUST_NOT_IMPORT:
        state = f"IMPORTED ({heavy_before[module] / 1e3:.0f} ms)" if module in heavy_before else "not imported"
        print(f"  {module:<9} {state}")
    others = {k: v for k, v in heavy_before.items() if k not in MUST_NOT_IMPORT}
    bare_heavy = heavy(bare_imports)
    if others:
        print(
            "  also heavy, before: "
            + ", ".join(
                f"{k} ({v / 1e3:.0f} ms{'; the bare server imports it too' if k in bare_heavy else ''})"
                for k, v in others.items()
            )
        )
    if heavy_after:
        print("  imported after the handshake (before exit): " + ", ".join(heavy_after))
    violations = [m for m in MUST_NOT_IMPORT if m in heavy_before]
    print(
        f"heavy-import check: {'FAILED: ' + ', '.join(violations) if violations else 'ok (none of ' + ', '.join(MUST_NOT_IMPORT) + ')'}"
    )
    bare_names = {name for name, *_ in bare_imports}
    extra = [(name, self_us) for name, self_us, _, _ in imports_before if name not in bare_names]
    extra_us = sum(self_us for _, self_us in extra)
    slowest = sorted(extra, key=lambda item: -item[1])[:8]
    print(
        f"modules only the product imports before the handshake: {len(extra)}, {extra_us / 1e3:.0f} ms own import time; "
        "slowest: " + ", ".join(f"{name} {self_us / 1e3:.1f} ms" for name, self_us in slowest)
    )
    if not args.no_results:
        labels = {"bare": "a bare MCP SDK server, one tool", "product": "memory-mcp (`server.py`)"}
        rows = [
            (
                labels[name],
                f"{statistics.median(values) * 1e3:,.0f} ms",
                f"{min(values) * 1e3:,.0f} ms",
                f"{max(values) * 1e3:,.0f} ms",
                f"{statistics.median(cpu[name]) * 1e3:,.0f} ms",
            )
            for name, values in times.items()
        ]
        figures = markdown_table(("stdio server", "to `initialize`, median", "min", "max", "CPU, median"), rows)
        figures += (
            f"\n\nmemory-mcp answers {difference * 1e3:+.0f} ms after the bare server (medians; target: under "
            f"{TARGET_DIFFERENCE_S * 1e3:.0f} ms); {', '.join(MUST_NOT_IMPORT)} imported before the answer: "
            f"{', '.join(violations) if violations else 'none'}."
        )
        write(
            "bench_startup",
            "Cold start: spawning a stdio server until it answers `initialize`",
            figures,
            f"{args.runs} runs of each server, alternating, after one untimed warm-up of each. CPU is the "
            "server's user and system time from spawn to exit, less sensitive to other load on the machine.",
        )


if __name__ == "__main__":
    raise SystemExit(main())
