"""The debounce queue with its threads: updates run in the background, scopes side by side up to
the limit, one scope never overlapping itself, failures kept pending, shutdown, and resuming work
left pending.

The scheduling rules themselves (debounce, deferral cap, order, back-off) are tested to the second
on a fake clock in tests/test_schedule.py. Here services are started (background workers on) and
the LLM is tests/scripted_llm.py, which records when each request arrived and when it was
answered. Nothing here depends on a window of a fraction of a second, so that a loaded machine
does not fail it: tests wait for states, with deadlines of seconds; the scripted LLM is slow enough
(seconds) that the overlaps a test needs cannot be missed; and the three real-time smoke tests of
the debounce (a 1 s or 3 s quiet time) bound it from above with seconds of slack.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai  # noqa: F401  (the product imports it on its first LLM call, ~1 s: not inside a timed window)
import pytest
from core_calls import add, flush
from scripted_llm import SCRIPTED_MODEL, ScriptedLLM, Step, conversation_of, reply
from waiting import wait_until

from memory_mcp.base.settings import Settings
from memory_mcp.extraction.queue import UpdateQueue
from memory_mcp.extraction.updater import UpdateReport, pending_threads
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

pytestmark = pytest.mark.integration

TEST_MEMORY = {
    "debounce_seconds": 60,  # no timer fires unless a test asks for one
    "llm_timeout_seconds": 5,
    "llm_max_attempts": 2,
    "shutdown_flush_seconds": 2,
}
EARLY = 0.02  # timers may fire this much early, by clock granularity
SLACK = 10.0  # seconds a loaded machine may add to anything the tests wait for


# --- helpers ---------------------------------------------------------------------------------


def fact_update(content: str, delay: float = 0.0) -> Step:
    return reply(
        {
            "user": {},
            "history": {},
            "newFacts": [{"content": content, "category": "context", "confidence": 0.9}],
            "factsToRemove": [],
        },
        delay=delay,
    )


def requests_with(llm: ScriptedLLM, text: str) -> list[int]:
    """Numbers of the LLM requests whose conversation includes `text`."""
    return [i for i, request in enumerate(list(llm.requests)) if text in conversation_of(request)]


def pending(service: MemoryService, user: str, agent: str | None = None) -> int:
    return sum(pending_threads(service.store, Scope(user, agent)).values())


def facts_of(data_dir: Path, user: str, agent: str | None = None) -> list[str]:
    path = data_dir / "users" / user / ("agents/" + agent if agent else "") / "memory.json"
    if not path.exists():
        return []
    facts = json.loads(path.read_text(encoding="utf-8"))["facts"]
    return [fact["content"] for fact in facts if fact.get("validTo") is None]  # not kept only as history


def all_answered(llm: ScriptedLLM, count: int) -> bool:
    with llm._lock:
        return len(llm.answered) >= count and all(t is not None for t in llm.answered)


ServiceFactory = Callable[..., MemoryService]


@pytest.fixture
def make_service(data_dir: Path, llm: ScriptedLLM) -> Iterator[ServiceFactory]:
    """Started services on the test's data dir; closed (pending work flushed) at the end."""
    opened: list[MemoryService] = []

    def factory(base_url: str | None = "scripted", start: bool = True, **memory: Any) -> MemoryService:
        settings = Settings(
            data_storage_path=data_dir,
            openai_base_url=llm.base_url if base_url == "scripted" else base_url,
            llm_model=SCRIPTED_MODEL,
            memory={**TEST_MEMORY, **memory},
        )
        service = MemoryService(settings)
        opened.append(service)
        if start:
            service.start()
            # start() resumes pending work on a thread of its own, scheduling what it finds to run at
            # once; let it finish first, or a page a test adds meanwhile could be taken for old work.
            wait_until(
                lambda: not any(t.name == "memory-resume" for t in threading.enumerate()), timeout=SLACK, what="resume"
            )
        return service

    yield factory
    for service in opened:
        service.close()


# --- real time: adds never wait, a burst waits for its quiet time ---------------------------------


def test_add_memory_returns_at_once_and_never_calls_the_llm(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    """Adds return before the update they cause starts (after 1 s of quiet) and while it runs
    (the LLM takes 2 s): each is seen by the state it leaves, not by timing it."""
    service = make_service(debounce_seconds=1)
    llm.enqueue(fact_update("Slow fact", delay=2.0), fact_update("Second fact"))

    add(service, "I write Go at Acme", user_id="alice", thread_id="t")
    assert llm.requests == []

    wait_until(lambda: len(llm.requests) == 1, timeout=1 + SLACK, what="the background update to start")
    add(service, "I moved to Berlin", user_id="alice", thread_id="t")
    assert llm.answered == [None], "the add waited for the running update"

    wait_until(
        lambda: facts_of(data_dir, "alice") == ["Slow fact", "Second fact"], timeout=3 + SLACK, what="both updates"
    )
    assert requests_with(llm, "I write Go at Acme") == [0]
    assert requests_with(llm, "I moved to Berlin") == [1]


def test_a_burst_in_one_thread_becomes_one_update_after_the_quiet_time(
    make_service: ServiceFactory, llm: ScriptedLLM
) -> None:
    debounce = 1.0
    service = make_service(debounce_seconds=debounce)
    for number in range(5):
        before_last_add = time.monotonic()
        add(service, f"burst message {number}", f"answer {number}", user_id="alice", thread_id="t")

    wait_until(lambda: pending(service, "alice") == 0, timeout=debounce + SLACK, what="the update")

    assert len(llm.requests) == 1, "the burst became more than one update"
    assert before_last_add + debounce - EARLY <= llm.arrivals[0] <= before_last_add + debounce + SLACK
    text = conversation_of(llm.requests[0])
    positions = [text.index(f"burst message {n}") for n in range(5)]
    assert positions == sorted(positions)


# --- concurrency -------------------------------------------------------------------------------
# The scripted LLM takes long enough (seconds) that updates allowed to overlap surely do.


@pytest.mark.parametrize("workers", [1, 3])
def test_different_users_are_updated_side_by_side_up_to_the_limit(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path, workers: int
) -> None:
    service = make_service(debounce_seconds=0.5, max_concurrent_updates=workers)
    llm.default = fact_update("Learned", delay=1.5)
    users = [f"u{number}" for number in range(workers + 1)]  # one more than the workers: it waits
    for user in users:
        add(service, f"message of {user}", user_id=user)

    wait_until(
        lambda: all(facts_of(data_dir, user) == ["Learned"] for user in users),
        timeout=3.5 + SLACK,
        what="every user's update",
    )

    assert len(llm.requests) == len(users)
    assert llm.max_in_flight == workers
    assert all(pending(service, user) == 0 for user in users)


def test_one_scope_never_overlaps_itself_while_others_run_alongside(
    make_service: ServiceFactory, llm: ScriptedLLM
) -> None:
    service = make_service(debounce_seconds=0.5, max_concurrent_updates=3)
    llm.default = fact_update("Learned", delay=0.8)
    for thread in ("one", "two", "three"):
        add(service, f"alice in thread {thread}", user_id="alice", thread_id=thread)
    add(service, "bob's message", user_id="bob")

    wait_until(lambda: all_answered(llm, 4), timeout=3 + SLACK, what="4 updates")

    alice = sorted(requests_with(llm, "alice in thread"), key=lambda i: llm.arrivals[i])
    assert len(alice) == 3
    for earlier, later in zip(alice, alice[1:]):
        assert llm.arrivals[later] >= llm.answered[earlier], "two updates of one scope overlapped"
    assert llm.max_in_flight == 2  # bob's update ran alongside one of alice's


def test_flush_waits_for_a_running_update_of_the_same_scope(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    # The background update is the one resuming starts at once, for a page left pending by a
    # service that never started; the second page's own timer (60 s) cannot fall due, so only the
    # flush can take it.
    before = make_service(debounce_seconds=60, start=False)
    add(before, "first exchange", user_id="alice", thread_id="a")
    before.close()
    llm.enqueue(fact_update("From the background", delay=2.0), fact_update("From the flush"))
    service = make_service(debounce_seconds=60)
    wait_until(lambda: len(llm.requests) == 1, timeout=SLACK, what="the background update")
    add(service, "second exchange", user_id="alice", thread_id="b")
    assert llm.answered == [None], "the background update ended before the flush began"

    result = flush(service, user_id="alice")

    assert (result.pages_analysed, result.pending_pages, result.errors) == (1, 0, [])
    assert result.facts_added == ["From the flush"]
    assert len(llm.requests) == 2
    assert llm.arrivals[1] >= llm.answered[0]
    assert "second exchange" in conversation_of(llm.requests[1])
    assert "first exchange" not in conversation_of(llm.requests[1])
    assert facts_of(data_dir, "alice") == ["From the background", "From the flush"]


def test_pages_added_during_an_update_get_their_own_update_afterwards(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    service = make_service(debounce_seconds=0.5)
    llm.enqueue(fact_update("First", delay=2.0), fact_update("Second"))
    add(service, "before the update", user_id="alice", thread_id="t")
    wait_until(lambda: len(llm.requests) == 1, timeout=SLACK, what="the first update")
    add(service, "during the update", user_id="alice", thread_id="t")
    assert llm.answered == [None], "the first update ended before the second page came"

    wait_until(lambda: facts_of(data_dir, "alice") == ["First", "Second"], timeout=3 + SLACK, what="the second update")

    first, second = (conversation_of(r) for r in llm.requests)
    assert "before the update" in first and "during the update" not in first
    assert "during the update" in second and "before the update" not in second
    assert llm.arrivals[1] >= llm.answered[0]
    assert pending(service, "alice") == 0


# --- failures and retries ----------------------------------------------------------------------


def test_a_failed_background_update_stays_pending_and_does_not_hammer_the_llm(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    """After its attempts the update waits for a retry (30 s away: tests/test_schedule.py), not a loop."""
    service = make_service(debounce_seconds=0.5, llm_max_attempts=2)
    llm.default = Step(status=500)
    add(service, "I moved to Berlin", user_id="alice")

    wait_until(lambda: service.memory_status().last_update_errors, timeout=SLACK, what="the failure to be recorded")
    status = service.memory_status()
    assert status.queued_updates == 1  # the retry
    assert len(llm.requests) == 2
    assert pending(service, "alice") == 1
    assert facts_of(data_dir, "alice") == []

    llm.default = fact_update("Lives in Berlin")
    result = flush(service, user_id="alice")
    assert (result.facts_added, result.pending_pages) == (["Lives in Berlin"], 0)
    assert service.memory_status().last_update_errors == []


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_worker_survives_an_update_that_raises_and_runs_its_retry_when_due() -> None:
    """The queue alone, on a fake clock: the exception becomes the key's error and a retry, and the
    worker lives on to run it once the clock reaches it."""
    clock = FakeClock()
    runs: list[float] = []

    def run(scope: Scope, thread: str) -> UpdateReport:
        runs.append(clock.now)
        if len(runs) == 1:
            raise RuntimeError("exploded")
        return UpdateReport()

    queue = UpdateQueue(run, debounce_seconds=0.1, workers=1, clock=clock)
    queue.start()
    key = (Scope("alice"), "t")
    try:
        queue.notify(*key, delay=0)
        wait_until(lambda: key in queue.last_errors, timeout=SLACK, what="the failure to be recorded")
        assert queue.last_errors == {key: "unexpected error: RuntimeError: exploded"}
        assert queue.queued() == [key]  # its retry

        clock.now += 30
        queue.notify(*key)  # wakes the worker, which finds the retry due
        wait_until(lambda: not queue.queued() and not queue.last_errors, timeout=SLACK, what="the retry")
        assert runs == [1000, 1030]
    finally:
        assert queue.shutdown(SLACK) == 0


def test_a_scheduled_retry_runs_at_shutdown() -> None:
    clock = FakeClock()
    runs: list[str] = []

    def run(scope: Scope, thread: str) -> UpdateReport:
        runs.append(thread)
        return UpdateReport(errors=["down"] if len(runs) == 1 else [])

    queue = UpdateQueue(run, debounce_seconds=60, workers=2, clock=clock)
    queue.start()
    queue.notify(Scope("alice"), "t", delay=0)
    wait_until(lambda: runs == ["t"] and queue.queued() == [(Scope("alice"), "t")], timeout=SLACK, what="the retry")
    queue.notify(Scope("bob"), "u")  # due in 60 s

    assert queue.shutdown(SLACK) == 0
    assert sorted(runs) == ["t", "t", "u"]
    queue.notify(Scope("carol"), "v", delay=0)  # after shutdown: ignored
    assert queue.queued() == []


# --- shutdown ----------------------------------------------------------------------------------


def test_close_runs_pending_updates_before_returning(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    service = make_service(debounce_seconds=60, shutdown_flush_seconds=3 * SLACK)
    llm.default = fact_update("Flushed at shutdown", delay=0.2)
    add(service, "alice's message", user_id="alice")
    add(service, "bob's message", user_id="bob", thread_id="x")
    assert llm.requests == []

    started = time.monotonic()
    left = service.close()

    assert left == 0
    assert time.monotonic() - started < SLACK, "close waited out its bound instead of returning when done"
    assert facts_of(data_dir, "alice") == ["Flushed at shutdown"]
    assert facts_of(data_dir, "bob") == ["Flushed at shutdown"]
    assert (pending(service, "alice"), pending(service, "bob")) == (0, 0)


def test_close_gives_up_after_shutdown_flush_seconds_and_the_work_resumes_at_next_start(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    first = make_service(
        debounce_seconds=60, shutdown_flush_seconds=1, llm_max_attempts=1, llm_timeout_seconds=2 * SLACK
    )
    hang = 5.0
    llm.enqueue(Step(status=500, delay=hang))  # the LLM hangs past the shutdown bound, then fails
    llm.default = fact_update("Resumed")
    add(first, "I moved to Berlin", user_id="alice")

    started = time.monotonic()
    left = first.close()

    # The update only starts when close does, so it cannot end within `hang` seconds of this start.
    assert time.monotonic() - started < hang - 1, "close waited for the hung update"
    assert left == 1
    assert pending(first, "alice") == 1
    # In a real process exit the hung update dies with the process; here it ends by itself, and
    # closing again reports nothing left once it has (and its scope's update lock is free).
    wait_until(lambda: first.close() == 0, timeout=hang + SLACK, what="the hung update to end")
    assert facts_of(data_dir, "alice") == []
    assert pending(first, "alice") == 1

    second = make_service(debounce_seconds=60)

    wait_until(lambda: facts_of(data_dir, "alice") == ["Resumed"], timeout=SLACK, what="the resumed update")
    assert requests_with(llm, "I moved to Berlin") == [0, 1]
    assert pending(second, "alice") == 0


# --- durability: resuming at start ---------------------------------------------------------------


def test_pages_added_without_an_llm_are_analysed_when_a_service_with_one_starts(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    offline = make_service(base_url=None)
    exchanges = {
        ("alice", None, "a"): ["alice a1", "alice a2"],
        ("alice", None, "b"): ["alice b1"],
        ("alice", "coder", None): ["alice's coding agent"],
        ("bob", None, None): ["bob's message"],
    }
    for (user, agent, thread), texts in exchanges.items():
        for text in texts:
            add(offline, text, user_id=user, agent_name=agent, thread_id=thread)
    assert flush(offline, user_id="alice").pending_pages == 3
    offline.close()
    llm.default = fact_update("Learned offline")

    online = make_service(debounce_seconds=60)  # resuming does not wait for the debounce

    scopes = [("alice", None), ("alice", "coder"), ("bob", None)]
    wait_until(lambda: all(pending(online, *scope) == 0 for scope in scopes), timeout=SLACK, what="the resumed updates")
    assert len(llm.requests) == 4  # one per (scope, thread)
    for texts in exchanges.values():
        for text in texts:
            assert len(requests_with(llm, text)) == 1, text
    wait_until(lambda: all(facts_of(data_dir, *scope) == ["Learned offline"] for scope in scopes), timeout=SLACK)


def test_adds_made_while_start_up_resumes_still_wait_for_the_debounce(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    # Many users whose pages are all analysed: resuming finds nothing for them but takes a while.
    page = json.dumps(
        {"page_id": "page_0", "user_input": "old", "agent_response": "ok", "timestamp": "2024-01-01T00:00:00Z"}
    )
    for number in range(800):
        user_dir = data_dir / "users" / f"user{number:04d}"
        user_dir.mkdir(parents=True)
        (user_dir / "pages.jsonl").write_text(page + "\n", encoding="utf-8")
        (user_dir / "memory.json").write_text(json.dumps({"analysis": {"allBefore": 1}}), encoding="utf-8")
    debounce = 3.0
    service = make_service(debounce_seconds=debounce, start=False)

    service.start()
    for number in range(6):  # a burst to the user scanned last, right after start
        before_last_add = time.monotonic()
        add(service, f"burst {number}", user_id="user0799", thread_id="t")

    wait_until(lambda: pending(service, "user0799") == 0, timeout=debounce + SLACK, what="the update")
    assert llm.arrivals[0] >= before_last_add + debounce - EARLY, "the burst skipped its debounce"
    assert len(llm.requests) == 1
    assert all(f"burst {number}" in conversation_of(llm.requests[0]) for number in range(6))


def test_resuming_sends_only_the_pages_not_yet_analysed(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    first = make_service(debounce_seconds=60, start=False)
    add(first, "analysed before the restart", user_id="alice", thread_id="t")
    assert flush(first, user_id="alice").pages_analysed == 1
    add(first, "pending at the restart", user_id="alice", thread_id="t")
    add(first, "also pending, other thread", user_id="alice", thread_id="u")
    first.close()  # never started: nothing runs, the two pages stay pending
    assert len(llm.requests) == 1

    second = make_service(debounce_seconds=60)

    wait_until(lambda: pending(second, "alice") == 0, timeout=SLACK, what="the resumed updates")
    assert requests_with(llm, "analysed before the restart") == [0]
    assert len(requests_with(llm, "pending at the restart")) == 1
    assert len(requests_with(llm, "also pending, other thread")) == 1
    assert len(llm.requests) == 3
