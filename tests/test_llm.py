"""Guarantee 6: an LLM that is slow, down, rate-limited or returns garbage never blocks a tool
call, never corrupts memory and never loses pending work.

tests/test_updater.py already checks, through flush_memory, that each kind of LLM failure is
retried a bounded number of times and leaves the pages pending and memory.json untouched. This
file adds what those tests leave open: the background updater while the LLM misbehaves (every
tool call keeps answering in milliseconds, retries stay bounded across several users, the
failure shows in memory_status), garbage that only a proxy or a broken server sends, a reply
that removes every fact, an endpoint that trickles its reply, tools that must erase while an
update hangs, and the same over the real stdio server.

The LLM is tests/scripted_llm.py; one test needs a server that sends its reply a byte at a
time, which that script cannot do, so a minimal one is defined here.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from scripted_llm import SCRIPTED_MODEL, ScriptedLLM, Step, conversation_of, reply
from stdio_helpers import RawServer, write_config
from tool_helpers import Tools
from waiting import stays, wait_until

from memory_mcp.base.settings import Settings
from memory_mcp.models import AddMemoryRequest, Fact, FlushRequest, MemoryDocument
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

LATENCY_BOUND = 0.5  # seconds; the calls below take a few milliseconds when nothing waits
TOO_SLOW = re.compile(r"slow|within|timed? ?out|unreachable", re.IGNORECASE)  # how a timeout is reported
ERROR_TEXT = ("scripted failure", "LLM endpoint", "rate limit", "Bad Gateway", "quota", "unexpected error", "<html")


# --- helpers ---------------------------------------------------------------------------------


def update(facts: list[str] = (), remove: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "user": {},
        "history": {},
        "newFacts": [{"content": content, "category": "context", "confidence": 0.9} for content in facts],
        "factsToRemove": list(remove),
    }


def requests_for(llm: ScriptedLLM, text: str) -> int:
    return sum(text in conversation_of(request) for request in list(llm.requests))


def all_answered(llm: ScriptedLLM, count: int) -> bool:
    with llm._lock:
        return len(llm.answered) >= count and all(t is not None for t in llm.answered)


def memory_file(data_dir: Path, user: str = "alice") -> Path:
    return data_dir / "users" / user / "memory.json"


def memory_bytes(data_dir: Path, user: str = "alice") -> bytes | None:
    path = memory_file(data_dir, user)
    return path.read_bytes() if path.exists() else None


def remembered(data_dir: Path, user: str = "alice") -> dict[str, Any]:
    """The stored memory without its bookkeeping (when it was written, which replies failed)."""
    document = json.loads(memory_file(data_dir, user).read_text(encoding="utf-8"))
    document.pop("lastUpdated")
    document["analysis"].pop("failing", None)
    return document


def assert_no_error_text(data_dir: Path) -> None:
    """No memory.json under the data dir holds anything an error or a failed reply said."""
    for path in data_dir.rglob("memory.json"):
        text = path.read_text(encoding="utf-8")
        json.loads(text)
        for marker in ERROR_TEXT:
            assert marker not in text, f"{path} holds error text {marker!r}"


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def latency(call: Callable[[], Any]) -> float:
    """How long a call takes. A first timing over LATENCY_BOUND is taken once more and the
    shorter kept: a moment of CPU contention on a loaded machine is slow once, a call waiting
    for the LLM is slow both times (the tests measure well inside the LLM's hang)."""
    first = timed(call)[1]
    return first if first <= LATENCY_BOUND else min(first, timed(call)[1])


@pytest.fixture
def make_tools(data_dir: Path, llm: ScriptedLLM) -> Iterator[Callable[..., Tools]]:
    """Services on the test's data dir talking to the scripted LLM (or `base_url`); started (the
    background updater runs) unless start=False."""
    opened: list[MemoryService] = []

    def factory(start: bool = True, base_url: str | None = None, **memory: Any) -> Tools:
        settings = Settings(
            data_storage_path=data_dir,
            openai_base_url=base_url or llm.base_url,
            llm_model=SCRIPTED_MODEL,
            memory={"debounce_seconds": 60, "shutdown_flush_seconds": 0, "llm_max_attempts": 1, **memory},
        )
        service = MemoryService(settings)
        opened.append(service)
        if start:
            service.start()
            wait_until(lambda: not any(t.name == "memory-resume" for t in threading.enumerate()), 5, "resume")
        return Tools(service)

    yield factory
    for service in opened:
        service.close()


# --- a hanging LLM blocks no tool call -----------------------------------------------------------


@pytest.mark.integration
def test_no_tool_call_waits_for_an_llm_that_hangs_past_its_timeout(
    make_tools: Callable[..., Tools], llm: ScriptedLLM, data_dir: Path
) -> None:
    t = make_tools(debounce_seconds=0.05, llm_timeout_seconds=2.0, llm_max_attempts=2)
    fact = t.own.add_fact("Alice lives in Lyon", user_id="alice").fact
    t.memory.retrieve_memory("warm up the index", user_id="alice")  # first use loads numpy & co.
    before = memory_bytes(data_dir)
    llm.default = reply(update(["Too late"]), delay=6.0)  # longer than llm_timeout_seconds

    t.memory.add_memory("I moved to Berlin", "Noted", user_id="alice")
    wait_until(lambda: len(llm.requests) == 1, 3, "the background update to reach the LLM")
    hang_started = llm.arrivals[0]

    exported = t.own.export_memory(user_id="alice").model_dump(mode="json")
    calls: dict[str, Callable[[], Any]] = {
        "add_memory": lambda: t.memory.add_memory("I work at Acme", "Nice", user_id="alice"),
        "retrieve_memory": lambda: t.memory.retrieve_memory("Where does Alice live?", user_id="alice"),
        "memory_context": lambda: t.memory.memory_context("Where does Alice live?", user_id="alice"),
        "get_user_profile": lambda: t.memory.get_user_profile(user_id="alice"),
        "search_facts": lambda: t.own.search_facts(query="Lyon", user_id="alice"),
        "add_fact": lambda: t.own.add_fact("Alice likes tea", user_id="alice"),
        "update_fact": lambda: t.own.update_fact(fact.id, confidence=0.95, user_id="alice"),
        "export_memory": lambda: t.own.export_memory(user_id="alice"),
        "import_memory": lambda: t.own.import_memory(exported, user_id="carol"),
        "memory_status": lambda: t.own.memory_status(),
    }
    latencies = {name: latency(call) for name, call in calls.items()}
    measured_within = time.monotonic() - hang_started

    assert measured_within < 2.0, "the calls were to be measured while the first attempt still waited"
    slow = {name: round(seconds, 3) for name, seconds in latencies.items() if seconds > LATENCY_BOUND}
    assert not slow, f"tool calls waited for the LLM: {slow}"

    # Two attempts (llm_max_attempts), each cut off at the timeout; then nothing for 30 s.
    wait_until(lambda: t.own.memory_status().last_update_errors != [], 6, "the update to give up")
    assert len(llm.requests) == 2
    assert stays(lambda: len(llm.requests) == 2, 0.5), "retried at once after giving up"
    [error] = t.own.memory_status().last_update_errors
    assert TOO_SLOW.search(error), error
    alice = next(u for u in t.own.memory_status().users if u.user_id == "alice")
    assert alice.pending_pages == alice.pages >= 2, "nothing was analysed, nothing lost"
    assert_no_error_text(data_dir)
    assert "Too late" not in memory_file(data_dir).read_text(encoding="utf-8")
    assert memory_bytes(data_dir) != before  # the manual edits made meanwhile were kept

    llm.default = reply(update(["Alice moved to Berlin"]))
    flushed = t.memory.flush_memory(user_id="alice")
    assert (flushed.errors, flushed.pages_analysed, flushed.pending_pages) == ([], alice.pages, 0)
    assert flushed.facts_added == ["Alice moved to Berlin"]
    assert t.own.memory_status().last_update_errors == []
    facts = {f.content for f in t.own.search_facts(user_id="alice").facts}
    assert facts == {"Alice lives in Lyon", "Alice likes tea", "Alice moved to Berlin"}


@pytest.mark.integration
@pytest.mark.parametrize("status", [429, 500])
def test_a_storm_of_429s_or_500s_is_retried_a_bounded_number_of_times_and_blocks_nothing(
    make_tools: Callable[..., Tools], llm: ScriptedLLM, data_dir: Path, status: int
) -> None:
    attempts = 2
    users = ("alice", "bob", "carol")
    t = make_tools(debounce_seconds=0.05, llm_max_attempts=attempts, max_concurrent_updates=2)
    t.memory.retrieve_memory("warm up the index", user_id="alice")
    llm.default = Step(status=status, delay=0.2)  # every reply fails, for as long as the storm lasts

    storm_started = time.monotonic()
    slowest = 0.0
    for user in users:
        slowest = max(
            slowest, timed(lambda user=user: t.memory.add_memory(f"{user} says hello", "hi", user_id=user))[1]
        )
    # Keep calling while the storm is on: nothing waits for it.
    while not all_answered(llm, attempts * len(users)):
        for user in users:
            slowest = max(slowest, latency(lambda user=user: t.memory.retrieve_memory("hello", user_id=user)))
            slowest = max(slowest, latency(lambda user=user: t.memory.get_user_profile(user_id=user)))
        assert len(llm.requests) <= attempts * len(users)
        time.sleep(0.05)
        if time.monotonic() - storm_started > 10:
            raise AssertionError(f"the storm's attempts did not finish: {len(llm.requests)} requests")
    assert slowest < LATENCY_BOUND, f"a tool call took {slowest:.3f}s during the storm"

    # Bounded: llm_max_attempts per user, then the next try waits its backoff (30 s).
    assert stays(lambda: len(llm.requests) == attempts * len(users), 1.0), len(llm.requests)
    assert all(requests_for(llm, f"{user} says hello") == attempts for user in users)
    status_now = t.own.memory_status()
    assert len(status_now.last_update_errors) == len(users)
    assert all(str(status) in error for error in status_now.last_update_errors), status_now.last_update_errors
    assert {(u.user_id, u.pages, u.pending_pages) for u in status_now.users} == {(u, 1, 1) for u in users}
    assert all(memory_bytes(data_dir, user) is None for user in users), "a failed update wrote memory"

    # The storm passes: the pending work is all still there and is done.
    llm.default = reply(update(["Says hello"]))
    for user in users:
        flushed = t.memory.flush_memory(user_id=user)
        assert (flushed.errors, flushed.pages_analysed, flushed.pending_pages) == ([], 1, 0), user
    assert t.own.memory_status().last_update_errors == []
    assert_no_error_text(data_dir)


# --- garbage never reaches memory -----------------------------------------------------------------


def completion(content: Any) -> bytes:
    """A chat completion body whose message content is `content` (None, or not a string)."""
    return json.dumps(
        {
            "id": "chatcmpl-garbage",
            "object": "chat.completion",
            "created": 0,
            "model": "scripted",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        }
    ).encode()


GOOD = json.dumps(update(["Alice moved to Berlin"]))
GARBAGE = {
    "html page with 200": Step(raw=b"<html><body><h1>502 Bad Gateway</h1></body></html>"),
    "html page with 502": Step(status=502, raw=b"<html><body><h1>502 Bad Gateway</h1></body></html>"),
    "error object with 200": Step(raw=b'{"error": {"message": "quota exceeded", "type": "insufficient_quota"}}'),
    "no choices": Step(raw=json.dumps({"id": "x", "object": "chat.completion", "choices": []}).encode()),
    "null content": Step(raw=completion(None)),
    "binary junk": Step(raw=b"\x00\xff\xfe\x89PNG garbage \xc3\x28"),
    "body cut off": Step(raw=completion(GOOD)[:57]),
    "content cut off": reply(GOOD[: len(GOOD) // 2]),
    "error as content": reply('{"error": "quota exceeded: context_length_exceeded"}'),
    "prose refusal": reply("I'm sorry, but I can't help with that. (quota exceeded)"),
    "content is a list": Step(raw=completion([{"type": "text", "text": GOOD}])),
}


def test_garbage_replies_change_nothing_are_reported_and_the_work_is_done_by_a_later_good_reply(
    make_tools: Callable[..., Tools], llm: ScriptedLLM, data_dir: Path
) -> None:
    # Enough attempts that no batch is set aside here (test_update_replies covers that).
    t = make_tools(start=False, llm_max_attempts=1, max_batch_attempts=len(GARBAGE) + 1)
    t.own.add_fact("Alice lives in Lyon", user_id="alice")
    t.memory.add_memory("I moved to Berlin", "Noted", user_id="alice")
    t.memory.add_memory("I work at Acme", "Nice", user_id="alice")
    before = remembered(data_dir)

    for name, step in GARBAGE.items():
        llm.enqueue(step)
        flushed = t.memory.flush_memory(user_id="alice")
        assert flushed.errors, f"{name}: the failure is reported"
        assert (flushed.pages_analysed, flushed.facts_added, flushed.pending_pages) == (0, [], 2), name
        assert remembered(data_dir) == before, f"{name}: memory changed"
        assert t.own.memory_status().last_update_errors == [flushed.errors[-1]], name
    assert len(llm.requests) == len(GARBAGE), "one request per flush (llm_max_attempts=1)"

    llm.enqueue(reply(GOOD))
    flushed = t.memory.flush_memory(user_id="alice")
    assert (flushed.errors, flushed.pages_analysed, flushed.pending_pages) == ([], 2, 0)
    assert flushed.facts_added == ["Alice moved to Berlin"]
    assert t.own.memory_status().last_update_errors == []
    assert_no_error_text(data_dir)
    stored = json.loads(memory_file(data_dir).read_text(encoding="utf-8"))
    assert sorted(f["content"] for f in stored["facts"]) == ["Alice lives in Lyon", "Alice moved to Berlin"]


# --- a reply that removes every fact ------------------------------------------------------------------


def existing_fact(number: int, content: str) -> Fact:
    return Fact(id=f"fact_{number:08x}", content=content, confidence=0.9, createdAt="2024-01-01T00:00:00Z")


@pytest.mark.parametrize(
    ("limit", "facts", "removed"),
    [pytest.param(None, 10, 10, id="every fact, default limit"), pytest.param(2, 4, 3, id="over a configured limit")],
)
def test_a_reply_retiring_more_facts_than_max_fact_removals_is_rejected_whole(
    make_tools: Callable[..., Tools], llm: ScriptedLLM, data_dir: Path, limit: int | None, facts: int, removed: int
) -> None:
    t = make_tools(start=False, **({} if limit is None else {"max_fact_removals": limit}))
    existing = [existing_fact(number, f"Alice fact number {number}") for number in range(1, facts + 1)]
    t.service.store.write_document(Scope("alice"), MemoryDocument(facts=existing))
    before = remembered(data_dir)
    t.memory.add_memory("Forget everything about me", "Hmm", user_id="alice")
    llm.enqueue(reply(update(["Alice wants a fresh start"], remove=[fact.id for fact in existing[:removed]])))

    flushed = t.memory.flush_memory(user_id="alice")

    assert remembered(data_dir) == before, "nothing changes"
    assert (flushed.pages_analysed, flushed.facts_removed, flushed.facts_added, flushed.pending_pages) == (0, [], [], 1)
    assert flushed.errors and "max_fact_removals" in flushed.errors[-1], flushed.errors
    assert t.own.memory_status().last_update_errors == [flushed.errors[-1]]

    # The pages stay pending: a sane reply later processes them.
    llm.enqueue(reply(update(["Alice asked about a fresh start"])))
    flushed = t.memory.flush_memory(user_id="alice")
    assert (flushed.errors, flushed.pending_pages) == ([], 0)
    assert t.own.search_facts(user_id="alice", limit=100).total == facts + 1


def test_a_reply_retiring_up_to_max_fact_removals_is_applied_and_keeps_them_as_history(
    make_tools: Callable[..., Tools], llm: ScriptedLLM, data_dir: Path
) -> None:
    t = make_tools(start=False, max_fact_removals=3)
    existing = [existing_fact(number, f"Alice fact number {number}") for number in range(1, 7)]
    t.service.store.write_document(Scope("alice"), MemoryDocument(facts=existing))
    t.memory.add_memory("Three of those are out of date", "Noted", user_id="alice")
    llm.enqueue(reply(update(remove=[fact.id for fact in existing[:3]])))

    flushed = t.memory.flush_memory(user_id="alice")

    assert flushed.errors == [] and len(flushed.facts_removed) == 3
    stored = json.loads(memory_file(data_dir).read_text(encoding="utf-8"))["facts"]
    assert [f["content"] for f in stored if f.get("validTo") is None] == [f.content for f in existing[3:]]
    assert len(stored) == 6, "retired facts are kept as history"


# Regression test. Found by this suite and fixed in 64737a3; before that: updater.py apply_proposal (line 170,
# cap(...)) and facts.py cap (line 51): max_fact_removals is bypassed by eviction: a reply adding memory.max_facts new
# facts more confident than the stored ones pushes every stored fact out in one update, and they are dropped outright
# (not retired as history); flush reports facts_removed=[] and no error
def test_a_reply_cannot_evict_every_fact_by_flooding_new_ones(
    make_tools: Callable[..., Tools], llm: ScriptedLLM, data_dir: Path
) -> None:
    t = make_tools(start=False, max_facts=10)
    existing = [existing_fact(number, f"Alice fact number {number}") for number in range(1, 11)]
    t.service.store.write_document(Scope("alice"), MemoryDocument(facts=existing))
    before = remembered(data_dir)
    t.memory.add_memory("blah", "blah", user_id="alice")
    flood = [{"content": f"Junk fact {i}", "category": "context", "confidence": 1.0} for i in range(10)]
    llm.enqueue(reply({"user": {}, "history": {}, "newFacts": flood, "factsToRemove": []}))

    flushed = t.memory.flush_memory(user_id="alice")

    stored = json.loads(memory_file(data_dir).read_text(encoding="utf-8"))["facts"]
    holding = {f["content"] for f in stored if f.get("validTo") is None}
    lost = [fact.content for fact in existing if fact.content not in holding]
    limit = t.service.settings.memory.max_fact_removals
    assert len(lost) <= limit, (
        f"one update made {len(lost)} of 10 facts stop holding (max_fact_removals={limit}); "
        f"kept as history: {sum(f['content'] in lost for f in stored)}; flush errors: {flushed.errors}"
    )
    # As the product does it now: crowding out counts as removal, and the reply is rejected whole.
    assert remembered(data_dir) == before
    assert flushed.errors and "max_fact_removals" in flushed.errors[-1], flushed.errors
    assert (flushed.facts_added, flushed.facts_removed, flushed.pending_pages) == ([], [], 1)


# --- llm_timeout_seconds bounds the whole reply -------------------------------------------------------


class TricklingLLM:
    """An OpenAI-compatible endpoint that answers at once, then sends its body a byte at a time
    over `seconds`: no single read ever waits long, but the reply takes that long."""

    def __init__(self, content: str, seconds: float) -> None:
        self.body = completion(content)
        self.seconds = seconds
        self.requests = 0
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen()
        self._closing = False
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while not self._closing:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            match = re.search(rb"content-length:\s*(\d+)", head, re.IGNORECASE)
            length = int(match.group(1)) if match else 0
            while len(rest) < length:
                rest += conn.recv(65536)
            self.requests += 1
            try:
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(self.body)}\r\n\r\n".encode()
                )
                pause = self.seconds / len(self.body)
                for index in range(len(self.body)):
                    if self._closing:
                        return
                    conn.sendall(self.body[index : index + 1])
                    time.sleep(pause)
            except OSError:
                return  # the client gave up

    def stop(self) -> None:
        self._closing = True
        self._sock.close()


@pytest.fixture
def trickling() -> Iterator[TricklingLLM]:
    server = TricklingLLM(json.dumps(update(["Alice moved to Berlin"])), seconds=3.0)
    yield server
    server.stop()


# Regression test. Found by this suite and fixed in 64737a3; before that: llm.py line 97 passes llm_timeout_seconds to
# the openai client as a plain float, which httpx applies to each socket read, not to the reply: an endpoint that
# trickles its answer holds the update (its worker and the scope's update lock, so flush_memory, forget and import
# replace wait too) for as long as it trickles, however small llm_timeout_seconds is
@pytest.mark.integration
def test_llm_timeout_seconds_bounds_a_reply_that_trickles_in(
    make_tools: Callable[..., Tools], trickling: TricklingLLM, data_dir: Path
) -> None:
    t = make_tools(start=False, base_url=trickling.base_url, llm_timeout_seconds=0.5, llm_max_attempts=1)
    t.memory.add_memory("I moved to Berlin", "Noted", user_id="alice")

    flushed, seconds = timed(lambda: t.memory.flush_memory(user_id="alice"))

    assert trickling.requests == 1
    assert seconds < 0.5 + 1.0, f"one LLM call with llm_timeout_seconds=0.5 took {seconds:.1f}s"
    assert flushed.errors and TOO_SLOW.search(flushed.errors[-1]), flushed.errors
    assert (flushed.pages_analysed, flushed.pending_pages) == (0, 1)
    assert memory_bytes(data_dir) is None, "the reply that came too late was not applied"


# --- erasing while an update hangs --------------------------------------------------------------------


# Regression test. Found by this suite and fixed in 64737a3; before that: service.py _erase (exclusive_updates(each,
# wait=ERASE_WAIT_SECONDS), line 388): forget and import_memory(mode='replace') wait for a running update to finish
# (up to ERASE_WAIT_SECONDS=60), so an LLM that hangs blocks them: with the defaults (llm_timeout_seconds 60,
# llm_max_attempts 3) an update can hold the scope for 3 minutes, and forget then fails after a minute with 'is being
# updated; try again in a minute'
@pytest.mark.integration
@pytest.mark.parametrize("tool", ["forget", "import_memory replace"])
def test_erasing_tools_do_not_wait_for_a_hanging_llm(
    make_tools: Callable[..., Tools], llm: ScriptedLLM, data_dir: Path, tool: str
) -> None:
    t = make_tools(debounce_seconds=0.05, llm_timeout_seconds=1.5, llm_max_attempts=1)
    llm.default = reply(update(["Too late"]), delay=5.0)
    t.memory.add_memory("I moved to Berlin", "Noted", user_id="alice")
    exported = t.own.export_memory(user_id="alice").model_dump(mode="json")
    wait_until(lambda: len(llm.requests) == 1, 3, "the background update to reach the LLM")

    if tool == "forget":
        result, seconds = timed(lambda: t.own.forget("alice", "alice"))
        assert result.removed_pages == 1
    else:
        result, seconds = timed(lambda: t.own.import_memory(exported, mode="replace"))
        assert result.pages_added == 1

    assert seconds < 1.0, f"{tool} waited {seconds:.2f}s for the hanging LLM (llm_timeout_seconds 1.5)"
    # The update that was under way writes nothing back over what was just erased or replaced.
    if tool == "forget":
        assert stays(lambda: not (data_dir / "users" / "alice").exists(), 1.0), "the erased user came back"
        assert [u.user_id for u in t.own.memory_status().users] == []
    else:
        assert stays(lambda: "Too late" not in (memory_file(data_dir).read_text(encoding="utf-8")), 1.0)
        [alice] = t.own.memory_status().users
        assert (alice.pages, alice.facts) == (1, 0)


# --- over the real stdio server ---------------------------------------------------------------------


def call(server: RawServer, tool: str, **arguments: Any) -> tuple[dict[str, Any], float]:
    response, seconds = timed(lambda: server.call_tool(tool, arguments))
    result = response["result"]
    assert not result.get("isError"), result
    return result["structuredContent"], seconds


@pytest.mark.integration
def test_over_stdio_a_hanging_llm_blocks_no_call_and_its_work_is_done_once_it_answers(
    tmp_path: Path, data_dir: Path, llm: ScriptedLLM
) -> None:
    memory = {"debounce_seconds": 0.05, "llm_timeout_seconds": 1.5, "llm_max_attempts": 2, "shutdown_flush_seconds": 0}
    config = write_config(
        tmp_path / "config.json", {"openai_base_url": llm.base_url, "llm_model": SCRIPTED_MODEL, "memory": memory}
    )
    llm.default = reply(update(["Too late"]), delay=5.0)
    with RawServer(data_dir, tmp_path / "server.stderr", config=config) as server:
        server.initialize()
        call(server, "retrieve_memory", query="warm up", user_id="alice")
        call(server, "add_memory", user_input="I moved to Berlin", agent_response="Noted", user_id="alice")
        wait_until(lambda: len(llm.requests) == 1, 3, "the background update to reach the LLM")

        hang_started = llm.arrivals[0]
        calls = {
            "add_memory": {"user_input": "I work at Acme", "agent_response": "ok", "user_id": "alice"},
            "retrieve_memory": {"query": "Berlin", "user_id": "alice"},
            "get_user_profile": {"user_id": "alice"},
            "search_facts": {"user_id": "alice"},
            "memory_status": {},
        }
        latencies = {
            tool: latency(lambda tool=tool, arguments=arguments: call(server, tool, **arguments))
            for tool, arguments in calls.items()
        }
        assert time.monotonic() - hang_started < 1.5, "measured while the first attempt still waited"
        slow = {name: round(seconds, 3) for name, seconds in latencies.items() if seconds > LATENCY_BOUND}
        assert not slow, f"tool calls waited for the LLM over stdio: {slow}"

        wait_until(lambda: call(server, "memory_status")[0]["last_update_errors"] != [], 6, "the update to give up")
        assert stays(lambda: len(llm.requests) == 2, 0.5), f"{len(llm.requests)} requests for 2 attempts"
        status, _ = call(server, "memory_status")
        assert TOO_SLOW.search(status["last_update_errors"][0]), status["last_update_errors"]
        [alice] = status["users"]
        assert alice["user_id"] == "alice" and alice["pending_pages"] == alice["pages"] >= 2

        llm.default = reply(update(["Alice moved to Berlin"]))
        flushed, _ = call(server, "flush_memory", user_id="alice")
        assert (flushed["errors"], flushed["pages_analysed"], flushed["pending_pages"]) == ([], alice["pages"], 0)
        profile, _ = call(server, "get_user_profile", user_id="alice")
        assert [f["content"] for f in profile["facts"]] == ["Alice moved to Berlin"]
        assert call(server, "memory_status")[0]["last_update_errors"] == []
        assert server.close_stdin_and_wait() == 0
    assert_no_error_text(data_dir)


@pytest.mark.parametrize("status", [404, 400])
def test_a_refusal_names_the_model_asked_for_and_what_the_endpoint_said(
    make_service: Any, llm: ScriptedLLM, status: int
) -> None:
    llm.default = Step(status=status, error_message="The model `qwen9:7b` does not exist")
    service = make_service(llm_model="qwen9:7b")
    service.add_memory(AddMemoryRequest.build(user_id="alice", user_input="I write Go", agent_response="ok"))
    flushed = service.flush_memory(FlushRequest.build(user_id="alice"))
    (error,) = flushed.errors
    assert "'qwen9:7b'" in error and f"({status}: The model `qwen9:7b` does not exist)" in error
    assert flushed.pending_pages == 1, "the exchange waits for a model that exists"
