"""When an idle hook helper lets go of its memory and when it exits, on an injected clock; and
that its loop does both, once each, over a real socket."""

from __future__ import annotations

import socket
from pathlib import Path

from memory_mcp.hosts.helper import Idleness, answer_until_idle
from memory_mcp.hosts.relay import socket_address


class Clock:
    def __init__(self, step: float = 0.0) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_memory_is_let_go_once_per_idle_spell_and_the_helper_exits_after_lingering() -> None:
    clock = Clock()
    idleness = Idleness(let_go_after=600, linger=3600, clock=clock)

    clock.now = 599
    assert not idleness.time_to_let_go() and not idleness.time_to_exit()
    clock.now = 600
    assert idleness.time_to_let_go()
    assert not idleness.time_to_let_go(), "once per idle spell"

    clock.now = 1000
    idleness.requested()  # a prompt: memory is loaded again, and the spell starts over
    clock.now = 1599
    assert not idleness.time_to_let_go()
    clock.now = 1600
    assert idleness.time_to_let_go() and not idleness.time_to_exit()
    clock.now = 5199
    assert not idleness.time_to_exit()
    clock.now = 5200
    assert idleness.time_to_exit()


def test_lingering_off_exits_when_idle() -> None:
    clock = Clock()
    idleness = Idleness(let_go_after=600, linger=0, clock=clock)
    clock.now = 600
    assert idleness.time_to_exit()


class Work:
    def __init__(self) -> None:
        self.let_go_calls = 0

    def warm_up(self) -> None: ...

    def answer(self, request: object) -> object:
        return request

    def let_go(self) -> None:
        self.let_go_calls += 1

    def close(self) -> None: ...


def test_an_idle_helper_lets_go_of_its_memory_once_then_exits(tmp_path: Path) -> None:
    path = tmp_path / "helper.sock"
    work = Work()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        with socket_address(path) as address:
            listener.bind(address)
        listener.listen(1)
        listener.settimeout(0.01)  # each look at the clock after a poll with no request
        idleness = Idleness(let_go_after=10, linger=30, clock=Clock(step=1))
        left = answer_until_idle(listener, path, path.stat().st_ino, idleness, work, code=0)
    assert left is None and work.let_go_calls == 1
