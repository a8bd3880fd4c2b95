"""The hook helpers a test's prompt hooks leave behind: found under the test's folders, stopped."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from command_line import Outcome, run_command

from memory_mcp.hosts.relay import RUN_FOLDER, helper_socket, socket_address


def stop_hook_helpers(folder: Path) -> None:
    """Remove every hook helper's and shared memory process's socket under `folder`: each exits
    within a second or two of losing its own."""
    for pattern in ("hook-helper-*.sock", "shared-*.sock"):
        for socket_path in folder.glob(f"**/{RUN_FOLDER}/{pattern}"):
            socket_path.unlink(missing_ok=True)


def see_hook_helpers_out(folder: Path, timeout: float = 30.0) -> list[int]:
    """Remove the helpers' sockets under `folder` until no process of a data home there is left,
    or `timeout` passes; return the processes still left. A hook starts its helper after it has
    answered, so a test can end before that helper binds its socket: removed once at the test's
    end, the socket would be bound again, and the helper would linger its idle and linger spells
    (70 minutes by default)."""
    deadline = time.monotonic() + timeout
    while (left := processes_of_homes_under(folder)) and time.monotonic() < deadline:
        stop_hook_helpers(folder)
        time.sleep(0.2)
    return left


def processes_of_homes_under(folder: Path) -> list[int]:
    """Processes whose MEMORY_MCP_HOME lies under `folder`."""
    prefix = f"MEMORY_MCP_HOME={folder}{os.sep}".encode()
    return [pid for pid, _, environ in readable_processes() if any(v.startswith(prefix) for v in environ)]


def readable_processes() -> Iterator[tuple[int, list[bytes], list[bytes]]]:
    """Every other process whose command line and environment this account can read (Linux's
    /proc; none elsewhere)."""
    for entry in Path("/proc").glob("[0-9]*"):
        if int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not ours
        yield int(entry.name), command, environ


def helper_socket_of(home: Path) -> Path:
    return helper_socket({"MEMORY_MCP_HOME": str(home)})


def helper_processes(home: Path) -> list[int]:
    """Processes of a prompt hook, or helpers they left, for the data home `home`."""
    variable = f"MEMORY_MCP_HOME={home}".encode()
    return [
        pid
        for pid, command, environ in readable_processes()
        if variable in environ
        and ((b"hook" in command and b"prompt" in command) or b"memory_mcp.cli.hook_command" in command)
    ]


# The command as Claude Code runs it, telling on stderr's last line whether the package's heavy
# parts were loaded: "light" means the hook helper gave the answer.
# The command line as the console script runs it, but given its arguments: main() then returns
# (a hook's process run as `memory-mcp` ends at once) and the modules it loaded can be told.
_LAUNCH = (
    "import sys, memory_mcp.cli.entry as launch\n"
    "code = launch.main(sys.argv[1:])\n"
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


@contextmanager
def answering_badly(socket_path: Path, answer: bytes | None, greeting: bytes = b"") -> Iterator[None]:
    """Something listening at `socket_path` in a private folder, as a helper would: it reads one
    request, sends `greeting`, then `answer`, or a byte a second and never a whole answer when
    `answer` is None, until the block ends."""
    socket_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    stop = threading.Event()
    with socket.socket(socket.AF_UNIX) as listener:
        with socket_address(socket_path) as address:
            listener.bind(address)
        listener.listen(1)

        def answer_badly() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(1 << 20)
                connection.sendall(greeting)
                if answer is not None:
                    connection.sendall(answer)
                    return
                while not stop.wait(1.0):
                    try:
                        connection.sendall(b" ")
                    except OSError:
                        return

        worker = threading.Thread(target=answer_badly)
        worker.start()
        try:
            yield
        finally:
            stop.set()
            worker.join()


def shared_processes(home: Path) -> list[int]:
    """Shared processes serving the data home `home`: their socket is in it."""
    return [pid for pid, command, _ in readable_processes() if is_shared_process_of(command, str(home).encode())]


def is_shared_process_of(command: list[bytes], home: bytes) -> bool:
    return b"memory_mcp.cli.shared_process" in command and any(part.startswith(home) for part in command)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") >= 0
