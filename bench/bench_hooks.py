"""How long Claude Code waits for memory-mcp's hooks: each run is a cold process, as Claude Code
starts one per prompt and per reply.

For each size, a user's memory is filled with that many generated exchanges (the word
distribution of bench_store.py), then `memory-mcp hook prompt` is run with the documented hook
JSON on stdin: first with no hook helper (`hook_helper_idle_minutes` 0: every run reads memory
anew, as the first prompt after an idle spell does), then with the helper the first run leaves
(its resident memory is printed too); and `memory-mcp hook stop` on a 20-turn session transcript
(the first run stores the turns, the next ones find them stored). Alongside, the floor:
`python -c pass` and `memory-mcp --version`. Figures are wall-clock milliseconds, median and
95th percentile.

Usage: python bench/bench_hooks.py [--sizes 1000,10000] [--runs 15]
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
for path in (PROJECT_ROOT, PROJECT_ROOT / "bench", PROJECT_ROOT / "tests" / "support"):
    sys.path.insert(0, str(path))

from bench_store import TextGenerator, page_stream  # noqa: E402
from claude_code_session import Transcript, text  # noqa: E402

from memory_mcp.hook_relay import helper_socket  # noqa: E402
from memory_mcp.ids import new_id  # noqa: E402
from memory_mcp.models import StoredPage  # noqa: E402

COMMAND = [sys.executable, "-m", "memory_mcp"]
PROMPT = "What did we decide about the garden project and the budget?"


def seed(home: Path, size: int) -> None:
    """`size` exchanges for the default user, written as the store writes them."""
    directory = home / "users" / "default"
    directory.mkdir(parents=True, exist_ok=True)
    generator = TextGenerator(7)
    with (directory / "pages.jsonl").open("w", encoding="utf-8") as log:
        for number, (said, answered, thread) in enumerate(itertools.islice(page_stream(generator, 7), size)):
            page = StoredPage(
                page_id=new_id("page"),
                user_input=said,
                agent_response=answered,
                timestamp=f"2025-{1 + number * 12 // size:02d}-01T00:00:00Z",
                thread_id=thread,
            )
            log.write(page.model_dump_json(exclude_none=True) + "\n")


def set_helper(home: Path, idle_minutes: float) -> None:
    (home / "config.json").write_text(json.dumps({"hook_helper_idle_minutes": idle_minutes}), encoding="utf-8")


def helper_rss_mb(home: Path) -> float:
    """Resident memory of the helper serving `home`, waiting for it to listen first."""
    socket_path = helper_socket({"MEMORY_MCP_HOME": str(home)})
    deadline = time.monotonic() + 120
    while not socket_path.exists():
        if time.monotonic() > deadline:
            raise SystemExit("no hook helper started")
        time.sleep(0.05)
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"MEMORY_MCP_HOME={home}".encode() in (entry / "environ").read_bytes():
                status = (entry / "status").read_text()
                return int(status.split("VmRSS:")[1].split()[0]) / 1024
        except OSError:
            continue
    return float("nan")


def timed(command: list[str], stdin: str, home: Path, runs: int) -> tuple[float, float, str]:
    """Median and 95th percentile in ms of `runs` cold runs, and the last run's stdout."""
    env = {"MEMORY_MCP_HOME": str(home), "PATH": "/usr/bin:/bin", "HOME": str(home)}
    times, out = [], ""
    for _ in range(runs):
        began = time.perf_counter()
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, env=env, check=False)
        times.append((time.perf_counter() - began) * 1e3)
        if done.returncode != 0 or done.stderr.strip():
            raise SystemExit(f"{command} failed: {done.stderr}")
        out = done.stdout
    times.sort()
    return statistics.median(times), times[max(0, round(0.95 * len(times)) - 1)], out


def session(path: Path, turns: int) -> Transcript:
    transcript = Transcript(path)
    for turn in range(turns):
        transcript.prompt(f"Question {turn} about the garden project budget")
        transcript.reply(text(f"Answer {turn}: the budget stays at {turn * 100} euros."))
    return transcript


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-hooks-"))
    try:
        empty = work / "empty"
        floor = timed([sys.executable, "-c", "pass"], "", empty, args.runs)
        version = timed([*COMMAND, "--version"], "", empty, args.runs)
        print(f"floor: python -c pass p50 {floor[0]:.0f} ms; memory-mcp --version p50 {version[0]:.0f} ms")
        print(
            f"{'exchanges':>10} {'prompt, no helper p50':>22} {'p95':>6} {'with helper p50':>16} {'p95':>6} "
            f"{'helper RSS':>11} {'stop p50':>9} {'p95':>6}  context"
        )
        for size in (int(part) for part in args.sizes.split(",")):
            home = work / f"home-{size}"
            seed(home, size)
            transcript = session(work / f"session-{size}.jsonl", 20)
            prompt = json.dumps(transcript.prompt_input(PROMPT))
            stop = json.dumps(transcript.stop_input())
            timed([*COMMAND, "hook", "stop"], stop, home, 1)  # stores the session's turns once
            set_helper(home, 0)
            alone_p50, alone_p95, _ = timed([*COMMAND, "hook", "prompt"], prompt, home, args.runs)
            set_helper(home, 10)
            timed([*COMMAND, "hook", "prompt"], prompt, home, 1)  # leaves the helper
            rss = helper_rss_mb(home)
            helped_p50, helped_p95, out = timed([*COMMAND, "hook", "prompt"], prompt, home, args.runs)
            helper_socket({"MEMORY_MCP_HOME": str(home)}).unlink()  # the helper exits
            stop_p50, stop_p95, _ = timed([*COMMAND, "hook", "stop"], stop, home, args.runs)
            context = json.loads(out)["hookSpecificOutput"]["additionalContext"] if out else ""
            print(
                f"{size:>10} {alone_p50:>19.0f} ms {alone_p95:>6.0f} {helped_p50:>13.0f} ms {helped_p95:>6.0f} "
                f"{rss:>8.0f} MB {stop_p50:>6.0f} ms {stop_p95:>6.0f}  {len(context)} chars"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
