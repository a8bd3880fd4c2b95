"""The hook helper: a process a prompt hook leaves behind with memory loaded, so that the next
prompt hooks are answered in tens of milliseconds instead of each reading memory anew (over a
second at 10,000 exchanges).

A hook that found no helper starts one after it has answered: a new Python process
(`python -m memory_mcp.cli.hook_command`), never a fork of the hook, which may have run the embedding
model (its threads do not survive a fork, and a forked helper would wait on their locks for
ever); the helper loads whatever it needs itself. It is told its work on stdin (what to load
first), listens where `relay.helper_socket` says, and answers one request at a time. Idle for
`hook_helper_idle_minutes`, it lets go of the memory it loaded but keeps what loading it again needs
(Python, numpy, the token encoding): a request then costs one read of memory, a fraction of a second,
not a new process's imports and loads. It exits once idle for `hook_helper_linger_minutes` more, as
soon as its socket is removed, or when the package's code changes
under it (an upgrade, an edit): a request it then leaves unanswered is answered by the hook
itself, which starts a helper on the new code. A lock file held for its life keeps it the only
one per data home and installation: of two hooks starting one at once, one stands down. It reads
memory through an ordinary service, so it sees whatever other processes store or forget, as a
server does.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from memory_mcp.base.private_sockets import code_stamp, inode_of, is_private_folder
from memory_mcp.hosts.relay import (
    ANSWER_TIMEOUT_SECONDS,
    receive_message,
    send_message,
    socket_address,
)
from memory_mcp.store.durable import FileLock, LockTimeout, ensure_directory

# How often an idle helper looks at the clock and at its socket.
POLL_SECONDS = 1.0


class HelperWork(Protocol):
    """What the helper does: load what the first requests will need, answer requests, and let
    go of what it holds when it exits."""

    def warm_up(self) -> None: ...

    def answer(self, request: Any) -> Any: ...

    def let_go(self) -> None:
        """Release the memory loaded for requests; the next request loads it again."""

    def close(self) -> None: ...


def keep_helper(
    command: list[str], socket_path: Path, idle_seconds: float, linger_seconds: float, first_request: dict[str, Any]
) -> None:
    """Leave a helper listening at `socket_path` unless one already is; return at once. `command`
    starts it (a module that calls `serve_told`); it warms up on `first_request` (a hook's argv,
    environ and cwd, as hooks ask it)."""
    folder = socket_path.parent
    if idle_seconds <= 0 or not hasattr(socket, "AF_UNIX"):
        return
    ensure_directory(folder)
    if is_private_folder(folder):  # else nothing listening there could be trusted: no helper
        spawn_detached(
            [*command, str(socket_path), str(idle_seconds), str(linger_seconds)],
            {"warm_up": first_request},
            first_request["cwd"],
            first_request["environ"],
        )


def spawn_detached(command: list[str], told: Any, cwd: str, environ: Mapping[str, str] | None) -> None:
    """Start `command` as a new process in its own session, told `told` (JSON) on its stdin, its
    output let go (Claude Code waits for the hook's streams to close, never for this); return at
    once. Where there is no such session (Windows), nothing starts."""
    if not hasattr(os, "setsid"):
        return
    child = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=cwd,
        env=environ,
        start_new_session=True,
    )
    assert child.stdin is not None
    with child.stdin:
        child.stdin.write(json.dumps(told).encode())


def serve_told(argv: list[str], work_for: Callable[[dict[str, Any]], HelperWork]) -> int:
    """The helper process: `SOCKET IDLE_SECONDS LINGER_SECONDS` on its command line, told
    {"warm_up": request} on stdin; `work_for` makes its work from that first request."""
    socket_path, idle_seconds, linger_seconds = Path(argv[0]), float(argv[1]), float(argv[2])
    _serve(socket_path, Idleness(idle_seconds, linger_seconds), work_for(told_on_stdin()["warm_up"]))
    return 0


def told_on_stdin() -> Any:
    """What a process spawn_detached started was told; its stdin is then closed for good."""
    told = json.loads(sys.stdin.read())
    with open(os.devnull) as nothing:  # read-only: a stray write fails instead of landing anywhere
        os.dup2(nothing.fileno(), 0)
    return told


def _serve(socket_path: Path, idleness: Idleness, work: HelperWork) -> None:
    folder = socket_path.parent
    ensure_directory(folder)
    if not is_private_folder(folder):
        return
    lock = FileLock(socket_path.with_suffix(".lock"))
    try:
        lock.acquire(timeout=0)
    except LockTimeout:
        return  # another helper is there
    unanswered, code = None, code_stamp()
    try:
        socket_path.unlink(missing_ok=True)  # left by a helper that was killed
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            with socket_address(socket_path) as address:  # no other thread yet: see socket_address
                listener.bind(address)
            listener.listen(16)
            listener.settimeout(POLL_SECONDS)
            ours = socket_path.stat().st_ino
            try:
                work.warm_up()
                unanswered = answer_until_idle(listener, socket_path, ours, idleness, work, code)
            finally:
                if inode_of(socket_path) == ours:
                    socket_path.unlink(missing_ok=True)
                work.close()
    finally:
        lock.release()
        if unanswered is not None:
            unanswered.close()  # only now: its hook starts the next helper, which needs the lock


class Idleness:
    """When an idle helper lets go of its memory, and when it exits, in seconds since the last
    request (by `clock`)."""

    def __init__(self, let_go_after: float, linger: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.let_go_after, self.linger, self.clock = let_go_after, linger, clock
        self.last_request = clock()
        self.holding = True

    def requested(self) -> None:
        self.last_request, self.holding = self.clock(), True

    def time_to_let_go(self) -> bool:
        """True once per idle spell, when memory is to be let go."""
        if self.holding and self.clock() - self.last_request >= self.let_go_after:
            self.holding = False
            return True
        return False

    def time_to_exit(self) -> bool:
        return self.clock() - self.last_request >= self.let_go_after + self.linger


def answer_until_idle(
    listener: socket.socket, socket_path: Path, ours: int, idleness: Idleness, work: HelperWork, code: int
) -> socket.socket | None:
    """Answer requests until idle or the socket is gone; return the request left unanswered
    because the code changed since `code` was read, if one was."""
    idleness.requested()
    while inode_of(socket_path) == ours:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            if idleness.time_to_exit():
                return None
            if idleness.time_to_let_go():
                work.let_go()
                _return_freed_memory()
            continue
        if code_stamp() != code:
            return connection
        with connection:
            connection.settimeout(ANSWER_TIMEOUT_SECONDS)
            try:
                send_message(connection, work.answer(receive_message(connection)))
            except (OSError, ValueError, EOFError):
                pass  # a client that went away or sent garbage: the next one is served all the same
        idleness.requested()
    return None


def _return_freed_memory() -> None:
    """Hand what `let_go` freed back to the system: the objects it left in cycles collected, then
    glibc, which keeps freed memory for reuse, made to return it with malloc_trim (after three
    loads of 30,000 exchanges, let go: 131 MB resident, not 150). With another C library the
    collection alone."""
    import ctypes

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # no glibc here
        ctypes.CDLL("libc.so.6").malloc_trim(0)
