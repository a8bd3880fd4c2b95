"""The hook helpers a test's prompt hooks leave behind: found under the test's folders, stopped."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from command_line import Outcome, run_command

from memory_mcp.hosts.relay import RUN_FOLDER, helper_socket


def stop_hook_helpers(folder: Path) -> None:
    """Remove every hook helper's and shared memory process's socket under `folder`: each exits
    within a second or two of losing its own."""
    for pattern in ("hook-helper-*.sock", "shared-*.sock"):
        for socket_path in folder.glob(f"**/{RUN_FOLDER}/{pattern}"):
            socket_path.unlink(missing_ok=True)


def helper_socket_of(home: Path) -> Path:
    return helper_socket({"MEMORY_MCP_HOME": str(home)})


def helper_processes(home: Path) -> list[int]:
    """Processes of a prompt hook, or helpers they left, for the data home `home` (Linux's /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not ours
        ours = (b"hook" in command and b"prompt" in command) or b"memory_mcp.cli.hook_command" in command
        if ours and f"MEMORY_MCP_HOME={home}".encode() in environ:
            found.append(int(entry.name))
    return found


# The command as Claude Code runs it, telling on stderr's last line whether the package's heavy
# parts were loaded: "light" means the hook helper gave the answer.
_LAUNCH = (
    "import sys, memory_mcp.cli.entry as launch\n"
    "code = launch.main()\n"
    "print('\\n' + ('heavy' if 'pydantic' in sys.modules else 'light'), file=sys.stderr)\n"
    "raise SystemExit(code)"
)


def prompt_hook(home: Path, event: dict[str, Any], *flags: str, **env: str) -> tuple[Outcome, bool]:
    """Run `memory-mcp hook prompt FLAGS` with `event` on stdin: its outcome, and whether the
    helper answered it."""
    outcome = run_command(
        [sys.executable, "-c", _LAUNCH, "hook", "prompt", *flags], home, stdin=json.dumps(event), env=env or None
    )
    *said, loaded = outcome.stderr.rstrip("\n").split("\n")
    return Outcome(outcome.code, outcome.stdout, "\n".join(said).strip()), loaded == "light"
