"""Throughput over streamable HTTP: concurrent MCP clients against real server processes.

For bench_store.py --http. Each run: a temp data directory (and, for PostgreSQL, a schema of its
own), every client's user seeded with pages through the store (untimed), one bearer token per
user from `memory-mcp token add`, then one or more `python -m memory_mcp --transport
streamable-http` processes on free loopback ports over that same storage, ready once GET /health
answers. Each client is the SDK's own (`streamable_http_client` over an `httpx2.AsyncClient`
carrying its token, and a `ClientSession`), on instance `client % instances`; after an untimed
initialize and warm-up retrieve it alternates add_memory and retrieve_memory. Latency is what
the client sees per call; ops/s counts both kinds over the wall time from the moment every
client is ready to the last one's finish. All clients share this process's event loop.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.stats import summary
from bench.storage_backends import BULK_BATCH, drop_schema, new_schema_name, settings_for

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SCRUBBED = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMORY_MCP_HOME")  # extraction stays off, as in the store bench
START_TIMEOUT_S = 60
Texts = Callable[[int], Iterator[tuple[str, str, str]]]  # seed -> (user_input, agent_response, thread_id) forever


@dataclass
class HttpPlan:
    backend: str
    instances: int
    clients: int
    pairs: int  # add + retrieve pairs per client
    seeded_pages: int  # pages per user stored before the servers start
    dsn: str | None = None


@dataclass
class _ClientLog:
    add_ms: list[float] = field(default_factory=list)
    retrieve_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def run_http(plan: HttpPlan, texts: Texts, questions: list[str], work_parent: Path, keep: bool = False) -> dict:
    """One throughput run; the figures as a dict (with "error" if it could not run)."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-http-{plan.backend}-", dir=work_parent))
    schema = new_schema_name("http") if plan.backend == "postgres" else None
    servers: list[ServerProcess] = []
    result: dict = {"plan": plan.__dict__ | {"dsn": None}}
    try:
        users = [f"bench-http-{number}" for number in range(1, plan.clients + 1)]
        config = _write_config(work, plan.backend, schema)
        env = {key: value for key, value in os.environ.items() if key not in SCRUBBED}
        if plan.dsn:
            env["MEMORY_MCP_DSN"] = plan.dsn  # the password stays out of the config file
        t0 = time.perf_counter()
        _seed(settings_for(plan.backend, work / "data", plan.dsn, schema), users, plan.seeded_pages, texts)
        result["seed_seconds"] = round(time.perf_counter() - t0, 1)
        tokens = [_issue_token(config, user, env) for user in users]
        servers = [ServerProcess(config, work / f"server-{n}.log", env) for n in range(plan.instances)]
        for server in servers:
            server.wait_ready()
        result |= _drive(plan, servers, users, tokens, texts, questions)
    except Exception as exc:  # noqa: BLE001 (a report: whatever failed is printed in its row)
        while isinstance(exc, ExceptionGroup):  # a client's failure, from inside the task group
            exc = exc.exceptions[0]
        tails = " | ".join(server.tail() for server in servers)
        result["error"] = f"{type(exc).__name__}: {exc}" + (f" (server log: {tails})" if tails else "")
    finally:
        for server in servers:
            server.stop()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
            if schema and plan.dsn:
                drop_schema(plan.dsn, schema)
    return result


def _write_config(work: Path, backend: str, schema: str | None) -> Path:
    config: dict = {"data_storage_path": str(work / "data"), "http": {"auth": "tokens"}}
    if backend == "postgres":
        config["storage"] = {"backend": "postgres", "postgres_schema": schema}
    path = work / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def _seed(settings, users: list[str], count: int, texts: Texts) -> None:
    """Each user's first `count` pages, written through the store in bulk (not timed)."""
    from memory_mcp.base.clock import utc_now
    from memory_mcp.base.ids import new_id
    from memory_mcp.models import Page
    from memory_mcp.store import Scope, open_store

    store = open_store(settings)
    try:
        for number, user in enumerate(users):
            stream = texts(1000 + number)
            for start in range(0, count, BULK_BATCH):
                batch = []
                for _ in range(min(BULK_BATCH, count - start)):
                    user_input, agent_response, thread_id = next(stream)
                    batch.append(
                        Page(
                            page_id=new_id("page"),
                            user_input=user_input,
                            agent_response=agent_response,
                            timestamp=utc_now(),
                            thread_id=thread_id,
                        )
                    )
                store.append_pages(Scope(user), batch)
    finally:
        getattr(store, "close", lambda: None)()


def _issue_token(config: Path, user: str, env: dict[str, str]) -> str:
    command = [sys.executable, "-m", "memory_mcp", "--config", str(config), "token", "add", user]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=PROJECT_ROOT, env=env, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"`memory-mcp token add {user}` exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return done.stdout.strip().splitlines()[-1]


class ServerProcess:
    """`python -m memory_mcp --transport streamable-http` on a free loopback port."""

    def __init__(self, config: Path, log_path: Path, env: dict[str, str]) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.log_path = log_path
        self._log = log_path.open("wb")
        command = [sys.executable, "-m", "memory_mcp", "--config", str(config), "--transport", "streamable-http"]
        self.process = subprocess.Popen(
            [*command, "--port", str(self.port)], stdout=self._log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT, env=env
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2):
                    return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        raise RuntimeError(f"the server did not answer /health within {START_TIMEOUT_S} s")

    def cpu_seconds(self) -> float | None:
        return _cpu_seconds(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()

    def tail(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace").strip()[-400:]
        except OSError:
            return ""


def _drive(plan: HttpPlan, servers: list[ServerProcess], users, tokens, texts: Texts, questions: list[str]) -> dict:
    import anyio

    logs = [_ClientLog() for _ in users]
    ready = {"count": 0}
    go = {}
    cpu_before: dict = {}

    async def main() -> float:
        go["event"] = anyio.Event()

        def on_ready() -> None:
            ready["count"] += 1
            if ready["count"] == len(users):
                cpu_before.update(_cpu_snapshot(servers))
                go["started"] = time.perf_counter()
                go["event"].set()

        async with anyio.create_task_group() as group:
            for number, (token, log) in enumerate(zip(tokens, logs)):
                stream = texts(2000 + number)
                url = servers[number % len(servers)].url
                group.start_soon(_client, url, token, plan.pairs, stream, questions, on_ready, go, log)
        return time.perf_counter() - go.get("started", time.perf_counter())

    wall = anyio.run(main)
    cpu_after = _cpu_snapshot(servers)
    add_ms = [ms for log in logs for ms in log.add_ms]
    retrieve_ms = [ms for log in logs for ms in log.retrieve_ms]
    errors = [error for log in logs for error in log.errors]
    operations = len(add_ms) + len(retrieve_ms)
    return {
        "wall_seconds": round(wall, 2),
        "operations": operations,
        "ops_per_second": round(operations / wall, 1) if wall > 0 else None,
        "add_ms": summary(add_ms),
        "retrieve_ms": summary(retrieve_ms),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "cpu_seconds": {
            name: round(cpu_after[name] - cpu_before[name], 1)
            for name in cpu_after
            if cpu_before.get(name) is not None and cpu_after[name] is not None
        },
    }


async def _client(url, token, pairs, stream, questions, on_ready, go, log: _ClientLog) -> None:
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        await _call(session, "retrieve_memory", {"query": questions[0]}, log)  # index build: untimed
        log.errors.clear()
        on_ready()
        await go["event"].wait()
        for number in range(pairs):
            user_input, agent_response, thread_id = next(stream)
            added = {"user_input": user_input, "agent_response": agent_response, "thread_id": thread_id}
            log.add_ms.append(await _call(session, "add_memory", added, log))
            query = {"query": questions[number % len(questions)]}
            log.retrieve_ms.append(await _call(session, "retrieve_memory", query, log))


async def _call(session, name: str, arguments: dict, log: _ClientLog) -> float:
    """One tool call; its latency in ms (a tool error is counted, and timed like the rest)."""
    started = time.perf_counter()
    result = await session.call_tool(name, arguments)
    elapsed = (time.perf_counter() - started) * 1e3
    if result.is_error:
        log.errors.append(f"{name}: {' '.join(getattr(part, 'text', '') for part in result.content)[:200]}")
    return elapsed


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process, from /proc (None where there is no /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _postgres_cpu_seconds() -> float | None:
    """CPU time of every process named postgres on this machine (other users' sessions too)."""
    total, found = 0.0, False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if "(postgres)" in text:
            seconds = _cpu_seconds(int(stat.parent.name))
            if seconds is not None:
                total, found = total + seconds, True
    return total if found else None


def _cpu_snapshot(servers: list[ServerProcess]) -> dict[str, float | None]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    snapshot: dict[str, float | None] = {
        f"server {number + 1}": server.cpu_seconds() for number, server in enumerate(servers)
    }
    snapshot["clients (this process)"] = usage.ru_utime + usage.ru_stime
    snapshot["postgres (all its processes)"] = _postgres_cpu_seconds()
    return snapshot


def print_http_report(runs: list[dict]) -> None:
    if not runs:
        return
    print()
    print("throughput over streamable HTTP (real server processes, the SDK's client, bearer tokens):")
    header = (
        f"  {'storage':>8} {'instances':>9} {'clients':>7} | {'ops/s':>6} {'wall':>6} {'errors':>6} | "
        f"{'add p50':>7} {'p95':>7} | {'retrieve p50':>12} {'p95':>7}"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for run in runs:
        plan = run["plan"]
        lead = f"  {plan['backend']:>8} {plan['instances']:>9} {plan['clients']:>7} | "
        if "error" in run:
            print(lead + f"ERROR: {run['error']}")
            continue
        add, retrieve = run["add_ms"], run["retrieve_ms"]
        print(
            lead + f"{run['ops_per_second']:>6.1f} {run['wall_seconds']:>5.1f}s {run['errors']:>6} | "
            f"{add['p50']:>7.2f} {add['p95']:>7.2f} | {retrieve['p50']:>12.2f} {retrieve['p95']:>7.2f}"
        )
    first = runs[0]["plan"]
    print(
        f"  each client: {first['pairs']} add_memory + {first['pairs']} retrieve_memory, alternating, for its own user "
        f"(seeded with {first['seeded_pages']} pages; one untimed warm-up retrieve); times in ms as the clients see them"
    )
    for run in runs:
        if "cpu_seconds" in run:
            plan = run["plan"]
            spent = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in run["cpu_seconds"].items())
            print(f"  CPU during the timed part ({plan['backend']}, {plan['instances']} instance(s)): {spent}")
        if run.get("first_error"):
            print(f"  first error ({run['plan']['backend']}): {run['first_error']}")
