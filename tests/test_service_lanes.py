"""add_memory's ordering lanes: one user's adds in arrival order, other users' alongside."""

from __future__ import annotations

import anyio

from memory_mcp.mcp.server import OrderedLanes


def test_one_key_is_served_in_arrival_order_and_other_keys_alongside() -> None:
    lanes = OrderedLanes()
    events: list[str] = []
    inside: set[str] = set()
    most_inside_at_once: list[int] = [0]

    async def add(key: str, name: str, hold: float) -> None:
        async with lanes.lane(key):
            inside.add(name)
            most_inside_at_once[0] = max(most_inside_at_once[0], len(inside))
            events.append(f"start {name}")
            await anyio.sleep(hold)
            events.append(f"end {name}")
            inside.discard(name)

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for number in range(5):
                group.start_soon(add, "alice", f"alice{number}", 0.02)
                await anyio.sleep(0.001)  # arrival order
            group.start_soon(add, "bob", "bob0", 0.0)

    anyio.run(main)

    alice = [event for event in events if "alice" in event]
    assert alice == [f"{edge} alice{n}" for n in range(5) for edge in ("start", "end")]
    # bob did not wait for alice's queue: he finished while alice's first add still held her lane.
    assert events.index("end bob0") < events.index("end alice1")
    assert most_inside_at_once[0] == 2
    assert lanes._lanes == {}, "a lane nobody holds or awaits is dropped"
