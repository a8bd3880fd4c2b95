"""The `memory-mcp` command run as a user runs it: its own process, its output collected."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stdio_helpers import server_env

SCRIPT = Path(sys.executable).parent / "memory-mcp"
MODULE = [sys.executable, "-m", "memory_mcp"]


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        assert self.code == 0, f"exit {self.code}: {self.stderr}"
        return json.loads(self.stdout)

    def error_line(self) -> str:
        """The failure's one stderr line (fails the test unless the command failed with exactly one)."""
        assert self.code != 0, f"expected failure, got exit 0: {self.stdout}"
        lines = self.stderr.splitlines()
        assert len(lines) == 1, f"expected one stderr line, got {len(lines)}:\n{self.stderr}"
        assert self.stdout == "", f"a failure printed on stdout: {self.stdout!r}"
        return lines[0]


def cli_env(home: Path) -> dict[str, str]:
    env = server_env(home)
    for name in ("LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        env.pop(name, None)  # no colour: stdout is a pipe
    env["COLUMNS"] = "200"  # wide enough that no cell wraps, so each value reads whole
    return env


def cli(home: Path, *args: str | Path, module: bool = False, **options: Any) -> Outcome:
    """Run `memory-mcp ARGS` (the installed script, or `python -m memory_mcp`) and collect its output."""
    return run_command(
        [*(MODULE if module or not SCRIPT.exists() else [str(SCRIPT)]), *map(str, args)], home, **options
    )


def run_command(
    command: Sequence[str],
    home: Path,
    *,
    stdout: Any = None,
    timeout: float = 60,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Outcome:
    """Run a command line with `home` as the data directory; `stdin`, if given, is what it reads."""
    completed = subprocess.run(
        command,
        check=False,
        env={**cli_env(home), **(env or {})},
        cwd=cwd or home.parent,
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        stdout=stdout if stdout is not None else subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=timeout,
        text=True,
    )
    return Outcome(completed.returncode, completed.stdout or "", completed.stderr)
