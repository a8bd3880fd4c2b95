#!/usr/bin/env python
"""First recall after a restart when the history was written by a process that never retrieved.

A saved word index lets a restart skip tokenising every exchange; it used to exist only if some
process had retrieved. Per size, over fresh data (JSON files, or a PostgreSQL schema of its own):

  history   SIZE - 1,000 exchanges written straight to the store (a history that no process indexed:
            earlier hooks, an older version), then a WRITER process opens a service, adds the last
            1,000 with add_memory, never retrieves, and closes: its add p50/p95 and how long its
            close took (it builds and saves the index there when its writes have not paused long
            enough for that to happen before).
  restart   --restarts fresh processes each open a service and make one retrieve_memory: that
            first retrieve's time and the process's VmRSS after it (bench_store.restart_probe).
  no index  the same, once, after the saved index is removed: what the first retrieve cost before
            writers saved one.
  prompt    `memory-mcp hook prompt` as Claude Code runs it, the first of a new session, after an
            idle spell: answered by the helper an earlier hook left, lingering once it let go of its
            memory (the defaults), and by a fresh process with no helper at all (lingering off): the
            whole hook's wall time, --restarts times each.

Targets: first retrieve <= 300 ms at 30k and <= 1 s at 100k, VmRSS after it <= 200 MB at 30k;
the same for the prompt hook's first answer.

The history is bench_store's generated text (a few thousand distinct words), or with
--conversations FILE real conversations: LongMemEval's haystack sessions (each once, in the order
the file gives them; the dev split holds ~23,000 exchanges), whose vocabulary is ten times larger.

Usage:  .venv/bin/python bench/bench_first_recall.py [--sizes 30000,100000] [--backend json|postgres]
            [--conversations ../shared/data/longmemeval/longmemeval-s-dev.json.gz --sizes 20000]
Always exits 0 (a report, not a test), except 2 for misuse.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from bench.bench_store import USER_ID, generated_pages, restart_probe  # noqa: E402
from bench.result_files import add_results_option, markdown_table, write  # noqa: E402
from bench.stats import percentile, report_only  # noqa: E402
from bench.storage_backends import BACKENDS, default_dsn, drop_schema, new_schema_name, settings_for  # noqa: E402

WRITER_ADDS = 1_000
TARGET_FIRST_MS = {30_000: 300, 100_000: 1_000}
TARGET_RSS_MB = {30_000: 200}
HELPER_LET_GO_SECONDS = 1.2


def history(size: int, conversations: Path | None) -> list:
    """The `size` exchanges of the history: generated text, or the conversations' first."""
    if conversations is None:
        return generated_pages(size)
    from bench.longmemeval_recall import load_questions
    from memory_mcp.base.ids import new_id
    from memory_mcp.models import Page

    pages, seen = [], set()
    for question in load_questions(conversations):
        for exchange in question.exchanges:
            if (exchange.session, exchange.user_input, exchange.agent_response) in seen:
                continue  # a session shared by several questions' haystacks is stored once
            seen.add((exchange.session, exchange.user_input, exchange.agent_response))
            pages.append(
                Page(
                    page_id=new_id("page"),
                    user_input=exchange.user_input,
                    agent_response=exchange.agent_response,
                    timestamp=exchange.timestamp.replace(" ", "T") + "Z",
                    thread_id=exchange.session,
                )
            )
    if len(pages) < size:
        raise SystemExit(f"{conversations} holds {len(pages):,} exchanges, fewer than {size:,}")
    return pages[:size]


def write_history(settings, size: int, conversations: Path | None) -> dict:
    """The first size - WRITER_ADDS exchanges, straight to the store, 2,000 at a time."""
    from memory_mcp.store import Scope, open_store

    store = open_store(settings)
    pages = history(size, conversations)[: size - WRITER_ADDS]
    for start in range(0, len(pages), 2_000):
        store.append_pages(Scope(USER_ID), pages[start : start + 2_000])
    store.bulk_loaded()  # as a migration or an import does (else PostgreSQL plans without statistics)
    store.close()
    return {"exchanges": len(pages)}


def writer(settings, size: int, conversations: Path | None) -> dict:
    """A process that adds the last WRITER_ADDS exchanges and closes without ever retrieving."""
    from memory_mcp.models import AddMemoryRequest
    from memory_mcp.service.memory_service import MemoryService

    service = MemoryService(settings)
    took = []
    for page in history(size, conversations)[size - WRITER_ADDS :]:
        started = time.perf_counter()
        service.add_memory(
            AddMemoryRequest.build(
                user_id=USER_ID,
                user_input=page.user_input,
                agent_response=page.agent_response,
                thread_id=page.thread_id,
            )
        )
        took.append(time.perf_counter() - started)
    closing = time.perf_counter()
    service.close()
    return {
        "add_p50_ms": round(percentile(took, 50) * 1e3, 2),
        "add_p95_ms": round(percentile(took, 95) * 1e3, 2),
        "close_s": round(time.perf_counter() - closing, 2),
    }


def remove_index(settings, size: int, conversations: Path | None) -> dict:
    from memory_mcp.store import Scope, open_store

    store = open_store(settings)
    scope = Scope(USER_ID)
    store.write_index_snapshot(scope, b"removed", store.read_pages(scope).generation)  # a damaged one is not used
    store.close()
    return {}


PHASES = {
    "history": write_history,
    "writer": writer,
    "probe": lambda settings, size, conversations: restart_probe(settings),
    "remove-index": remove_index,
}


def in_fresh_process(phase: str, size: int, data_root: Path, schema: str | None, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--phase", phase, "--sizes", str(size), "--data-dir", str(data_root)]
    command += ["--backend", args.backend]
    command += ["--worker-schema", schema] if schema else []
    command += ["--conversations", str(args.conversations.resolve())] if args.conversations else []
    completed = subprocess.run(command, stdout=subprocess.PIPE, text=True, cwd=PROJECT_ROOT)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if completed.returncode or not lines:
        raise RuntimeError(f"{phase} exited {completed.returncode}: {completed.stdout[-400:]}")
    return json.loads(lines[-1])


def prompt_hook_ms(data_root: Path, settings, prompt: str, expect_memory: bool = True) -> float:
    """One prompt hook as Claude Code runs it, the first of a new session, in a fresh process that
    leaves no helper behind (as after an idle spell with lingering off); over an empty memory
    unless `expect_memory` (the floor: what starting Python and the hook cost)."""
    config = settings.model_copy(update={"hook_helper_idle_minutes": 0})
    (data_root / "config.json").write_text(config.model_dump_json(), encoding="utf-8")
    return _timed_hook(data_root, prompt, expect_memory)


def lingering_prompt_ms(data_root: Path, settings, prompt: str) -> float:
    """The first prompt hook after an idle spell with the defaults' lingering helper: one hook
    leaves the helper, which lets go of the memory it loaded once idle (here after 1.2 s, not the
    default 10 minutes); the next hook, of a new session, is timed. The helper is then ended."""
    from memory_mcp.hosts.relay import helper_socket
    from memory_mcp.store.durable import FileLock

    update = {"hook_helper_idle_minutes": HELPER_LET_GO_SECONDS / 60, "hook_helper_linger_minutes": 10}
    (data_root / "config.json").write_text(settings.model_copy(update=update).model_dump_json(), encoding="utf-8")
    socket_path = helper_socket({"MEMORY_MCP_HOME": str(data_root)})
    _timed_hook(data_root, prompt, expect_memory=True)
    deadline = time.monotonic() + 60
    while not socket_path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the prompt hook left no helper")
        time.sleep(0.1)
    time.sleep(3 * HELPER_LET_GO_SECONDS)  # idle past the let-go: it holds no memory now
    try:
        return _timed_hook(data_root, prompt, expect_memory=True)
    finally:
        socket_path.unlink(missing_ok=True)  # the helper exits within a second of its socket going
        gone = FileLock(socket_path.with_suffix(".lock"))  # held for the helper's life
        gone.acquire(timeout=60)  # else the next hook would find it still there and start none
        gone.release()


def _timed_hook(data_root: Path, prompt: str, expect_memory: bool) -> float:
    transcript = data_root / "session.jsonl"
    transcript.touch()
    event = {
        "session_id": f"bench-{time.monotonic_ns()}",  # a session is never shown the same exchange twice
        "transcript_path": str(transcript),
        "cwd": str(data_root),
        "hook_event_name": "UserPromptSubmit",
        "prompt": prompt,
    }
    env = {**os.environ, "MEMORY_MCP_HOME": str(data_root)}
    command = [sys.executable, "-m", "memory_mcp", "hook", "prompt", "--user", USER_ID]
    started = time.perf_counter()
    completed = subprocess.run(command, input=json.dumps(event), capture_output=True, text=True, env=env, cwd=data_root)
    took = (time.perf_counter() - started) * 1e3
    if completed.returncode or completed.stderr or expect_memory != ("<memory" in completed.stdout):
        raise RuntimeError(f"the prompt hook answered {completed.stdout[-300:]!r}, said {completed.stderr[-300:]!r}")
    return took


def run_size(size: int, args: argparse.Namespace) -> dict:
    data_root = Path(tempfile.mkdtemp(prefix=f"bench-first-recall-{size}-"))
    schema = new_schema_name(str(size)) if args.backend == "postgres" else None
    try:
        print(f"{size:,} exchanges: writing the history ...", file=sys.stderr, flush=True)
        settings = settings_for(args.backend, data_root, args.dsn, schema)
        asked = history(size, args.conversations)[size // 2].user_input[:300]  # said in the history's middle
        floor = [prompt_hook_ms(data_root, settings, asked, expect_memory=False) for _ in range(args.restarts)]
        in_fresh_process("history", size, data_root, schema, args)
        written = in_fresh_process("writer", size, data_root, schema, args)
        restarts = [in_fresh_process("probe", size, data_root, schema, args) for _ in range(args.restarts)]
        prompts = [prompt_hook_ms(data_root, settings, asked) for _ in range(args.restarts)]
        lingering = [lingering_prompt_ms(data_root, settings, asked) for _ in range(args.restarts)]
        in_fresh_process("remove-index", size, data_root, schema, args)
        without = in_fresh_process("probe", size, data_root, schema, args)
        return {
            "size": size,
            "writer": written,
            "restarts": restarts,
            "prompts": prompts,
            "lingering": lingering,
            "floor": floor,
            "without": without,
        }
    finally:
        shutil.rmtree(data_root, ignore_errors=True)
        if schema:
            drop_schema(args.dsn, schema)


def report(args: argparse.Namespace) -> None:
    rows = []
    for size in args.sizes:
        r = run_size(size, args)
        first = min(run["first_ms"] for run in r["restarts"])
        rss = min(run["rss_mb"] for run in r["restarts"])
        prompt = min(r["prompts"])
        ratio = r["without"]["first_ms"] / first
        rows.append(
            [
                f"{size:,}",
                f"{r['writer']['add_p50_ms']} / {r['writer']['add_p95_ms']} ms",
                f"{r['writer']['close_s']} s",
                f"{first:.0f} ms (target {TARGET_FIRST_MS.get(size, '-')})",
                f"{rss:.0f} MB (target {TARGET_RSS_MB.get(size, '-')})",
                f"{min(r['lingering']):.0f} ms (target {TARGET_FIRST_MS.get(size, '-')})",
                f"{prompt:.0f} ms (empty memory: {min(r['floor']):.0f} ms)",
                f"{r['without']['first_ms']:.0f} ms, {r['without']['rss_mb']:.0f} MB ({ratio:.1f}x)",
            ]
        )
        print(json.dumps(r), file=sys.stderr)
    table = markdown_table(
        [
            "exchanges",
            "writer's add p50 / p95",
            "writer's close",
            "first retrieve after a restart",
            "VmRSS after it",
            "prompt hook after idle, helper lingering",
            "prompt hook, no helper",
            "without a saved index",
        ],
        rows,
    )
    print(f"backend: {args.backend}; best of {args.restarts} fresh processes\n{table}")
    if not args.no_results:
        suffix = ("" if args.backend == "json" else f"-{args.backend}") + (
            "-conversations" if args.conversations else ""
        )
        text = "LongMemEval's conversations" if args.conversations else "generated text"
        write(
            f"bench_first_recall{suffix}",
            f"First recall after a restart, history written without retrieving ({args.backend}, {text})",
            table,
            "A writer process added the last 1,000 exchanges with add_memory and closed without retrieving; "
            "the rest were written straight to the store. 'Without a saved index' removes it and times the "
            "same first retrieve: what it cost before writers saved one.",
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="30000,100000")
    parser.add_argument("--backend", choices=BACKENDS, default="json")
    parser.add_argument("--dsn", default=default_dsn())
    parser.add_argument("--restarts", type=int, default=2)
    parser.add_argument("--conversations", type=Path, help="a LongMemEval file: its sessions are the history")
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--worker-schema", help=argparse.SUPPRESS)
    add_results_option(parser)
    args = parser.parse_args(argv)
    args.sizes = [int(size) for size in args.sizes.split(",")]
    if args.backend == "postgres" and not args.dsn:
        parser.error("--backend postgres needs --dsn or $MEMORY_MCP_DSN")
    if args.phase:
        settings = settings_for(args.backend, args.data_dir, args.dsn, args.worker_schema)
        print(json.dumps(PHASES[args.phase](settings, args.sizes[0], args.conversations)), flush=True)
        return 0
    return report_only(report, args)


if __name__ == "__main__":
    raise SystemExit(main())
