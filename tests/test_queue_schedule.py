"""The queue's scheduling rules, on `Schedule` alone: no threads, no clock, no sleeps.

Time is a plain number each test advances, so every rule (debounce, the deferral cap, earliest
first, retries and their back-off, resume, discard, close) is checked to the exact second, and
the tests take no time however busy the machine is. tests/test_queue.py runs the threaded queue
and the service around it.
"""

from __future__ import annotations

from collections.abc import Container

from memory_mcp.extraction.queue import MAX_DEFERRALS, Key, Schedule, retry_delay
from memory_mcp.store import Scope

DEBOUNCE = 10.0
ALICE, BOB, CAROL = Scope("alice"), Scope("bob"), Scope("carol")
CODER = Scope("alice", "coder")


def take_all(schedule: Schedule, now: float, busy: Container[Scope] = ()) -> list[Key]:
    """The keys due at `now`, in the order workers would take them."""
    taken: list[Key] = []
    while (key := schedule.take_due(now, busy)) is not None:
        taken.append(key)
    return taken


def fail(schedule: Schedule, key: Key, now: float, error: str = "LLM down") -> float:
    """Run `key` at `now` and fail; return how long until its retry."""
    assert take_all(schedule, now) == [key]
    schedule.record(key, now, error)
    retry = schedule.next_due(())
    assert retry is not None
    return retry - now


# --- debounce ----------------------------------------------------------------------------------


def test_each_add_restarts_the_quiet_time() -> None:
    schedule = Schedule(DEBOUNCE)
    schedule.notify((ALICE, "t"), now=0)
    schedule.notify((ALICE, "t"), now=6)

    assert take_all(schedule, 15.9) == []
    assert take_all(schedule, 16) == [(ALICE, "t")]


def test_a_burst_becomes_one_run_after_the_quiet_time() -> None:
    schedule = Schedule(DEBOUNCE)
    for second in range(5):
        schedule.notify((ALICE, "t"), now=second)

    assert take_all(schedule, 4 + DEBOUNCE - 0.01) == []
    assert take_all(schedule, 4 + DEBOUNCE) == [(ALICE, "t")]
    assert schedule.queued() == []


def test_a_thread_that_never_falls_quiet_runs_after_max_deferrals_windows_and_delays_no_other_key() -> None:
    schedule = Schedule(DEBOUNCE)
    chatty, quiet, bob = (ALICE, "chatty"), (ALICE, "quiet"), (BOB, "t")
    first_run: dict[Key, float] = {}
    for second in range(60):  # the chatty thread gets a page every second
        for key in take_all(schedule, second):
            first_run.setdefault(key, second)
        schedule.notify(chatty, second)
        if second == 5:
            schedule.notify(quiet, second)
            schedule.notify(bob, second)

    assert first_run == {quiet: 15, bob: 15, chatty: MAX_DEFERRALS * DEBOUNCE}  # 40: 4 windows after its first page


def test_an_add_asking_for_no_delay_runs_at_once_even_mid_debounce() -> None:
    """A session in demand is analysed without waiting for its quiet time."""
    schedule = Schedule(DEBOUNCE)
    schedule.notify((ALICE, "t"), now=0)
    schedule.notify((ALICE, "t"), now=4, delay=0)

    assert take_all(schedule, 4) == [(ALICE, "t")]


# --- order and wake-ups ------------------------------------------------------------------------


def test_due_keys_run_earliest_first_and_a_new_add_pushes_its_key_back() -> None:
    schedule = Schedule(DEBOUNCE)
    schedule.notify((ALICE, ""), now=0)
    schedule.notify((BOB, ""), now=1)
    schedule.notify((CAROL, ""), now=2)
    schedule.notify((ALICE, ""), now=3)  # alice's timer restarts: now due after carol's

    assert take_all(schedule, 100) == [(BOB, ""), (CAROL, ""), (ALICE, "")]


def test_a_busy_scope_is_passed_over_and_does_not_set_the_wake_up() -> None:
    schedule = Schedule(DEBOUNCE)
    schedule.notify((ALICE, "a"), now=0)
    schedule.notify((ALICE, "b"), now=1)
    schedule.notify((BOB, "t"), now=2)

    assert take_all(schedule, 20, busy={ALICE}) == [(BOB, "t")]
    assert schedule.next_due(busy={ALICE}) is None  # nothing to wait for until alice is free
    assert schedule.next_due(busy=set()) == 10
    assert take_all(schedule, 20) == [(ALICE, "a"), (ALICE, "b")]


def test_the_next_wake_up_is_when_the_earliest_key_falls_due() -> None:
    schedule = Schedule(DEBOUNCE)
    assert schedule.next_due(()) is None

    schedule.notify((ALICE, "t"), now=0)
    schedule.notify((BOB, "t"), now=3, delay=2)
    assert schedule.next_due(()) == 5


# --- failures and retries ----------------------------------------------------------------------


def test_failed_keys_are_retried_after_growing_delays_capped_at_ten_minutes() -> None:
    assert [retry_delay(failures) for failures in range(1, 8)] == [30, 60, 120, 240, 480, 600, 600]
    schedule = Schedule(DEBOUNCE)
    key = (ALICE, "t")
    schedule.notify(key, now=0)
    now = DEBOUNCE

    waits: list[float] = []
    for number in range(1, 8):
        waits.append(fail(schedule, key, now, error=f"failure {number}"))
        now += waits[-1]
    assert waits == [30, 60, 120, 240, 480, 600, 600]
    assert schedule.last_errors == {key: "failure 7"}

    assert take_all(schedule, now) == [key]
    schedule.record(key, now, None)  # success: nothing scheduled, the error forgotten
    assert (schedule.queued(), schedule.last_errors) == ([], {})

    schedule.notify(key, now)  # new work fails once more: the delays start again from 30 s
    assert fail(schedule, key, now + DEBOUNCE, error="failure again") == 30
    assert schedule.last_errors == {key: "failure again"}


def test_an_add_does_not_bring_a_failed_keys_retry_forward() -> None:
    schedule = Schedule(DEBOUNCE)
    key = (ALICE, "t")
    schedule.notify(key, now=0)
    assert fail(schedule, key, now=10) == 30

    schedule.notify(key, now=15)
    schedule.notify(key, now=16, delay=0)

    assert take_all(schedule, 39.9) == []
    assert take_all(schedule, 40) == [key]


def test_flushing_a_scope_takes_its_timers_but_keeps_its_back_off() -> None:
    """run_now runs a scope's threads itself; a key that keeps failing still waits longer each time."""
    schedule = Schedule(DEBOUNCE)
    key = (ALICE, "t")
    schedule.notify(key, now=0)
    assert fail(schedule, key, now=10) == 30
    schedule.notify((ALICE, "u"), now=11)
    schedule.notify((CODER, "t"), now=11)

    schedule.cancel(ALICE)
    assert schedule.queued() == [(CODER, "t")]  # the agent's memory is another scope

    schedule.record(key, 12, "still down")
    assert schedule.queued() == [(CODER, "t"), key]
    assert take_all(schedule, 12 + 59.9) == [(CODER, "t")]
    assert take_all(schedule, 12 + 60) == [key]


# --- resume, discard, close --------------------------------------------------------------------


def test_resume_runs_pending_keys_now_but_keeps_a_timer_an_add_set() -> None:
    schedule = Schedule(DEBOUNCE)
    added, found = (ALICE, "added since start"), (BOB, "pending before")
    schedule.notify(added, now=0)

    schedule.resume([added, found], now=1)

    assert take_all(schedule, 1) == [found]
    assert schedule.next_due(()) == DEBOUNCE


def test_discarding_a_user_drops_their_keys_and_their_agents_but_nobody_elses() -> None:
    schedule = Schedule(DEBOUNCE)
    schedule.notify((CODER, "t"), now=0)
    assert fail(schedule, (CODER, "t"), now=10) == 30
    for key in [(ALICE, "t"), (BOB, "t")]:
        schedule.notify(key, now=11)

    schedule.discard(ALICE)

    assert schedule.queued() == [(BOB, "t")]
    assert schedule.last_errors == {}
    schedule.notify((CODER, "t"), now=50)  # a new memory under the same name inherits no back-off
    assert take_all(schedule, 60) == [(BOB, "t"), (CODER, "t")]
    schedule.record((CODER, "t"), 60, "down")
    assert schedule.next_due(()) == 60 + 30


def test_discarding_an_agent_keeps_its_users_own_keys() -> None:
    schedule = Schedule(DEBOUNCE)
    schedule.notify((ALICE, "t"), now=0)
    schedule.notify((CODER, "t"), now=0)

    schedule.discard(CODER)

    assert schedule.queued() == [(ALICE, "t")]


def test_close_makes_everything_due_now_and_takes_no_new_work() -> None:
    schedule = Schedule(DEBOUNCE)
    assert not schedule.finished  # an open schedule never is: more work may come
    schedule.notify((ALICE, "t"), now=0)
    assert fail(schedule, (ALICE, "t"), now=10) == 30
    schedule.notify((BOB, "t"), now=11)
    schedule.notify((CAROL, "t"), now=11, delay=500)

    schedule.close(now=12)

    assert not schedule.finished  # closed, but work is left
    assert set(take_all(schedule, 12)) == {(ALICE, "t"), (BOB, "t"), (CAROL, "t")}
    assert schedule.finished
    schedule.notify((ALICE, "new"), now=13, delay=0)
    schedule.resume([(BOB, "found")], now=13)
    schedule.record((CAROL, "t"), 13, "down")  # remembered, but no retry: it resumes at next start
    assert schedule.queued() == []
    assert schedule.last_errors == {(ALICE, "t"): "LLM down", (CAROL, "t"): "down"}
    assert schedule.finished
