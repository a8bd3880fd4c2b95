"""What several host sessions cost in memory: one shared process serving them all, against a
server of their own each (`shared_process_idle_minutes` 0).

A user's memory is filled with 10,000 generated exchanges (bench_hooks.seed); then 5 stdio
sessions are started at once, as hosts start them (`python -m memory_mcp`, each in a folder of its
own, a real SDK client each), and each asks retrieve_memory once, which loads the user's memory.
With every session still open, the processes serving them are counted (those whose environment
names this data folder) and their resident memory summed from /proc. Also timed: from starting
the sessions to the last one's answer, and how long `memory-mcp` takes to start, reach the warm
shared process and end (stdin closed at once), against `python -c pass`.

Usage: python bench/bench_shared_process.py [--size 10000] [--sessions 5] [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio

PROJECT_ROOT = Path(__file__).resolve().parent.parent
for path in (PROJECT_ROOT, PROJECT_ROOT / "bench", PROJECT_ROOT / "tests" / "support"):
    sys.path.insert(0, str(path))

from bench_hooks import seed
from result_files import add_results_option, markdown_table, write
from stdio_helpers import connect_command, recall

COMMAND = [sys.executable, "-m", "memory_mcp"]
QUERY = "What did we decide about the garden project and the budget?"


def serving(home: Path) -> dict[int, tuple[str, float]]:
    """pid -> (role, resident MB) of every process whose environment names `home`."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"MEMORY_MCP_HOME={home}".encode() in (entry / "environ").read_bytes():
                command = (entry / "cmdline").read_bytes()
                status = (entry / "status").read_text()
                role = "shared" if b"memory_mcp.cli.shared_process" in command else "session"
                found[int(entry.name)] = (role, int(status.split("VmRSS:")[1].split()[0]) / 1024)
        except (OSError, IndexError):
            continue  # gone, or not ours
    return found


async def sessions_at_once(home: Path, count: int, env: dict[str, str]) -> tuple[dict[int, tuple[str, float]], float]:
    """Start `count` sessions together, each retrieving once; what serves them then, and the seconds taken."""
    folders = [home.parent / f"project-{n}" for n in range(count)]
    results: dict[int, tuple[str, float]] = {}
    began = time.perf_counter()
    answered = anyio.Event()
    done = 0

    async def session(folder: Path) -> None:
        nonlocal done
        folder.mkdir(exist_ok=True)
        async with connect_command(COMMAND, env, cwd=folder) as client:
            await recall(client, QUERY)
            done += 1
            if done == count:
                answered.set()
            await answered.wait()  # every session open while they are measured
            if folder == folders[0]:
                results.update(serving(home))

    async with anyio.create_task_group() as group:
        for folder in folders:
            group.start_soon(session, folder)
        await answered.wait()
        took = time.perf_counter() - began
    return results, took


def median_ms(
    command: list[str], env: dict[str, str], runs: int, stdin: Callable[[int], bytes] = lambda _: b""
) -> float:
    times = []
    for run in range(runs):
        began = time.perf_counter()
        subprocess.run(command, input=stdin(run), capture_output=True, env=env, check=True, timeout=60)
        times.append((time.perf_counter() - began) * 1e3)
    return statistics.median(times)


def prompt_hook_ms(home: Path, env: dict[str, str], runs: int) -> float:
    """A Gemini CLI prompt hook's median time once whatever answers hooks (the hook helper, or the
    shared process) is there and warm: the first hook starts it, then each run is a new session."""
    folder = home.parent / "project-0"

    def event(run: int) -> bytes:
        asked = {"hook_event_name": "BeforeAgent", "session_id": f"bench-{run}", "cwd": str(folder), "prompt": QUERY}
        return json.dumps(asked).encode()

    command = [*COMMAND, "hook", "prompt", "--host", "gemini"]
    subprocess.run(command, input=event(-1), capture_output=True, env=env, check=True, timeout=60)
    deadline = time.monotonic() + 120
    while not list(home.glob("run/*.sock")) and time.monotonic() < deadline:
        time.sleep(0.1)
    median_ms(command, env, 2, event)  # warm: its memory loaded
    return median_ms(command, env, runs, event)


def stop_shared(found: dict[int, tuple[str, float]]) -> None:
    for pid, (role, _) in found.items():
        if role == "shared":
            os.kill(pid, signal.SIGTERM)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--runs", type=int, default=10)
    add_results_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "home"
        seed(home, args.size, embeddings=False)
        env = {"MEMORY_MCP_HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        separate_env = env | {"MEMORY_MCP_SHARED_PROCESS_IDLE_MINUTES": "0"}
        separate, separate_s = anyio.run(sessions_at_once, home, args.sessions, separate_env)
        helper_hook_ms = prompt_hook_ms(home, separate_env, args.runs)
        for leftover in home.glob("run/*.sock"):
            leftover.unlink()  # the hook helper exits within a second of losing its socket
        env |= {"MEMORY_MCP_SHARED_PROCESS_IDLE_MINUTES": "10"}  # sharing on
        shared, shared_s = anyio.run(sessions_at_once, home, args.sessions, env)
        relay_ms = median_ms(COMMAND, env, args.runs)  # the shared process is still there, warm
        shared_hook_ms = prompt_hook_ms(home, env, args.runs)
        floor_ms = median_ms([sys.executable, "-c", "pass"], env, args.runs)
        stop_shared(shared)
    report(args, separate, separate_s, shared, shared_s, relay_ms, floor_ms, (helper_hook_ms, shared_hook_ms))


def report(
    args: argparse.Namespace,
    separate: dict[int, tuple[str, float]],
    separate_s: float,
    shared: dict[int, tuple[str, float]],
    shared_s: float,
    relay_ms: float,
    floor_ms: float,
    hook_ms: tuple[float, float],
) -> None:
    def total(found: dict[int, tuple[str, float]]) -> float:
        return sum(mb for _, mb in found.values())

    relays = [mb for role, mb in shared.values() if role == "session"]
    shared_mb = sum(mb for role, mb in shared.values() if role == "shared")
    rows = [
        (
            "a server each (`shared_process_idle_minutes` 0)",
            len(separate),
            f"{total(separate):,.0f} MB",
            f"{separate_s:.1f} s",
        ),
        (
            "one shared process (`shared_process_idle_minutes` 10)",
            len(shared),
            f"{total(shared):,.0f} MB",
            f"{shared_s:.1f} s",
        ),
    ]
    table = markdown_table(
        [
            f"{args.sessions} stdio sessions at {args.size:,} exchanges",
            "processes",
            "resident memory, total",
            "all answered in",
        ],
        rows,
    )
    summary = (
        f"{total(separate) / total(shared):.1f}x less memory shared: the shared process {shared_mb:,.0f} MB, "
        f"each session's relay {statistics.median(relays):.0f} MB (median); the relay starts, reaches the warm "
        f"shared process and ends in {relay_ms:.0f} ms (median of {args.runs}; `python -c pass`: {floor_ms:.0f} ms). "
        f"A prompt hook (Gemini CLI's, a new session each) answered by the warm shared process: {hook_ms[1]:.0f} ms; "
        f"by the warm hook helper a hook keeps when sharing is off: {hook_ms[0]:.0f} ms (medians of {args.runs})."
    )
    print(table + "\n\n" + summary)
    if not args.no_results:
        notes = (
            "Each session: a real MCP SDK client starting `python -m memory_mcp` in a folder of its own, then one "
            "retrieve_memory (which loads the user's memory); measured with every session still open. Processes are "
            "those whose environment names the data folder; resident memory is VmRSS from /proc."
        )
        write(
            "bench_shared_process",
            "Several host sessions: one shared process, or a server each",
            f"{table}\n\n{summary}",
            notes,
        )


if __name__ == "__main__":
    main()
