#!/usr/bin/env python
"""The result files of the benchmarks the documentation quotes: bench/results/<name>.md, committed.

A benchmark writes its headline figures there as a markdown table, under a line that says when,
at which commit, on which machine and with which command it ran (`--no-results` leaves the file
alone, for a trial run with other options). The documentation shows the same table between
`<!-- figures: NAME -->` and `<!-- figures end -->`: tests/test_docs.py fails when the two differ,
and `python bench/result_files.py` copies every result file's table into the documentation.

Usage:  .venv/bin/python bench/result_files.py    # after a benchmark run: the docs show its figures
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
RESULTS = PROJECT_ROOT / "bench" / "results"
START, END = "<!-- figures:start -->", "<!-- figures:end -->"
# Other work on the machine moves the figures: how much there was when the benchmark began.
LOAD_AT_START = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
# A table the documentation shows: never reaching past its own end, even while it is empty.
EMBEDDED = re.compile(r"<!-- figures: ([\w.-]+) -->\n((?:(?!<!-- figures)[\s\S])*?)<!-- figures end -->")


def documents() -> list[Path]:
    """The files that may show result tables: the README and every page of docs/."""
    return [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]


def add_results_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-results",
        action="store_true",
        help="do not write bench/results/ (a trial run, or options other than the documented ones)",
    )


def _git(*arguments: str) -> str:
    try:
        done = subprocess.run(
            ["git", *arguments], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def provenance(argv: Sequence[str] | None = None) -> str:
    """When, at which commit, on which machine and with which command: one paragraph."""
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    if _git("status", "--porcelain", "--untracked-files=no", "--", "memory_mcp", "bench"):
        commit += " (with uncommitted changes)"
    command = " ".join(shlex.quote(part) for part in ["python", *(sys.argv if argv is None else argv)])
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs ({_cpu_model()}), "
        f"Python {platform.python_version()}"
    )
    load = (
        f", load average {LOAD_AT_START:.1f} at the start and {os.getloadavg()[0]:.1f} at the end"
        if LOAD_AT_START is not None
        else ""
    )
    return f"Measured {when} at commit {commit} on {machine}{load}, by:\n`{command}`"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def write(name: str, title: str, figures: str, notes: str = "", argv: Sequence[str] | None = None) -> Path:
    """Write bench/results/<name>.md: title, provenance, `figures` (what the docs show), notes."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.md"
    parts = [f"# {title}", provenance(argv), f"{START}\n{figures.strip()}\n{END}"]
    if notes.strip():
        parts.append(notes.strip())
    path.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    print(f"results written to {path.relative_to(PROJECT_ROOT)}; `python bench/result_files.py` shows them in the docs")
    return path


def figures_of(name: str) -> str:
    """The figures a result file holds, as the documentation shows them."""
    text = (RESULTS / f"{name}.md").read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise ValueError(f"bench/results/{name}.md has no {START} ... {END}")
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n")


def embedded(text: str) -> Iterator[tuple[str, str]]:
    """(result name, figures as shown) for every result table a document shows."""
    for match in EMBEDDED.finditer(text):
        yield match.group(1), match.group(2).strip("\n")


def synced(text: str, missing: set[str]) -> str:
    """`text` with each result table it shows copied from its file; names without a file go to `missing`."""

    def block(match: re.Match[str]) -> str:
        name = match.group(1)
        if not (RESULTS / f"{name}.md").exists():
            missing.add(name)
            return match.group(0)
        return f"<!-- figures: {name} -->\n{figures_of(name)}\n<!-- figures end -->"

    return EMBEDDED.sub(block, text)


def main() -> int:
    argparse.ArgumentParser(description="Copy each result file's figures into the documentation.").parse_args()
    missing: set[str] = set()
    for path in documents():
        text = path.read_text(encoding="utf-8")
        updated = synced(text, missing)
        if updated != text:
            path.write_text(updated, encoding="utf-8")
            print(f"{path.relative_to(PROJECT_ROOT)}: figures updated")
    for name in sorted(missing):
        print(f"bench/results/{name}.md does not exist: run its benchmark", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
