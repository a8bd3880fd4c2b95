"""Crash safety of the real server: SIGKILL at random instants, then restart, hundreds of times.

Guarantees proved here:

1. An acknowledged add_memory survives a crash at any instant, with the facts the host sent with
   it; and facts sent with an add the crash cut short are applied at the next start, once.
2. No file is ever left unreadable: after any crash the server starts and serves every user; a
   torn tail of the page log is dropped with a warning, never the data before it.

The crash test drives `server.py` over raw JSON-RPC on stdio, pipelining adds (and some
retrieves, profiles and flushes) for several users, with structured memory on against a scripted
LLM in this process and a debounce of 0-0.2 s, so that kills land during start-up (while pending
updates resume), appends, fsyncs, index builds and updater rewrites of memory.json. Three lanes
(MEMORY_MCP_CRASH_LANES) run at once on ONE data directory, each killing and restarting its own
server, so a process also dies while others write the same files. Every response a server wrote before it died is an
acknowledgement; each acknowledged page must then be on disk exactly once. After every kill the
files are read directly; at intervals, and at the end, a fresh spawned server must serve it all.

A fresh interpreter takes a second or more to import the MCP SDK on a small machine, which would
allow only about a hundred kills in two minutes. So most servers are forked from a "zygote" that
has already imported the server's modules, and then run server.py exactly as
`python server.py --config ...` would (same argv, environment, stdio, and code after the
imports). One cycle in SPAWN_EVERY spawns a genuine `python server.py` instead, as does every
verification; MEMORY_MCP_CRASH_SPAWN=all spawns every server.

Default: 200 kill points, or as many as fit in TIME_BUDGET seconds (but at least 100). Soak:
MEMORY_MCP_SOAK=1 runs MEMORY_MCP_SOAK_KILLS (default 2000) kill points, or for
MEMORY_MCP_SOAK_SECONDS if that is given instead. A summary line is printed (`pytest -s`).
MEMORY_MCP_CRASH_SEED replays the random choices (not the timing); MEMORY_MCP_CRASH_REPORT names
a file to receive the summary as JSON (it is also written to the test's tmp_path).
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import random
import re
import resource
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from project import PROJECT_ROOT, PYTHON
from scripted_llm import SCRIPTED_MODEL, ScriptedLLM, reply
from server_process import ServerProcess, start_spawned
from stdio_helpers import HANDSHAKE_PROTOCOL_VERSION, server_command, server_env, write_config

from memory_mcp.memory.facts import current, normalise
from memory_mcp.models import MemoryDocument, Page

pytestmark = pytest.mark.integration

SOAK = os.environ.get("MEMORY_MCP_SOAK") == "1"
SOAK_SECONDS = float(os.environ.get("MEMORY_MCP_SOAK_SECONDS") or 0)
KILL_POINTS = int(
    os.environ.get("MEMORY_MCP_CRASH_KILLS") or (os.environ.get("MEMORY_MCP_SOAK_KILLS", "2000") if SOAK else 200)
)
if SOAK and SOAK_SECONDS and not os.environ.get("MEMORY_MCP_SOAK_KILLS"):
    KILL_POINTS = 10**9  # a duration was asked for: as many kill points as fit
# The kill loop stops at KILL_POINTS or after TIME_BUDGET seconds, but not before MIN_KILL_POINTS
# unless HARD_BUDGET has passed (a loaded machine slows it down; it should not make it fail).
MIN_KILL_POINTS = 0 if SOAK and SOAK_SECONDS else min(100, KILL_POINTS)
TIME_BUDGET = (SOAK_SECONDS or 24 * 3600.0) if SOAK else 80.0
HARD_BUDGET = max(TIME_BUDGET, 200.0)
LANES = int(os.environ.get("MEMORY_MCP_CRASH_LANES", "3"))
SPAWN_ALL = os.environ.get("MEMORY_MCP_CRASH_SPAWN") == "all"
SPAWN_EVERY = 25  # one crash cycle in this many spawns a fresh interpreter instead of forking
VERIFY_EVERY = 250 if SOAK else 100  # kill points between verifications by a fresh server

SCOPES = [("alice", None), ("bob", None), ("carol", None), ("dave", None), ("alice", "coder")]
USERS = sorted({user for user, _ in SCOPES})
THREADS = [None, "t1", "t2"]
WORDS = [
    "kettle",
    "violin",
    "harbour",
    "lantern",
    "pepper",
    "glacier",
    "orchid",
    "saddle",
    "meteor",
    "walnut",
    "quartz",
    "ember",
]
WINDOW = 6  # requests in flight at once
MAX_ACKS_BEFORE_KILL = 16
MAX_KILL_DELAY = 0.15
STUCK_SECONDS = 30.0  # a server that answers nothing for this long fails the test
SCOPE_FILES = {"pages.jsonl", "memory.json", ".lock", ".memory.lock", ".update.lock"}
TEMP_FILE = re.compile(r"\.memory\.json\.[0-9a-f]{8}\.tmp")  # durable.atomic_write's temp name

FACT = "Runs crash tests on the memory server"
MAX_FACTS = 100  # memory.max_facts, the default: beyond it the oldest of equal confidence are retired
LLM_UPDATE = {
    "user": {"topOfMind": {"summary": "Testing that memory survives crashes.", "shouldUpdate": True}},
    "history": {},
    "newFacts": [{"content": FACT, "category": "context", "confidence": 0.9}],
    "factsToRemove": [],
    "assistantKnowledge": ["Kill the server at random moments"],
}


# --- server processes: forked from a preloaded zygote, or spawned --------------------------------

ZYGOTE = r"""
import json, os, runpy, socket, sys, traceback
sys.path.insert(0, sys.argv[2])
import memory_mcp.cli.main, memory_mcp.mcp.server, memory_mcp.service.memory_service  # what server.py imports
import numpy, tiktoken  # what the first retrieve imports
import openai  # what the first update imports
from memory_mcp.recall.token_count import offline_encoding
offline_encoding()
control = socket.socket(fileno=int(sys.argv[1]))
control.send(b"ready")
while True:
    try:
        message, fds, _flags, _address = socket.recv_fds(control, 1 << 17, 3)
    except OSError:
        break
    if not message:
        break
    spec = json.loads(message)
    while True:  # reap the servers that died since the last request
        try:
            done, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if done == 0:
            break
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            control.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in fds:
                os.close(fd)
            os.chdir(spec["cwd"])
            os.environ.clear()
            os.environ.update(spec["env"])
            sys.argv = list(spec["argv"])
            try:
                runpy.run_path(sys.argv[0], run_name="__main__")
                code = 0
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    for fd in fds:
        os.close(fd)
    control.send(json.dumps({"pid": pid}).encode())
"""


class Launcher:
    """Starts servers: forked from the zygote (fast), or spawned as `python server.py` (real)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._lock = threading.Lock()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._control = ours
        self._zygote_log = (workdir / "zygote.stderr.log").open("wb")
        self._zygote = subprocess.Popen(
            [PYTHON, "-c", ZYGOTE, str(theirs.fileno()), str(PROJECT_ROOT)],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._zygote_log,
            # No thread pools in the zygote: it forks.
            env=server_env(None, {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}),
            cwd=PROJECT_ROOT,
        )
        theirs.close()
        self._control.settimeout(60)
        assert self._control.recv(16) == b"ready", (workdir / "zygote.stderr.log").read_text()

    def start(self, home: Path, config: Path, llm_url: str | None, name: str, spawn: bool) -> ServerProcess:
        stderr_path = self.workdir / f"{name}.stderr.log"
        env = server_env(
            home, {"OPENAI_BASE_URL": llm_url, "MEMORY_MCP_LLM_MODEL": SCRIPTED_MODEL} if llm_url else None
        )
        argv = server_command(config)
        if spawn:
            with stderr_path.open("wb") as stderr:
                popen = subprocess.Popen(
                    argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=self.workdir
                )
            assert popen.stdin is not None and popen.stdout is not None
            stdin_fd, stdout_fd = os.dup(popen.stdin.fileno()), os.dup(popen.stdout.fileno())
            popen.stdin.close()
            popen.stdout.close()
            return ServerProcess(popen.pid, stdin_fd, stdout_fd, stderr_path, "spawned", popen)
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        spec = {"argv": argv[1:], "env": env, "cwd": str(self.workdir)}
        try:
            with self._lock:
                socket.send_fds(self._control, [json.dumps(spec).encode()], [stdin_r, stdout_w, stderr_fd])
                pid = json.loads(self._control.recv(1024))["pid"]
        finally:
            for fd in (stdin_r, stdout_w, stderr_fd):
                os.close(fd)
        return ServerProcess(pid, stdin_w, stdout_r, stderr_path, "forked")

    def close(self) -> None:
        self._control.close()  # the zygote exits at end of file
        try:
            self._zygote.wait(10)
        except subprocess.TimeoutExpired:
            self._zygote.kill()
            self._zygote.wait(10)
        self._zygote_log.close()


# --- what was sent and acknowledged, and what the files hold -------------------------------------

ScopeKey = tuple[str, str | None]


@dataclass(frozen=True)
class Sent:
    session: tuple[int, int]  # (lane, cycle): one server's session
    sequence: int  # the request's place in that session
    user_id: str
    agent_name: str | None
    user_input: str  # unique: it starts with a marker no other request carries
    agent_response: str
    thread_id: str | None
    fact: str | None = None  # a fact the add carried, as a host model sends them

    @property
    def scope(self) -> ScopeKey:
        return (self.user_id, self.agent_name)


@dataclass
class LogState:
    """What the checker has verified of one page log, which may only ever grow."""

    prefix: bytes = b""  # the complete lines verified so far: the file must always start with them
    pages: dict[str, Page] = field(default_factory=dict)  # by page_id, in file order
    last_of_session: dict[tuple[int, int], int] = field(default_factory=dict)  # sequence of its last page


@dataclass
class Ledger:
    """Every request sent and every acknowledgement received, across lanes; and the file checker."""

    home: Path
    lock: threading.RLock = field(default_factory=threading.RLock)
    sent: dict[str, Sent] = field(default_factory=dict)  # by user_input
    acked: dict[str, Sent] = field(default_factory=dict)  # by page_id
    logs: dict[ScopeKey, LogState] = field(default_factory=dict)
    facts: dict[ScopeKey, set[str]] = field(default_factory=dict)  # every fact in memory.json, held or not
    crowded: set[ScopeKey] = field(default_factory=set)  # memory.max_facts reached: old facts may be gone
    failures: list[str] = field(default_factory=list)
    unterminated_tails: int = 0  # seen by a check while every server was dead
    stale_temp_files: set[str] = field(default_factory=set)
    document_versions: set[str] = field(default_factory=set)

    def fail(self, message: str) -> None:
        with self.lock:
            if len(self.failures) < 50:
                self.failures.append(message)

    def record_sent(self, sent: Sent) -> None:
        with self.lock:  # before the request is written: any page on disk has its entry
            self.sent[sent.user_input] = sent

    def record_ack(self, page_id: str, sent: Sent) -> None:
        with self.lock:
            if page_id in self.acked:
                self.fail(f"page id {page_id} acknowledged twice")
            self.acked[page_id] = sent

    def check_files(self, when: str, quiescent: bool) -> None:
        """Read the data directory directly: every line a page, every memory.json a valid document,
        nothing but known files and atomic_write's temp files, every acknowledged page exactly once.

        Servers of other lanes may be writing meanwhile (`quiescent` False): acknowledgements are
        taken before the files are read, and memory.json before pages.jsonl, so nothing written
        during the check can be mistaken for a loss."""
        with self.lock:
            acked = dict(self.acked)
            users = self.home / "users"
            seen: Counter[str] = Counter()
            for user_dir in sorted(users.iterdir()) if users.is_dir() else []:
                self._check_scope(user_dir, (user_dir.name, None), when, quiescent, seen)
                agents = user_dir / "agents"
                for agent_dir in sorted(agents.iterdir()) if agents.is_dir() else []:
                    self._check_scope(agent_dir, (user_dir.name, agent_dir.name), when, quiescent, seen)
            for page_id, count in seen.items():
                if count > 1:
                    self.fail(f"{when}: page {page_id} is stored {count} times")
            lost = 0
            for page_id, sent in acked.items():
                state = self.logs.get(sent.scope)
                page = state.pages.get(page_id) if state else None
                if page is None:
                    lost += 1
                    if lost <= 5:
                        self.fail(f"{when}: acknowledged page {page_id} ({sent.user_input!r}) is LOST")
                elif (page.user_input, page.agent_response, page.thread_id) != (
                    sent.user_input,
                    sent.agent_response,
                    sent.thread_id,
                ):
                    self.fail(f"{when}: page {page_id} is not what was acknowledged: {page!r}")
            if lost:
                self.fail(f"{when}: {lost} acknowledged pages lost")
            for page_id, sent in acked.items():
                # Written to memory.json before the add was answered (and memory.json is read
                # after the acknowledgements are taken): it must be there.
                stored = self.facts.get(sent.scope, set())
                if sent.fact is not None and sent.fact not in stored and sent.scope not in self.crowded:
                    self.fail(f"{when}: the fact acknowledged with {page_id} ({sent.fact!r}) is LOST")

    def unapplied_host_facts(self, when: str) -> list[str]:
        """Facts carried by stored exchanges that memory.json does not hold (yet): those of adds a
        kill cut short between their two writes, until a restart finishes them."""
        self.check_files(when, quiescent=False)
        with self.lock:
            missing = []
            for scope, state in self.logs.items():
                carried = {self.sent[page.user_input].fact for page in state.pages.values()} - {None}
                if scope not in self.crowded:
                    missing += sorted(carried - self.facts.get(scope, set()))
            return missing

    def _check_scope(self, directory: Path, scope: ScopeKey, when: str, quiescent: bool, seen: Counter) -> None:
        for entry in directory.iterdir():
            if entry.name in SCOPE_FILES or (entry.name == "agents" and scope[1] is None and entry.is_dir()):
                continue
            if TEMP_FILE.fullmatch(entry.name):
                self.stale_temp_files.add(str(entry))  # a rename the kill prevented; nothing reads it
                continue
            self.fail(f"{when}: unexpected file {entry}")
        document = self._read_document(directory / "memory.json", when)  # first: see the docstring above
        if document is not None:
            self.facts[scope] = {fact.content for fact in document.facts}
            if len(current(document.facts)) >= MAX_FACTS:
                self.crowded.add(scope)
        state = self.logs.setdefault(scope, LogState())
        path = directory / "pages.jsonl"
        data = path.read_bytes() if path.exists() else b""
        if not data.startswith(state.prefix):
            self.fail(f"{when}: {path} no longer starts with the {len(state.prefix)} bytes verified before")
            return
        end = data.rfind(b"\n") + 1
        if end < len(data) and quiescent:
            self.unterminated_tails += 1  # an interrupted append: allowed, the next append cuts it
        for number, line in enumerate(data[len(state.prefix) : end].split(b"\n")[:-1]):
            try:
                page = Page.model_validate(json.loads(line))
            except ValueError as exc:
                self.fail(f"{when}: {path}: line {len(state.pages) + number + 1} is not a page record: {exc}")
                return
            seen[page.page_id] += 1
            sent = self.sent.get(page.user_input)
            if sent is None or sent.scope != scope:
                self.fail(f"{when}: {path} holds a page nobody sent to this scope: {page!r}")
            elif state.last_of_session.get(sent.session, -1) > sent.sequence:
                # A session's adds, pipelined or not, are stored in the order they were sent.
                self.fail(f"{when}: {path}: {page.user_input!r} is stored after a later add of its session")
            else:
                state.last_of_session[sent.session] = sent.sequence
            if page.page_id in state.pages:
                self.fail(f"{when}: {path} holds page {page.page_id} twice")
            state.pages[page.page_id] = page
        texts = Counter(page.user_input for page in state.pages.values())
        doubled = [text for text, count in texts.items() if count > 1]
        if doubled:
            self.fail(f"{when}: {path} stores one exchange more than once: {doubled[:3]}")
        state.prefix = data[:end]
        if document is not None:
            progress = document.analysis
            if progress.allBefore > len(state.pages) or any(n > len(state.pages) for n in progress.threads.values()):
                self.fail(f"{when}: {directory}/memory.json marks pages analysed that the log does not hold")

    def _read_document(self, path: Path, when: str) -> MemoryDocument | None:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            document = MemoryDocument.model_validate(json.loads(raw))
        except ValueError as exc:
            self.fail(f"{when}: {path} is not a valid memory document: {exc}")
            return None
        self.document_versions.add(f"{path}:{document.lastUpdated}")
        facts = Counter(normalise(fact.content) for fact in current(document.facts))
        knowledge = Counter(normalise(entry.content) for entry in document.assistantKnowledge)
        if any(count > 1 for count in (facts + knowledge).values()):
            self.fail(f"{when}: {path} holds an entry twice: {facts + knowledge}")
        return document


# --- one crash cycle ---------------------------------------------------------------------------


@dataclass
class Counts:
    kills: int = 0
    spawned: int = 0
    before_first_ack: int = 0
    requests: int = 0
    cut_by_kill: int = 0
    lifetimes: list[float] = field(default_factory=list)


def crash_cycle(
    ledger: Ledger,
    launcher: Launcher,
    rng: random.Random,
    lane: int,
    number: int,
    llm_url: str,
    spawn: bool,
    counts: Counts,
) -> None:
    """Start a server, keep it busy, SIGKILL it at a random instant; record every acknowledgement."""
    memory = {
        "debounce_seconds": round(rng.uniform(0.0, 0.2), 3),
        "llm_timeout_seconds": 5,
        "llm_max_attempts": 1,
        "shutdown_flush_seconds": 0,
        "token_counting": rng.choice(["char", "tiktoken"]),
    }
    name = f"lane{lane}-{number % 4}"
    config = write_config(launcher.workdir / "configs" / f"{name}.json", {"memory": memory})
    server = launcher.start(ledger.home, config, llm_url, name, spawn)
    acks_wanted = 0 if rng.random() < 0.25 else rng.randint(1, MAX_ACKS_BEFORE_KILL)
    delay = rng.uniform(0.0, MAX_KILL_DELAY)
    kill_at = server.started + delay if acks_wanted == 0 else None
    in_flight: dict[int, tuple[str, Sent | None]] = {}
    acks = sequence = 0
    ready = False
    last_progress = time.monotonic()
    initialize_id = server.request(
        "initialize",
        {
            "protocolVersion": HANDSHAKE_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "crash-driver", "version": "0"},
        },
    )
    where = f"lane {lane} cycle {number} ({server.kind} server)"
    killed = False
    cut_by_kill = 0

    def handle(line: bytes) -> None:
        nonlocal acks, ready, kill_at, last_progress, cut_by_kill
        if killed and not line.endswith(b"\n"):
            # The kill landed while the server was writing this response: a client never gets it,
            # so it acknowledges nothing (the pages it names may or may not be stored).
            cut_by_kill += 1
            return
        try:
            message = json.loads(line)
        except ValueError:
            ledger.fail(f"{where}: not JSON on stdout: {line[:200]!r}")
            return
        if "id" not in message or "method" in message:
            return  # a notification, or a request from the server
        last_progress = time.monotonic()
        if message["id"] == initialize_id:
            if "result" not in message:
                ledger.fail(f"{where}: initialize failed: {message}")
            ready = True
            server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            return
        tool, sent = in_flight.pop(message["id"])
        result = message.get("result")
        if result is None or result.get("isError"):
            ledger.fail(
                f"{where}: {tool} failed after {time.monotonic() - server.started:.2f}s: "
                f"{json.dumps(message)[:600]}\n{server.stderr()[-3000:]}"
            )
            return
        if sent is not None:
            answer = result["structuredContent"]
            if (answer["user_id"], answer["agent_name"]) != sent.scope:
                ledger.fail(f"{where}: add acknowledged for the wrong scope: {answer}")
            ledger.record_ack(answer["page_id"], sent)
            acks += 1
            if acks == acks_wanted and kill_at is None:
                kill_at = time.monotonic() + delay

    while True:
        now = time.monotonic()
        if kill_at is not None and now >= kill_at:
            break
        if now - last_progress > STUCK_SECONDS:
            ledger.fail(f"{where}: answered nothing for {STUCK_SECONDS}s:\n{server.stderr()[-3000:]}")
            break
        while ready and len(in_flight) < WINDOW:
            sequence += 1
            tool, arguments, sent = next_operation(rng, (lane, number), sequence)
            if sent is not None:
                ledger.record_sent(sent)
            in_flight[server.request("tools/call", {"name": tool, "arguments": arguments})] = (tool, sent)
        try:
            line = server.lines.get(timeout=0.2 if kill_at is None else max(0.0, kill_at - now))
        except queue.Empty:
            continue
        if line is None:
            ledger.fail(f"{where}: the server exited by itself:\n{server.stderr()[-3000:]}")
            break
        handle(line)

    lived = time.monotonic() - server.started
    server.kill()
    killed = True
    server.wait_dead()
    for line in server.drain():  # written before the kill: acknowledged, whether read in time or not
        handle(line)
    server.close()
    with ledger.lock:
        counts.kills += 1
        counts.spawned += spawn
        counts.before_first_ack += acks_wanted == 0
        counts.requests += sequence
        counts.cut_by_kill += cut_by_kill
        counts.lifetimes.append(lived)


def next_operation(
    rng: random.Random, session: tuple[int, int], sequence: int
) -> tuple[str, dict[str, Any], Sent | None]:
    """The next request of a session (lane, cycle): mostly adds, some retrieves (index builds, and
    session visits saved to memory.json), profiles and flushes (updates run at once)."""
    user_id, agent_name = rng.choice(SCOPES)
    identity: dict[str, Any] = {"user_id": user_id}
    if agent_name is not None:
        identity["agent_name"] = agent_name
    roll = rng.random()
    if roll < 0.08:
        return "retrieve_memory", {"query": " ".join(rng.sample(WORDS, 2)), **identity}, None
    if roll < 0.11:
        return "get_user_profile", {"include_knowledge": True, **identity}, None
    if roll < 0.13:
        return "flush_memory", identity, None
    marker = f"L{session[0]}c{session[1]}s{sequence}"
    sent = Sent(
        session=session,
        sequence=sequence,
        user_id=user_id,
        agent_name=agent_name,
        user_input=f"{marker} {user_id} mentions the {rng.choice(WORDS)} and the {rng.choice(WORDS)}",
        agent_response=f"noted {marker} " + "x" * rng.randint(0, 400),
        thread_id=rng.choice(THREADS),
    )
    arguments = {"user_input": sent.user_input, "agent_response": sent.agent_response, **identity}
    if sent.thread_id is not None:
        arguments["thread_id"] = sent.thread_id
    if rng.random() < 0.2:
        sent = dataclasses.replace(sent, fact=f"{marker} is a host fact")
        arguments["facts"] = [{"content": sent.fact, "category": "context", "confidence": 0.9}]
    if rng.random() < 0.3:
        arguments["meta_data"] = {"marker": marker}
    return "add_memory", arguments, sent


# --- verification by a fresh, real server ----------------------------------------------------------


def verify_with_fresh_server(ledger: Ledger, launcher: Launcher, name: str) -> int:
    """A spawned `python server.py` (no LLM) serves every user and returns every acknowledged page
    exactly once, in the order of the file; returns how many acknowledged pages it checked."""
    by_scope: dict[ScopeKey, set[str]] = {}
    for page_id, sent in ledger.acked.items():
        by_scope.setdefault(sent.scope, set()).add(page_id)
    config = write_config(launcher.workdir / "configs" / f"{name}.json", {})
    server = launcher.start(ledger.home, config, None, name, spawn=True)
    verified = 0
    try:
        server.initialize()
        listed = {user["user_id"]: user for user in server.tool("memory_status", {})["users"]}
        assert set(listed) == {scope[0] for scope in ledger.logs}, f"served users: {sorted(listed)}"
        for user_id in sorted(listed):
            exported = server.tool("export_memory", {"user_id": user_id})
            served = {(user_id, None): exported["pages"]}
            served.update({(user_id, agent): part["pages"] for agent, part in exported["agents"].items()})
            assert listed[user_id]["pages"] == sum(len(pages) for pages in served.values())
            for scope, pages in served.items():
                ids = [page["page_id"] for page in pages]
                on_disk = list(ledger.logs[scope].pages)
                assert ids == on_disk, f"{scope}: the served pages are not the file's"
                missing = by_scope.get(scope, set()) - set(ids)
                assert not missing, f"{scope}: acknowledged pages LOST: {sorted(missing)[:5]}"
                verified += len(by_scope.get(scope, set()))
                identity = {"user_id": user_id, **({"agent_name": scope[1]} if scope[1] else {})}
                recalled = server.tool("retrieve_memory", {"query": "kettle violin", **identity})
                # The newest by timestamp, ties by place in the log (a server may store a page
                # stamped a second earlier just after another's).
                stored = list(ledger.logs[scope].pages.values())
                newest = sorted(range(len(stored)), key=lambda n: (stored[n].timestamp, n))[-10:]
                assert [page["page_id"] for page in recalled["short_term_memory"]] == [
                    stored[n].page_id for n in newest
                ], scope
                server.tool("get_user_profile", {"include_knowledge": True, **identity})
        code = server.close_stdin_and_wait(15)
    finally:
        server.kill()
        server.close()
    stderr = server.stderr()
    assert code == 0, f"the verification server exited with {code}:\n{stderr[-3000:]}"
    assert "Traceback" not in stderr and "ERROR" not in stderr, stderr[-3000:]
    return verified


def resume_and_finish(ledger: Ledger, launcher: Launcher, llm_url: str) -> None:
    """A spawned server with the LLM on resumes what the kills interrupted (updates, and facts
    whose add was cut short); once nothing is pending it is ended as hosts do (stdin closed) and
    must exit 0."""
    config = write_config(launcher.workdir / "configs" / "final.json", {"memory": {"debounce_seconds": 0.05}})
    server = launcher.start(ledger.home, config, llm_url, "final", spawn=True)
    try:
        server.initialize()
        deadline = time.monotonic() + 60
        while True:
            pending = sum(user["pending_pages"] for user in server.tool("memory_status", {})["users"])
            unapplied = ledger.unapplied_host_facts("after the final restart")
            if (pending == 0 and not unapplied) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert pending == 0, f"{pending} exchanges still pending a minute after the last restart"
        assert not unapplied, f"facts of stored exchanges never applied after the restart: {unapplied[:3]}"
        assert server.close_stdin_and_wait(30) == 0, server.stderr()[-3000:]
    finally:
        server.kill()
        server.close()


# --- the tests ------------------------------------------------------------------------------------


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM(default=reply(LLM_UPDATE)).start()
    yield server
    server.stop()


@pytest.mark.timeout(0 if SOAK else 300)  # 0: no limit
def test_acknowledged_adds_survive_sigkill_at_any_instant(tmp_path: Path, llm: ScriptedLLM) -> None:
    home = tmp_path / "home"
    workdir = tmp_path / "work"
    (workdir / "configs").mkdir(parents=True)
    seed = int(os.environ.get("MEMORY_MCP_CRASH_SEED") or random.SystemRandom().randrange(1 << 32))
    ledger = Ledger(home)
    counts = Counts()
    started = time.monotonic()
    next_number = iter(range(10**9))
    verifications = 0

    def more(kills: int) -> bool:
        elapsed = time.monotonic() - started
        return (
            kills < KILL_POINTS
            and (elapsed < TIME_BUDGET or kills < MIN_KILL_POINTS)
            and elapsed < HARD_BUDGET
            and not ledger.failures
        )

    def lane(index: int, until: int) -> None:
        rng = random.Random(f"{seed}-{index}-{until}")
        while True:
            with ledger.lock:
                number = next(next_number)
                if number >= until or not more(number):
                    return
            spawn = SPAWN_ALL or number % SPAWN_EVERY == SPAWN_EVERY - 1
            crash_cycle(ledger, launcher, rng, index, number, llm.base_url, spawn, counts)
            ledger.check_files(f"after kill {number} (seed {seed})", quiescent=False)

    def run_lanes(until: int) -> None:
        errors: list[BaseException] = []

        def guarded(index: int) -> None:
            try:
                lane(index, until)
            except BaseException as exc:  # noqa: BLE001 (re-raised in the test's thread below)
                errors.append(exc)
                ledger.fail(f"lane {index} crashed: {exc!r}")

        threads = [threading.Thread(target=guarded, args=(index,)) for index in range(LANES)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    launcher = Launcher(workdir)
    try:
        while more(counts.kills):
            next_number = iter(range(counts.kills, 10**9))
            run_lanes(min(KILL_POINTS, counts.kills + VERIFY_EVERY))
            ledger.check_files(f"after {counts.kills} kill points (seed {seed})", quiescent=True)
            assert not ledger.failures, "\n".join(ledger.failures)
            if more(counts.kills):  # else the final verification follows at once
                verify_with_fresh_server(ledger, launcher, f"verify-{counts.kills}")
                verifications += 1
        loop_seconds = time.monotonic() - started
        resume_and_finish(ledger, launcher, llm.base_url)
        ledger.check_files("after the final restart", quiescent=True)
        assert not ledger.failures, "\n".join(ledger.failures)
        verified = verify_with_fresh_server(ledger, launcher, "verify-final")
        verifications += 1
    finally:
        launcher.close()

    assert counts.kills >= MIN_KILL_POINTS, f"only {counts.kills} kill points fit in {HARD_BUDGET}s"
    assert verified == len(ledger.acked) > 0
    summary = {
        "seed": seed,
        "lanes": LANES,
        "kill_points": counts.kills,
        "spawned_servers_killed": counts.spawned,
        "kills_before_first_ack": counts.before_first_ack,
        "requests_sent": counts.requests,
        "responses_cut_by_kill": counts.cut_by_kill,
        "acknowledged_writes_verified": verified,
        "acknowledged_host_facts_verified": sum(sent.fact is not None for sent in ledger.acked.values()),
        "lost": 0,
        "duplicated": 0,
        "pages_on_disk": sum(len(state.pages) for state in ledger.logs.values()),
        "unterminated_tails_seen": ledger.unterminated_tails,
        "stale_temp_files": len(ledger.stale_temp_files),
        "memory_json_versions_seen": len(ledger.document_versions),
        "llm_requests": len(llm.requests),
        "median_server_lifetime_ms": round(1000 * sorted(counts.lifetimes)[len(counts.lifetimes) // 2]),
        "fresh_server_verifications": verifications,
        "kill_loop_seconds": round(loop_seconds, 1),
        "test_process_cpu_seconds": round(sum(resource.getrusage(resource.RUSAGE_SELF)[:2]), 1),
        "servers_cpu_seconds": round(sum(resource.getrusage(resource.RUSAGE_CHILDREN)[:2]), 1),
        "total_seconds": round(time.monotonic() - started, 1),
    }
    text = json.dumps(summary, indent=2)
    (tmp_path / "crash-summary.json").write_text(text)
    if os.environ.get("MEMORY_MCP_CRASH_REPORT"):
        Path(os.environ["MEMORY_MCP_CRASH_REPORT"]).write_text(text)
    print(
        f"\ncrash test: {counts.kills} kill points ({counts.spawned} of spawned servers, "
        f"{counts.before_first_ack} before the first ack, {LANES} lanes on one data dir), "
        f"{verified} acknowledged writes verified, lost=0, duplicated=0; "
        f"stale temp files={summary['stale_temp_files']}, memory.json versions={summary['memory_json_versions_seen']}, "
        f"LLM requests={summary['llm_requests']}, {summary['total_seconds']}s (seed {seed})\n{json.dumps(summary)}"
    )


# --- torn writes, made by hand at the file level -------------------------------------------------

# What a writer killed mid-append may leave after the last newline, one kind per user.
TORN_TAILS = {
    "alice": lambda record: record[: len(record) // 2],  # half a record
    "bob": lambda record: b"{",  # its first byte
    "carol": lambda record: record[: record.index("é".encode()) + 1],  # a multi-byte character cut in two
    "dave": lambda record: record.rstrip(b"\n"),  # all but the newline: never acknowledged either
}


def seed_data_dir(home: Path) -> dict[str, list[str]]:
    """Three pages per user written through the service, and a fact for alice and carol."""
    from memory_mcp.base.settings import Settings
    from memory_mcp.models import AddFactRequest, AddMemoryRequest
    from memory_mcp.service.memory_service import MemoryService

    service = MemoryService(Settings(data_storage_path=home))
    ids: dict[str, list[str]] = {}
    for user in TORN_TAILS:
        ids[user] = [
            service.add_memory(
                AddMemoryRequest.build(user_id=user, user_input=f"{user} says café {n}", agent_response=f"ok {n}")
            ).page_id
            for n in range(3)
        ]
    for user in ("alice", "carol"):
        service.add_fact(AddFactRequest.build(user_id=user, content="Drinks coffee in cafés", category="preference"))
    service.close()
    return ids


def test_torn_tails_and_torn_temp_files_are_dropped_with_a_warning_and_nothing_else_is(tmp_path: Path) -> None:
    home = tmp_path / "home"
    workdir = tmp_path / "work"
    workdir.mkdir()
    ids = seed_data_dir(home)
    users = {user: home / "users" / user for user in TORN_TAILS}
    good_pages = {user: (directory / "pages.jsonl").read_bytes() for user, directory in users.items()}
    torn: dict[str, bytes] = {}
    for user, cut in TORN_TAILS.items():  # the crash: an append cut short
        record = Page(
            page_id=f"page_torn_{user}",
            user_input="never acknowledged é",
            agent_response="x",
            timestamp="2025-01-01T00:00:00Z",
        )
        torn[user] = cut((record.model_dump_json() + "\n").encode())
        with (users[user] / "pages.jsonl").open("ab") as stream:
            stream.write(torn[user])
    # ... and atomic writes that never reached their rename: beside a memory.json, and before the first.
    good_memory = {user: (users[user] / "memory.json").read_bytes() for user in ("alice", "carol")}
    replacement = json.loads(good_memory["alice"])
    replacement["facts"][0]["content"] = "Half-written replacement"
    half = json.dumps(replacement, indent=2).encode()
    (users["alice"] / ".memory.json.deadbeef.tmp").write_bytes(half[: len(half) // 2])
    (users["carol"] / ".memory.json.0badcafe.tmp").write_bytes(half)  # whole, but never renamed
    (users["bob"] / ".memory.json.12345678.tmp").write_bytes(half[:40])
    an_hour_ago = time.time() - 3600
    for stale in (users["alice"] / ".memory.json.deadbeef.tmp", users["bob"] / ".memory.json.12345678.tmp"):
        os.utime(stale, (an_hour_ago, an_hour_ago))  # left by a crash long ago; carol's is recent

    first = start_spawned(home, workdir, "first")
    added: dict[str, str] = {}
    try:
        status = {user["user_id"]: user["pages"] for user in first.tool("memory_status", {})["users"]}
        assert status == {user: 3 for user in TORN_TAILS}
        for user in TORN_TAILS:
            recalled = first.tool("retrieve_memory", {"query": "café", "user_id": user})
            assert [page["page_id"] for page in recalled["short_term_memory"]] == ids[user]
            facts = first.tool("get_user_profile", {"user_id": user, "include_knowledge": True})["facts"]
            expected = ["Drinks coffee in cafés"] if user in good_memory else []
            assert [fact["content"] for fact in facts] == expected, user
        warned = first.stderr()
        for user in TORN_TAILS:
            path = users[user] / "pages.jsonl"
            assert f"{path} ends with {len(torn[user])} bytes of an interrupted write" in warned, warned
            assert path.read_bytes() == good_pages[user] + torn[user]  # reading repairs nothing
        for user in TORN_TAILS:
            added[user] = first.tool(
                "add_memory", {"user_input": "after the crash", "agent_response": "ok", "user_id": user}
            )["page_id"]
        assert first.close_stdin_and_wait(15) == 0
    finally:
        first.kill()
        first.close()

    stderr = first.stderr()
    assert "Traceback" not in stderr, stderr
    for user, directory in users.items():
        path = directory / "pages.jsonl"
        assert f"{path}: dropping {len(torn[user])} bytes of an interrupted write" in stderr, stderr
        data = path.read_bytes()
        assert data.startswith(good_pages[user]) and data.endswith(b"\n")
        lines = [json.loads(line) for line in data.split(b"\n")[:-1]]  # every line valid JSON
        assert [line["page_id"] for line in lines] == [*ids[user], added[user]]
    for user, raw in good_memory.items():
        assert (users[user] / "memory.json").read_bytes() == raw  # no temp file was taken for it
    assert not (users["bob"] / "memory.json").exists()

    second = start_spawned(home, workdir, "second")
    try:
        for user in TORN_TAILS:
            recalled = second.tool("retrieve_memory", {"query": "crash", "user_id": user})
            assert [page["page_id"] for page in recalled["short_term_memory"]] == [*ids[user], added[user]]
        for user in ("alice", "bob", "carol"):  # a document write sweeps temp files left long ago
            second.tool("add_fact", {"content": "Survived a crash", "user_id": user})
        assert second.close_stdin_and_wait(15) == 0
    finally:
        second.kill()
        second.close()
    assert "interrupted write" not in second.stderr()
    temps = sorted(path.name for directory in users.values() for path in directory.glob(".memory.json.*.tmp"))
    # Only carol's is left: it could still be another process's write under way (it is minutes old at most).
    assert temps == [".memory.json.0badcafe.tmp"]
