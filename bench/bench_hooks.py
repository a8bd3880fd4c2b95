"""How long Claude Code waits for memory-mcp's hooks: each run is a cold process, as Claude Code
starts one per event.

For each size, a user's memory is filled with that many generated exchanges (the word
distribution of bench_store.py); with --embeddings, with local embeddings on and a vector for
every exchange (stand-ins of the model's id and shape, random: computing 10,000 real ones takes
about 17 minutes on two cores, and what a retrieve costs does not depend on their values). Then,
each time as the first prompt of a new session (a session is never given anything twice):
  no helper      `memory-mcp hook prompt` reading memory anew (`hook_helper_idle_minutes` 0),
                 which is also the first prompt after an idle spell;
  new helper     the first prompt after one, answered by the helper it left while it loads;
  warm           the next prompts, answered by the warm helper (its resident memory printed);
  session-start  the digest, warm;
  stop           `memory-mcp hook stop` on a 20-turn transcript (the first run stores the turns,
                 the next ones find them stored).
Alongside, the floor: `python -c pass` and `memory-mcp --version`. Figures are wall-clock
milliseconds, median and 95th percentile. Target: warm prompt p50 <= 100 ms at 10,000 exchanges,
with embeddings and without.

Usage: python bench/bench_hooks.py [--sizes 1000,10000] [--runs 15] [--embeddings]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
for path in (PROJECT_ROOT, PROJECT_ROOT / "bench", PROJECT_ROOT / "tests" / "support"):
    sys.path.insert(0, str(path))

from bench_store import TextGenerator, page_stream
from claude_code_session import Transcript, text
from result_files import add_results_option, markdown_table, write

from memory_mcp.base.ids import new_id
from memory_mcp.hosts.relay import helper_socket
from memory_mcp.models import StoredPage

COMMAND = [sys.executable, "-m", "memory_mcp"]
PROMPT = "What did we decide about the garden project and the budget?"


TARGET_WARM_MS = 100.0
E5_SMALL_DIMENSIONS = 384  # multilingual-e5-small, the local model


def seed(home: Path, size: int, embeddings: bool) -> None:
    """`size` exchanges for the default user, written as the store writes them (with embeddings,
    a stand-in vector each)."""
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
    if embeddings:
        stand_in_vectors(home)


def stand_in_vectors(home: Path) -> None:
    """A random unit vector of the local model's id and shape for every stored exchange."""
    import numpy as np

    from memory_mcp.base.settings import Settings
    from memory_mcp.recall.embedders import open_embedder, stored_model
    from memory_mcp.recall.vectors import PARTS, quantised
    from memory_mcp.service.memory_service import MemoryService
    from memory_mcp.store import Scope

    settings = Settings(data_storage_path=home, embeddings={"backend": "local"})  # type: ignore[arg-type]
    embedder = open_embedder(settings)
    assert embedder is not None
    service = MemoryService(settings, short_lived=True)
    try:
        ids = list(service.store.read_pages(Scope("default")).pages.ids)
        generator = np.random.default_rng(7)
        vectors = generator.standard_normal((len(ids), PARTS * E5_SMALL_DIMENSIONS)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        for start in range(0, len(ids), 1000):
            stored = quantised(ids[start : start + 1000], vectors[start : start + 1000], stored_model(embedder.model))
            service.store.append_vectors(Scope("default"), stored)
    finally:
        service.close()


def set_helper(home: Path, idle_minutes: float, embeddings: bool) -> None:
    config: dict[str, object] = {"hook_helper_idle_minutes": idle_minutes}
    if embeddings:
        config["embeddings"] = {"backend": "local"}
    (home / "config.json").write_text(json.dumps(config), encoding="utf-8")


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


def timed(command: list[str], stdin: str | Callable[[], str], home: Path, runs: int) -> tuple[float, float, str]:
    """Median and 95th percentile in ms of `runs` cold runs, and the last run's stdout; `stdin`
    may be a function giving each run its own input."""
    env = {"MEMORY_MCP_HOME": str(home), "PATH": "/usr/bin:/bin", "HOME": str(home)}
    times, out = [], ""
    for _ in range(runs):
        given = stdin() if callable(stdin) else stdin
        began = time.perf_counter()
        done = subprocess.run(command, input=given, capture_output=True, text=True, env=env, check=False)
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


def new_session(transcript: Transcript, event: str) -> str:
    """The event's input as the first of a new session (a session is never given anything twice)."""
    payload = transcript.start_input() if event == "session-start" else transcript.prompt_input(PROMPT)
    return json.dumps({**payload, "session_id": f"bench-{uuid.uuid4()}"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--embeddings", action="store_true", help="local embeddings on, a vector per exchange")
    add_results_option(parser)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-hooks-"))
    rows: list[tuple[object, ...]] = []
    try:
        empty = work / "empty"
        floor = timed([sys.executable, "-c", "pass"], "", empty, args.runs)
        version = timed([*COMMAND, "--version"], "", empty, args.runs)
        print(f"floor: python -c pass p50 {floor[0]:.0f} ms; memory-mcp --version p50 {version[0]:.0f} ms")
        print(f"embeddings: {'local (stand-in vectors)' if args.embeddings else 'off'}")
        print(
            f"{'exchanges':>10} {'no helper p50':>14} {'p95':>6} {'new helper':>11} {'warm p50':>9} {'p95':>6} "
            f"{'helper RSS':>11} {'start p50':>10} {'stop p50':>9} {'p95':>6}  context"
        )
        for size in (int(part) for part in args.sizes.split(",")):
            home = work / f"home-{size}"
            seed(home, size, args.embeddings)
            transcript = session(work / f"session-{size}.jsonl", 20)
            stop = json.dumps(transcript.stop_input())
            set_helper(home, 0, args.embeddings)
            timed([*COMMAND, "hook", "stop"], stop, home, 1)  # stores the session's turns once
            prompt = functools.partial(new_session, transcript, "prompt")
            alone_p50, alone_p95, _ = timed([*COMMAND, "hook", "prompt"], prompt, home, args.runs)
            set_helper(home, 10, args.embeddings)
            timed([*COMMAND, "hook", "prompt"], prompt, home, 1)  # leaves the helper
            first_helped = timed([*COMMAND, "hook", "prompt"], prompt, home, 1)[0]
            warm_p50, warm_p95, out = timed([*COMMAND, "hook", "prompt"], prompt, home, args.runs)
            rss = helper_rss_mb(home)  # once it has answered: all it loads is loaded
            start = functools.partial(new_session, transcript, "session-start")
            start_p50 = timed([*COMMAND, "hook", "session-start"], start, home, args.runs)[0]
            helper_socket({"MEMORY_MCP_HOME": str(home)}).unlink()  # the helper exits
            stop_p50, stop_p95, _ = timed([*COMMAND, "hook", "stop"], stop, home, args.runs)
            context = json.loads(out)["hookSpecificOutput"]["additionalContext"] if out else ""
            met = "met" if warm_p50 <= TARGET_WARM_MS else "NOT met"
            print(
                f"{size:>10} {alone_p50:>11.0f} ms {alone_p95:>6.0f} {first_helped:>8.0f} ms {warm_p50:>6.0f} ms "
                f"{warm_p95:>6.0f} {rss:>8.0f} MB {start_p50:>7.0f} ms {stop_p50:>6.0f} ms {stop_p95:>6.0f}  "
                f"{len(context)} chars; warm <= {TARGET_WARM_MS:.0f} ms: {met}"
            )
            rows.append(
                (
                    f"{size:,}",
                    f"{alone_p50:,.0f} ms",
                    f"{first_helped:,.0f} ms",
                    f"{warm_p50:,.0f} / {warm_p95:,.0f} ms",
                    f"{start_p50:,.0f} ms",
                    f"{stop_p50:,.0f} ms",
                    f"{rss:,.0f} MB",
                )
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not args.no_results and rows:
        header = (
            "exchanges",
            "prompt, no helper",
            "first prompt a new helper answers",
            "warm prompt p50 / p95",
            "session start",
            "stop (20 turns)",
            "helper memory",
        )
        write(
            "bench_hooks-embeddings" if args.embeddings else "bench_hooks",
            "Claude Code's hooks, each a cold process"
            + (", local embeddings on (stand-in vectors)" if args.embeddings else ", words alone"),
            markdown_table(header, rows),
            f"Medians (and p95 where shown) over {args.runs} runs, each hook a process of its own as Claude Code starts them, each "
            f"prompt the first of a new session. The floor here: `python -c pass` {floor[0]:.0f} ms, "
            f"`memory-mcp --version` {version[0]:.0f} ms (p50). Target: warm prompt p50 <= {TARGET_WARM_MS:.0f} ms "
            "at 10,000 exchanges.",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
