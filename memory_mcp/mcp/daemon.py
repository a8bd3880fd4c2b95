"""The process every stdio session of a user shares, so that memory is loaded once however many host
sessions run (each stdio server loading its own copy took about 180 MB at 10,000 exchanges).

The `memory-mcp` a host starts relays its stdin and stdout to a Unix socket here
(`memory_mcp.cli.stdio_relay`), and starts this process when nobody answers there:
`python -m memory_mcp.cli.shared_process SOCKET [CONFIG]`, which works in the socket's folder
(owner-only). Each connection is one MCP session of its own server, whose calls without a project are
about the folder its host started it in (the first line the relay sends), or one prompt hook to
answer (`answer_hook`, given by the command line, which knows hooks); all share one `MemoryService`. It serves
only its own user (the peer's uid, where the system tells it), exits after
`shared_process_idle_minutes` without a session (its pending updates get the same bounded flush as a
stdio server's), or once its socket is removed; a session whose client dies ends alone.

An exchange is acknowledged only once it is on disk, as in a server of its own: a process killed
mid-call leaves its calls unanswered, and the relay answers them with an error.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
from anyio.abc import SocketAttribute
from anyio.streams.buffered import BufferedByteReceiveStream

from memory_mcp import __version__
from memory_mcp.base.errors import MemoryServiceError
from memory_mcp.base.private_sockets import inode_of, is_private_folder
from memory_mcp.base.projects import project_of
from memory_mcp.base.settings import ConfigError, load_settings
from memory_mcp.mcp.server import build_server
from memory_mcp.mcp.stdio import MAX_LINE_BYTES, serve_streams, socket_transport
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store.durable import FileLock, LockTimeout, append_records, ensure_directory

log = logging.getLogger("memory_mcp.mcp.daemon")  # also when run as __main__

# Exit statuses the relay reads: sharing is off, or this process cannot serve (the relay then
# serves in its own process, which reports a bad config or an unreachable store as it always has).
EXIT_NOT_SHARED = 3
EXIT_CANNOT_SERVE = 4
# How often an idle process looks at the clock and at its socket.
POLL_SECONDS = 1.0
# Another process holding the lock is closing down (idle) or starting: it has this long.
LOCK_WAIT_SECONDS = 30.0
LOCK_POLL_SECONDS = 0.05
SERVERS_KEPT = 64
MAX_LOG_BYTES = 1024 * 1024
SOCKET_MODE_MASK = 0o177  # the socket file is its owner's alone (0600)


# What answers a hook's request ({"argv", "stdin", "cwd", "environ"}) with what the hook prints
# ({"stdout", "stderr"}), made for the process's service.
HookAnswerer = Callable[[MemoryService], Callable[[dict[str, Any]], dict[str, str]]]


def main(argv: Sequence[str] | None = None, answer_hook: HookAnswerer | None = None) -> int:
    """`SOCKET [CONFIG]`: serve every session that connects to SOCKET until idle."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    socket_path, config = Path(arguments[0]), Path(arguments[1]) if arguments[1:] else None
    try:
        ensure_directory(socket_path.parent)
    except OSError:
        return EXIT_CANNOT_SERVE  # a data folder it may not write in: each session serves itself
    if not is_private_folder(socket_path.parent):
        return EXIT_CANNOT_SERVE  # what listened there could not be trusted: each session serves itself
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings(config)
    except ConfigError as exc:
        log.error("%s", exc)
        return EXIT_CANNOT_SERVE
    if settings.shared_process_idle_minutes <= 0:
        return EXIT_NOT_SHARED
    lock = FileLock(socket_path.with_suffix(".lock"))
    held = _take_lock(lock, socket_path)
    if held is not None:
        return held
    logging.getLogger().addHandler(LogFile(socket_path.with_suffix(".log")))
    try:
        try:
            service = MemoryService(settings)
        except MemoryServiceError as exc:
            log.error("%s", exc)
            return EXIT_CANNOT_SERVE
        log.info("memory-mcp %s shared process %d; data in %s", __version__, os.getpid(), service.location)
        service.start()
        try:
            listener = listen(socket_path)
            hooks = None if answer_hook is None else answer_hook(service)
            idle_seconds = settings.shared_process_idle_minutes * 60
            anyio.run(serve_shared, service, listener, socket_path, idle_seconds, hooks)
        finally:
            left = service.close()
            log.info(
                "stopped; %s", f"{left} memory updates left to resume at next start" if left else "nothing pending"
            )
    finally:
        lock.release()
    return 0


def _take_lock(lock: FileLock, socket_path: Path) -> int | None:
    """Hold the lock that makes this process the one serving at `socket_path` (None), or the exit
    status that says why not. Of processes started at once, the first serves: the others leave as
    soon as its socket is there. One closing down (idle) holds the lock until its updates are
    flushed, its socket already gone: wait for it."""
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            lock.acquire(timeout=0)
        except LockTimeout:
            if socket_path.exists():
                return 0  # another serves
            if time.monotonic() > deadline:
                log.error("another process has held %s for %g s without serving", lock.path, LOCK_WAIT_SECONDS)
                return EXIT_CANNOT_SERVE
            time.sleep(LOCK_POLL_SECONDS)
            continue
        socket_path.unlink(missing_ok=True)  # left by a process that was killed: from now on, it means serving
        return None


class LogFile(logging.Handler):
    """Log lines appended to a file beside the socket (owner-only), started afresh once large: the
    process has no terminal, and whoever wonders what it did looks there. Its lock holder alone writes."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        if path.exists() and path.stat().st_size > MAX_LOG_BYTES:
            path.unlink()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            append_records(self.path, (self.format(record) + "\n").encode())
        except OSError:
            self.handleError(record)


def listen(socket_path: Path) -> socket.socket:
    """A socket listening at `socket_path` (the lock held), bound from inside its folder: a data folder
    deep enough would make the whole path too long for a socket address."""
    os.chdir(socket_path.parent)  # still a single thread: nothing else depends on the working folder
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(SOCKET_MODE_MASK)
    try:
        listener.bind(socket_path.name)
    finally:
        os.umask(previous)
    listener.listen(64)
    return listener


class Sessions:
    """How many sessions are open, and since when none has been."""

    def __init__(self) -> None:
        self.open = 0
        self.none_since = time.monotonic()

    def idle_for(self) -> float:
        return 0.0 if self.open else time.monotonic() - self.none_since


async def serve_shared(
    service: MemoryService,
    listener: socket.socket,
    socket_path: Path,
    idle_seconds: float,
    hooks: Callable[[dict[str, Any]], dict[str, str]] | None = None,
) -> None:
    """Serve each connection to `listener` as its own session until no session has been open for
    `idle_seconds`, the socket file is gone, or a stop signal comes."""
    sessions, ours = Sessions(), socket_path.stat().st_ino
    hook_lane = anyio.Lock()  # one hook at a time: a hook's output is gathered from the process's streams
    # One server per project serves all its sessions (each is its own on the wire): building one
    # takes ~0.1 s, done in a thread so that sessions already open are not kept waiting.
    servers = functools.lru_cache(maxsize=SERVERS_KEPT)(functools.partial(_server_for, service))
    accepting = await anyio.abc.SocketListener.from_socket(listener)
    async with accepting, anyio.create_task_group() as group:

        async def accept() -> None:
            while True:
                stream = await accepting.accept()
                group.start_soon(serve_connection, stream, servers, sessions, hooks, hook_lane)

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    log.info("%s: finishing pending memory updates, then exiting", signal.Signals(signum).name)
                    group.cancel_scope.cancel()

        group.start_soon(accept)
        group.start_soon(stop_on_signal)
        while sessions.idle_for() < idle_seconds:
            await anyio.sleep(POLL_SECONDS)
            if inode_of(socket_path) != ours and not sessions.open:
                break
        log.info("no session for %g minutes: exiting", idle_seconds / 60)
        group.cancel_scope.cancel()
    if inode_of(socket_path) == ours:
        socket_path.unlink(missing_ok=True)


async def serve_connection(
    stream: anyio.abc.SocketStream,
    servers: Callable[[str | None], Any],
    sessions: Sessions,
    hooks: Callable[[dict[str, Any]], dict[str, str]] | None = None,
    hook_lane: anyio.Lock | None = None,
) -> None:
    """One session: the relay's first line names its host's folder, this process answers with its
    pid, then MCP flows, one JSON-RPC message a line, until the relay closes. A first line that
    names a hook instead gets what the hook prints, one line, and the connection ends."""
    sessions.open += 1
    try:
        async with stream:
            if not same_user(stream):
                log.warning("refused a connection from another user")
                return
            received = BufferedByteReceiveStream(stream)
            hello = json.loads(await received.receive_until(b"\n", MAX_LINE_BYTES))
            await stream.send(json.dumps({"pid": os.getpid()}).encode() + b"\n")
            if isinstance(hello.get("hook"), dict) and hooks is not None and hook_lane is not None:
                log.info("a hook from %s", hello.get("cwd"))
                async with hook_lane:
                    answer = await anyio.to_thread.run_sync(hooks, hello["hook"])
                await stream.send(json.dumps(answer).encode() + b"\n")
                return
            log.info("a session from %s", hello.get("cwd"))
            server = await anyio.to_thread.run_sync(servers, project_of(hello.get("cwd")))
            async with socket_transport(received, stream) as (read_stream, write_stream):
                await serve_streams(server, read_stream, write_stream)
    except Exception:  # one session failing, however, must not end the others: log it, serve on
        log.exception("a session ended with an error")
    finally:
        sessions.open -= 1
        sessions.none_since = time.monotonic()


def _server_for(service: MemoryService, project: str | None) -> Any:  # an MCPServer
    return build_server(service, default_project=project)


def same_user(stream: anyio.abc.SocketStream) -> bool:
    """Whether the process at the other end runs as this user. Linux says (SO_PEERCRED); elsewhere
    the owner-only folder around the socket is what keeps other users out."""
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    raw = stream.extra(SocketAttribute.raw_socket)
    _pid, uid, _gid = struct.unpack("3i", raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return bool(uid == os.getuid())


if __name__ == "__main__":
    sys.exit(main())
