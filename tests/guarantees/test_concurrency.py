"""Concurrent writers on ONE data directory lose nothing and never interleave a record.

Writers are real: processes calling the service API, several `python server.py` processes over
stdio, threads of one process (on one service, and on two services sharing the directory), and
two processes with structured memory on against a scripted LLM, updating the same user.

After each run the files are read directly: the totals are exact, every page id is unique, every
line is one valid JSON record ending in a newline, each writer's pages are in the order it wrote
them, and another process that had already read (and indexed) the logs sees every page.
"""

from __future__ import annotations

import inspect
import itertools
import json
import random
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import snowballstemmer
from project import PROJECT_ROOT, PYTHON
from scripted_llm import EMPTY_UPDATE, SCRIPTED_MODEL, ScriptedLLM, exchanges_of, reply
from server_process import ServerProcess, start_spawned

from memory_mcp.base.settings import MemorySettings, Settings
from memory_mcp.memory.facts import current, normalise
from memory_mcp.models import AddMemoryRequest, FlushRequest, MemoryDocument, Page, RetrieveMemoryRequest
from memory_mcp.recall import terms
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

pytestmark = pytest.mark.integration

USERS = ["u0", "u1", "u2", "u3", "u4"]


# --- writing ---------------------------------------------------------------------------------------


def exchange(writer: str, seq: int, user: str) -> dict[str, Any]:
    """The add_memory arguments of one writer's seq-th exchange. The marker is one index term, so a
    retrieve for it finds exactly this page; every 25th is large, so that a torn or interleaved
    write could not go unnoticed."""
    size = 30_000 if seq % 25 == 7 else 40 * (seq % 9)
    return {
        "user_id": user,
        "user_input": f"{writer} asks question {seq} marker{writer}x{seq}",
        "agent_response": f"answer {seq} " + "é" * size,
        "meta_data": {"writer": writer, "seq": seq},
        "thread_id": f"thread-{seq % 3}",
    }


EXCHANGE_SOURCE = inspect.getsource(exchange)

WRITER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from typing import Any
    from memory_mcp.base.settings import Settings
    from memory_mcp.models import AddMemoryRequest
    from memory_mcp.service.memory_service import MemoryService
    exec(sys.argv[5])  # def exchange(...), as in the test module

    root, writer, count, users = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4].split(",")
    service = MemoryService(Settings(data_storage_path=root))
    print("ready", flush=True)
    assert sys.stdin.readline().strip() == "go"
    acks, latencies = [], []
    for seq in range(count):
        started = time.monotonic()
        result = service.add_memory(AddMemoryRequest.build(**exchange(writer, seq, users[seq % len(users)])))
        latencies.append(time.monotonic() - started)
        acks.append([result.user_id, result.page_id, seq])
    service.close()
    print(json.dumps({"acks": acks, "latencies": latencies}), flush=True)
    """
)

OBSERVER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from memory_mcp.base.settings import Settings
    from memory_mcp.models import RetrieveMemoryRequest
    from memory_mcp.service.memory_service import MemoryService
    from memory_mcp.store import Scope

    root, users = Path(sys.argv[1]), sys.argv[2].split(",")
    service = MemoryService(Settings(data_storage_path=root))
    for user in users:  # read and index every log before the writers start
        service.retrieve_memory(RetrieveMemoryRequest.build(user_id=user, query="question"))
    print("ready", flush=True)
    queries = json.loads(sys.stdin.readline())  # {user: [marker, ...]} once the writers are done
    seen = {}
    for user, markers in queries.items():
        pages = service.store.read_pages(Scope(user)).pages
        found = {}
        for marker in markers:
            result = service.retrieve_memory(RetrieveMemoryRequest.build(user_id=user, query=marker, max_results=1))
            hits = [page.page_id for page in result.retrieved_pages]
            recent = [page.page_id for page in result.short_term_memory if page.user_input.split()[-1] == marker]
            found[marker] = (recent + hits)[:1]
        seen[user] = {"page_ids": [page.page_id for page in pages], "found": found}
    print(json.dumps(seen), flush=True)
    """
)


def start_python(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=PROJECT_ROOT,
    )


def finish(process: subprocess.Popen[str], timeout: float = 90) -> str:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]
    return out


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Child processes a test starts; any still running at the end are killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(10)


# --- reading the files directly ------------------------------------------------------------------


def read_log(root: Path, user: str) -> list[dict[str, Any]]:
    """Every record of the user's page log; fails unless each line is one complete, valid page."""
    data = (root / "users" / user / "pages.jsonl").read_bytes()
    assert data.endswith(b"\n"), f"{user}: the log does not end with a newline"
    records = []
    for number, line in enumerate(data.split(b"\n")[:-1], start=1):
        try:
            records.append(Page.model_validate_json(line).model_dump())
        except ValueError as exc:
            raise AssertionError(f"{user}: line {number} is not one valid record ({exc}): {line[:200]!r}") from None
    return records


def check_logs(root: Path, acks: dict[str, list[tuple[str, str, int]]], preexisting: dict[str, int]) -> int:
    """Exact totals, unique ids, valid lines, each writer's pages in the order it sent them (also
    when it sent them without waiting: a server stores a session's adds in arrival order); returns
    the pages checked."""
    per_user: dict[str, list[dict[str, Any]]] = {}
    for user in {user for writer_acks in acks.values() for user, _, _ in writer_acks} | set(preexisting):
        per_user[user] = read_log(root, user)
    all_ids = [record["page_id"] for records in per_user.values() for record in records]
    assert len(all_ids) == len(set(all_ids)), "a page id appears twice"
    acked_ids = {page_id for writer_acks in acks.values() for _, page_id, _ in writer_acks}
    assert len(acked_ids) == sum(len(writer_acks) for writer_acks in acks.values()), "an id was acknowledged twice"
    for user, records in per_user.items():
        expected = preexisting.get(user, 0) + sum(
            1 for a in acks.values() for acked_user, _, _ in a if acked_user == user
        )
        assert len(records) == expected, f"{user}: {len(records)} pages stored, {expected} written"
        for writer, writer_acks in acks.items():
            mine = [
                (r["page_id"], r["meta_data"]["seq"]) for r in records if (r["meta_data"] or {}).get("writer") == writer
            ]
            acked = [(page_id, seq) for acked_user, page_id, seq in writer_acks if acked_user == user]
            assert mine == acked, f"{user}: {writer}'s pages are not all there, in the order sent"
            for record in records:
                if (record["meta_data"] or {}).get("writer") == writer:
                    assert record["user_input"] == exchange(writer, record["meta_data"]["seq"], user)["user_input"]
    assert acked_ids <= set(all_ids)
    return len(acked_ids)


def seed(root: Path, users: list[str], per_user: int = 3) -> dict[str, int]:
    service = MemoryService(Settings(data_storage_path=root))
    for user in users:
        for n in range(per_user):
            service.add_memory(AddMemoryRequest.build(**exchange("seed", n, user)))
    service.close()
    return {user: per_user for user in users}


def switches(root: Path, users: list[str]) -> int:
    """How often neighbouring lines come from different writers: evidence the writes overlapped."""
    count = 0
    for user in users:
        writers = [(record["meta_data"] or {}).get("writer") for record in read_log(root, user)]
        count += sum(1 for a, b in itertools.pairwise(writers) if a != b)
    return count


def latency_summary(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    return (
        f"add latency p50={1000 * statistics.median(ordered):.1f}ms "
        f"p99={1000 * ordered[int(0.99 * (len(ordered) - 1))]:.1f}ms max={1000 * ordered[-1]:.1f}ms"
    )


# --- processes through the service API --------------------------------------------------------------


@pytest.mark.timeout(180)
@pytest.mark.parametrize("layout", ["one user", "many users"])
def test_processes_adding_at_once_lose_nothing_and_interleave_no_record(
    data_dir: Path, processes: list[subprocess.Popen[str]], layout: str
) -> None:
    writers, per_writer = 4, 300
    users = ["shared"] if layout == "one user" else USERS
    preexisting = seed(data_dir, users)
    observer = start_python(OBSERVER, str(data_dir), ",".join(users))
    children = {
        f"w{n}": start_python(WRITER, str(data_dir), f"w{n}", str(per_writer), ",".join(users), EXCHANGE_SOURCE)
        for n in range(writers)
    }
    processes.extend([observer, *children.values()])
    for child in [observer, *children.values()]:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready", child.stderr.read()
    started = time.monotonic()
    for child in children.values():
        child.stdin.write("go\n")
        child.stdin.flush()
    results = {writer: json.loads(finish(child)) for writer, child in children.items()}
    seconds = time.monotonic() - started

    acks = {writer: [tuple(ack) for ack in result["acks"]] for writer, result in results.items()}
    checked = check_logs(data_dir, acks, preexisting)
    assert checked == writers * per_writer
    overlap = switches(data_dir, users)
    assert overlap > 0, "the writers did not write at the same time"

    # Another process, which had read and indexed every log before, sees every page afterwards.
    queries = {
        user: [
            exchange(writer, seq, user)["user_input"].split()[-1]
            for writer, a in acks.items()
            for u, _, seq in a
            if u == user
        ][::7]
        for user in users
    }
    observer.stdin.write(json.dumps(queries) + "\n")
    observer.stdin.flush()
    seen = json.loads(finish(observer))
    for user in users:
        assert seen[user]["page_ids"] == [record["page_id"] for record in read_log(data_dir, user)]
        by_marker = {record["user_input"].split()[-1]: record["page_id"] for record in read_log(data_dir, user)}
        for marker, found in seen[user]["found"].items():
            assert found == [by_marker[marker]], f"{user}: retrieving {marker} found {found}"
    latencies = [latency for result in results.values() for latency in result["latencies"]]
    print(
        f"\n{writers} processes x {per_writer} adds on {len(users)} user(s): {checked} pages verified, lost=0, "
        f"{overlap} changes of writer between neighbouring lines, {seconds:.1f}s, "
        f"{latency_summary(latencies)}"
    )


# --- several real stdio servers ------------------------------------------------------------------------


def drive(
    server: ServerProcess, writer: str, count: int, users: list[str], window: int = 4
) -> list[tuple[str, str, int]]:
    """Pipeline `count` add_memory calls (up to `window` in flight); the acknowledgements by seq."""
    in_flight: dict[int, int] = {}
    acks: dict[int, tuple[str, str, int]] = {}
    sent = 0
    while len(acks) < count:
        while sent < count and len(in_flight) < window:
            arguments = exchange(writer, sent, users[sent % len(users)])
            in_flight[server.request("tools/call", {"name": "add_memory", "arguments": arguments})] = sent
            sent += 1
        line = server.lines.get(timeout=60)
        assert line is not None, f"{writer}'s server exited:\n{server.stderr()[-3000:]}"
        message = json.loads(line)
        if message.get("id") not in in_flight:
            continue
        seq = in_flight.pop(message["id"])
        result = message["result"]
        assert not result.get("isError"), result
        acks[seq] = (result["structuredContent"]["user_id"], result["structuredContent"]["page_id"], seq)
    return [acks[seq] for seq in range(count)]


@pytest.mark.timeout(180)
def test_several_stdio_servers_on_one_data_dir_lose_nothing(tmp_path: Path, data_dir: Path) -> None:
    users = ["shared", "u1", "u2"]
    preexisting = seed(data_dir, users)
    workdir = tmp_path / "work"
    workdir.mkdir()
    servers: dict[str, ServerProcess] = {}
    try:
        with ThreadPoolExecutor(3) as pool:
            started = list(pool.map(lambda n: start_spawned(data_dir, workdir, f"s{n}"), range(3)))
        servers = {f"s{n}": server for n, server in enumerate(started)}
        first = servers["s0"]
        for user in users:  # the first server reads and indexes the logs before the others write
            first.tool("retrieve_memory", {"query": "question", "user_id": user})
        per_server = 60
        # Each server writes to the shared user every other call, and to one of the others in between.
        with ThreadPoolExecutor(len(servers)) as pool:
            futures = {
                name: pool.submit(drive, server, name, per_server, ["shared", users[1 + n % 2]])
                for n, (name, server) in enumerate(servers.items())
            }
            acks = {name: future.result(timeout=120) for name, future in futures.items()}
        checked = check_logs(data_dir, acks, preexisting)
        assert checked == per_server * len(servers)
        overlap = switches(data_dir, users)

        status = {user["user_id"]: user["pages"] for user in first.tool("memory_status", {})["users"]}
        assert status == {user: len(read_log(data_dir, user)) for user in users}
        for name, writer_acks in acks.items():  # the first server finds pages the others wrote
            for user, page_id, seq in writer_acks[::9]:
                marker = exchange(name, seq, user)["user_input"].split()[-1]
                recalled = first.tool("retrieve_memory", {"query": marker, "user_id": user, "max_results": 1})
                found = [p["page_id"] for p in recalled["short_term_memory"] if p["user_input"].split()[-1] == marker]
                found += [p["page_id"] for p in recalled["retrieved_pages"]]
                assert found[:1] == [page_id], f"{user}: retrieving {marker} found {found}"
        for server in servers.values():
            assert server.close_stdin_and_wait(20) == 0, server.stderr()[-3000:]
    finally:
        for server in servers.values():
            server.kill()
            server.close()
    for server in servers.values():
        assert "Traceback" not in server.stderr(), server.stderr()[-3000:]
    print(
        f"\n{len(servers)} stdio servers x {per_server} pipelined adds: {checked} pages verified, lost=0, "
        f"{overlap} changes of writer between neighbouring lines"
    )


# --- threads of one process --------------------------------------------------------------------------


@pytest.mark.parametrize("services", [1, 2], ids=["one service", "two services"])
@pytest.mark.parametrize("layout", ["one user", "many users"])
def test_threads_adding_at_once_lose_nothing_and_interleave_no_record(
    data_dir: Path, services: int, layout: str
) -> None:
    threads, per_thread = 8, 60
    users = ["shared"] if layout == "one user" else USERS
    preexisting = seed(data_dir, users)
    # Two services in one process share nothing but the directory: their file locks must exclude
    # each other as those of two processes do.
    instances = [MemoryService(Settings(data_storage_path=data_dir)) for _ in range(services)]
    barrier = threading.Barrier(threads)

    def write(n: int) -> list[tuple[str, str, int]]:
        service = instances[n % services]
        writer = f"t{n}"
        barrier.wait()
        acks = []
        for seq in range(per_thread):
            result = service.add_memory(AddMemoryRequest.build(**exchange(writer, seq, users[(seq + n) % len(users)])))
            acks.append((result.user_id, result.page_id, seq))
        return acks

    with ThreadPoolExecutor(threads) as pool:
        acks = dict(zip((f"t{n}" for n in range(threads)), pool.map(write, range(threads))))
    assert check_logs(data_dir, acks, preexisting) == threads * per_thread
    assert switches(data_dir, users) > threads, "the threads did not write at the same time"
    for service in instances:  # each sees every page, its own and the other's
        for user in users:
            assert [p.page_id for p in service.store.read_pages(Scope(user)).pages] == [
                record["page_id"] for record in read_log(data_dir, user)
            ]
        service.close()


# --- structured memory updated by two processes at once ------------------------------------------------

UPDATER = textwrap.dedent(
    """
    import json, random, sys, time
    from pathlib import Path
    from typing import Any
    from memory_mcp.base.settings import MemorySettings, Settings
    from memory_mcp.models import AddMemoryRequest, FlushRequest
    from memory_mcp.service.memory_service import MemoryService
    exec(sys.argv[5])  # def exchange(...), as in the test module
    UPDATE_SETTINGS = json.loads(sys.argv[6])

    root, writer, count, url = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    service = MemoryService(Settings(
        data_storage_path=root, openai_base_url=url, llm_model="scripted-model", memory=MemorySettings(**UPDATE_SETTINGS)
    ))
    service.start()
    print("ready", flush=True)
    assert sys.stdin.readline().strip() == "go"
    rng = random.Random(writer)
    for seq in range(count):
        service.add_memory(AddMemoryRequest.build(**exchange(writer, seq, "shared")))
        time.sleep(rng.uniform(0, 0.03))
    flushed = service.flush_memory(FlushRequest.build(user_id="shared"))
    left = service.close()
    print(json.dumps({"flush_errors": flushed.errors, "left_at_close": left}), flush=True)
    """
)
UPDATE_SETTINGS = {
    "debounce_seconds": 0.05,
    "llm_max_attempts": 1,  # no retries: every request the LLM sees is a separate extraction
    "llm_timeout_seconds": 20,
    "max_facts": 500,
    "shutdown_flush_seconds": 20,
}
COMMON_FACT = "Works on the memory server"


def numbered_update(number: int) -> dict[str, Any]:
    return {
        **EMPTY_UPDATE,
        "newFacts": [
            {"content": COMMON_FACT, "category": "context", "confidence": 0.9},
            {"content": f"Numbered fact {number}", "category": "context", "confidence": 0.9},
        ],
        "assistantKnowledge": ["Answers in English"],
    }


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM().start()
    server.enqueue(*(reply(numbered_update(n), delay=random.uniform(0, 0.05)) for n in range(400)))
    yield server
    server.stop()


@pytest.mark.timeout(180)
def test_two_processes_updating_one_user_extract_each_exchange_once(
    data_dir: Path, processes: list[subprocess.Popen[str]], llm: ScriptedLLM
) -> None:
    per_writer = 40
    children = {
        f"p{n}": start_python(
            UPDATER, str(data_dir), f"p{n}", str(per_writer), llm.base_url, EXCHANGE_SOURCE, json.dumps(UPDATE_SETTINGS)
        )
        for n in range(2)
    }
    processes.extend(children.values())
    for child in children.values():
        assert child.stdout is not None and child.stdout.readline().strip() == "ready", child.stderr.read()
    for child in children.values():
        child.stdin.write("go\n")
        child.stdin.flush()
    reports = {writer: json.loads(finish(child, 120)) for writer, child in children.items()}

    # Whatever the two left pending (an update skipped because the other held the user) is done here.
    final = MemoryService(
        Settings(
            data_storage_path=data_dir,
            openai_base_url=llm.base_url,
            llm_model=SCRIPTED_MODEL,
            memory=MemorySettings(**UPDATE_SETTINGS),
        )
    )
    flushed = final.flush_memory(FlushRequest.build(user_id="shared"))
    final.close()
    assert flushed.errors == [] and flushed.pending_pages == 0, flushed

    records = read_log(data_dir, "shared")
    assert len(records) == 2 * per_writer
    sent = [exchange["user"] for request in llm.requests for exchange in exchanges_of(request)]
    for record in records:
        marker = record["user_input"]
        times = sent.count(marker)
        assert times == 1, f"{marker!r} was sent to the LLM {times} times"
    document = MemoryDocument.model_validate_json((data_dir / "users" / "shared" / "memory.json").read_bytes())
    contents = [fact.content for fact in current(document.facts)]
    assert len(contents) == len({normalise(content) for content in contents}), f"a fact is stored twice: {contents}"
    numbered = sorted(content for content in contents if content.startswith("Numbered fact"))
    assert len(numbered) == len(llm.requests), "every extraction is applied, exactly once"
    assert contents.count(COMMON_FACT) == 1
    assert [entry.content for entry in document.assistantKnowledge] == ["Answers in English"]
    assert document.analysis.allBefore == len(records) and document.analysis.threads == {}
    print(
        f"\n2 processes x {per_writer} adds with extraction on: {len(llm.requests)} LLM calls, each of the "
        f"{len(records)} exchanges extracted once; skipped while the other held the user: "
        f"{sum(len(report['flush_errors']) for report in reports.values())} flush(es); facts={len(contents)}"
    )


# --- retrieves on several threads (once, one stemmer was shared by all threads) -------------------


def distinct_words(rng: random.Random, count: int) -> list[str]:
    """English-looking words never seen before in this process (so the stem cache cannot answer)."""
    endings = ["ing", "ational", "ness", "ement", "ized", "fulness", "ously", "ation"]
    return [
        "".join(rng.choice("bcdfghlmnprst") + rng.choice("aeiou") for _ in range(rng.randint(2, 5)))
        + rng.choice(endings)
        for _ in range(count)
    ]


def test_retrieves_in_several_threads_at_once_rank_as_they_do_one_at_a_time(data_dir: Path) -> None:
    """The MCP SDK runs tools on worker threads, so retrieves (and the warm-up thread) stem at once.
    A shared Snowball stemmer raised IndexError, or indexed wrong stems that the memoised _stem then
    kept for the life of the process (memory_mcp/recall/terms.py, then analysis.py; fixed in 179a53e)."""
    rng = random.Random(7)
    service = MemoryService(Settings(data_storage_path=data_dir, memory=MemorySettings(token_counting="char")))
    users = [f"r{n}" for n in range(4)]
    for user in users:
        for n in range(150):
            words = " ".join(distinct_words(rng, 12))
            service.add_memory(AddMemoryRequest.build(user_id=user, user_input=words, agent_response=f"ok {n}"))
    queries = {
        user: [page.user_input.split()[0] for page in service.store.read_pages(Scope(user)).pages[:100:10]]
        for user in users
    }
    barrier = threading.Barrier(len(users))
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: with a shared stemmer this failed every run

    def recall(user: str) -> tuple[list[list[str]], list[str]]:
        barrier.wait()
        hits, errors = [], []
        for query in queries[user]:
            try:
                result = service.retrieve_memory(RetrieveMemoryRequest.build(user_id=user, query=query, max_results=1))
                hits.append([page.page_id for page in result.retrieved_pages])
            except Exception as exc:  # noqa: BLE001 (counted and reported below)
                hits.append([])
                errors.append(f"{type(exc).__name__}: {exc}")
        return hits, errors

    try:
        with ThreadPoolExecutor(len(users)) as pool:
            outcomes = dict(zip(users, pool.map(recall, users)))
    finally:
        sys.setswitchinterval(switch)
    errors = [error for _, user_errors in outcomes.values() for error in user_errors]
    # The query is the first word of every tenth page, found in no other page: it must rank that page first.
    wrong_hits = [
        (user, n)
        for user in users
        for n, hit in enumerate(outcomes[user][0])
        if hit != [service.store.read_pages(Scope(user)).pages[10 * n].page_id]
    ]
    # What the process will now answer for each word, against a stemmer of its own.
    reference = snowballstemmer.stemmer("english")
    words = {
        word
        for user in users
        for page in service.store.read_pages(Scope(user)).pages
        for word in page.user_input.split()
    }
    poisoned = sorted(word for word in words if terms._stem(word) != reference.stemWord(word))
    assert (errors, wrong_hits, poisoned) == ([], [], []), (
        f"{len(errors)} of {sum(len(q) for q in queries.values())} retrieves raised (first: {errors[:1]}); "
        f"{len(wrong_hits)} ranked the wrong page first; {len(poisoned)} of {len(words)} words now have a wrong "
        f"stem cached for the life of the process, e.g. {[(w, terms._stem(w)) for w in poisoned[:3]]}"
    )
