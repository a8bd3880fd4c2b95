"""The connection itself, bounded: whoever can reach the HTTP port can open connections without a
token, and uvicorn bounds none of it. Deadlines for a request's head and body, a cap on open
connections that makes idle ones give way to callers with requests, a listening socket that never
lets the process run out of file descriptors, and a log that cannot flood.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import socket
import time
from collections.abc import Callable
from typing import Any, Literal

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

log = logging.getLogger("memory_mcp.mcp.http")

# A request's head must arrive within this of the connection opening (or of the previous answer),
# and its body within REQUEST_BODY_SECONDS of the head, however slowly the bytes trickle in: a client
# sends both at once, and the body (at most MAX_CHECKED_BODY_BYTES) needs only ~140 KB/s.
REQUEST_HEAD_SECONDS = 10
REQUEST_BODY_SECONDS = 30
MAX_REQUEST_HEAD_BYTES = 16 * 1024  # a head with a bearer token takes well under 2 KiB
KEEP_ALIVE_SECONDS = 5  # a kept-alive connection with nothing sent is closed after this (uvicorn's default)
# Open connections at most, and at most a quarter of the open-file limit (raised at start towards
# OPEN_FILES_WANTED where the hard limit allows). A connection arriving when less than an eighth of
# the descriptors is free is answered 503 and closed at once, rather than left queued.
MAX_CONNECTIONS = 1000
OPEN_FILES_WANTED = 4 * MAX_CONNECTIONS
# Messages that come once per connection or per failed accept are logged once per this at most.
LOG_REPEAT_SECONDS = 60
ACCEPT_FAILED = "socket.accept() out of system resource"  # asyncio's words
INVALID_REQUEST = "Invalid HTTP request received."  # uvicorn's, and the next two
UNSUPPORTED_UPGRADE = "Unsupported upgrade request."
NO_WEBSOCKETS = "No supported WebSocket library detected."
SERVER_BUSY = (
    f"refused a connection (503): all %d open connections (at most {MAX_CONNECTIONS}, and a quarter of the "
    "open-file limit) are busy with requests; add instances, or raise the open-file limit (ulimit -n)"
)
SHORT_OF_FILES = (
    "refused a connection (503): this process is short of file descriptors (open-file limit %s); "
    "raise the limit (ulimit -n) or find what holds them"
)
BUSY_BODY = b"every connection is busy; retry soon\n"
BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nretry-after: 1\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(BUSY_BODY), BUSY_BODY)
)


def open_more_files() -> None:
    """Raise this process's open-file limit towards OPEN_FILES_WANTED, as far as the hard limit
    allows: the usual 1024 would hold the connections to 256 (Go's runtime does the same)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(OPEN_FILES_WANTED, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _open_file_limit() -> int | None:
    """The open-file limit, asked each time: one raised on the running process counts at once."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def connection_limit() -> int:
    """MAX_CONNECTIONS, or a quarter of the open-file limit if that is less: the rest is for the
    storage, the log, and connections accepted at once before the limit can close any."""
    limit = _open_file_limit()
    return MAX_CONNECTIONS if limit is None else max(1, min(MAX_CONNECTIONS, limit // 4))


class Listener(socket.socket):
    """The listening socket, which never lets its process run out of file descriptors.

    asyncio accepts up to a backlog's worth of connections at a time, before the protocol can close
    idle ones; when descriptors run out, it logs a traceback per failed accept and schedules a retry
    per failure (python/cpython#151615): a flood of connections once wrote 165 MB in 45 s that way. So
    a connection accepted with less than an eighth of the descriptors free is answered 503 and closed
    here, and when none is free at all, one kept spare is freed to accept it and answer the same way:
    the queue drains, the caller learns at once, and asyncio never sees the error."""

    def __init__(self, family: int = -1, type: int = -1, proto: int = -1, fileno: int | None = None) -> None:
        super().__init__(family, type, proto, fileno)  # socket.socket's parameters, which dup() passes
        self._spare: int | None = os.open(os.devnull, os.O_RDONLY)

    def accept(self) -> tuple[socket.socket, Any]:
        try:
            connection, address = super().accept()
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE) or self._spare is None:
                raise
            self._refuse_with_spare()
            raise ConnectionAbortedError from None  # to asyncio's accept loop: nothing to hand over
        limit = _open_file_limit()
        if limit is not None and connection.fileno() >= limit - limit // 8:
            _refuse(connection)  # the lowest free descriptor is this high: nearly all are taken
            raise ConnectionAbortedError
        return connection, address

    def _refuse_with_spare(self) -> None:
        assert self._spare is not None
        os.close(self._spare)
        try:
            _refuse(super().accept()[0])
        finally:
            try:
                self._spare = os.open(os.devnull, os.O_RDONLY)
            except OSError:
                self._spare = None  # taken meanwhile: asyncio's own handling from now on

    def close(self) -> None:
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
        super().close()


def _refuse(connection: socket.socket) -> None:
    """Answer 503 on a connection this process cannot afford, and close it."""
    log.warning(SHORT_OF_FILES, _open_file_limit() or "unlimited")
    connection.setblocking(False)
    try:
        connection.send(BUSY_RESPONSE)  # a fresh socket's buffer takes it whole
    except OSError:
        pass  # the caller is gone already
    connection.close()


class BoundedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with the limits it lacks.

    A client must send a request's head within REQUEST_HEAD_SECONDS and its body within
    REQUEST_BODY_SECONDS, or the connection is closed: sending a byte now and then does not extend
    either. At most connection_limit() connections stay open: past it, the one idle longest (no
    request of it being served) is closed to make room, and when none is idle the newcomer is
    answered 503 at once. However many idle connections anyone opens, a caller with a request gets in.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._owed: Literal["head", "body"] | None = None  # what the client must send now
        self._owed_since = 0.0
        self._deadline: asyncio.TimerHandle | None = None

    @property
    def idle(self) -> bool:
        """No request of this connection is being served: closing it interrupts no one."""
        return self.cycle is None or self.cycle.response_complete

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch_reads()
        self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._expect(None)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_reads()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch_reads()

    def _watch_reads(self) -> None:
        """Give the client a deadline for what it owes now, when that changed: a request's head
        (h11 waits in IDLE until the head is whole), the rest of a body, or nothing."""
        state = self.conn.their_state
        owed: Literal["head", "body"] | None = (
            "head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        )
        if owed != self._owed:
            self._expect(owed)

    def _expect(self, owed: Literal["head", "body"] | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._owed, self._owed_since, self._deadline = owed, self.loop.time(), None
        if owed is not None:
            seconds = REQUEST_HEAD_SECONDS if owed == "head" else REQUEST_BODY_SECONDS
            self._deadline = self.loop.call_later(seconds, self.transport.close)

    def _make_room(self) -> None:
        """Past the limit, close the connection idle longest, or refuse this one if none is idle."""
        limit = connection_limit()
        if len(self.connections) <= limit:
            return
        others = [
            other
            for other in self.connections
            if other is not self and isinstance(other, BoundedH11Protocol) and not other.transport.is_closing()
        ]
        if len(others) < limit:
            return
        idle = [other for other in others if other.idle]
        if idle:
            min(idle, key=lambda other: other._owed_since).transport.close()
        else:
            log.warning(SERVER_BUSY, limit)
            self.transport.write(BUSY_RESPONSE)
            self.transport.close()


class Hush(logging.Filter):
    """Lets each kind of record in `messages` (those whose first line starts so) through once per
    `seconds`, with the number held back since the last one shown.

    Each comes once per connection, or per failed accept: however many connections anyone opens,
    the log must not grow with them (identical tracebacks once filled 165 MB in 45 s)."""

    def __init__(self, messages: tuple[str, ...], seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.messages = messages
        self.seconds = seconds
        self.clock = clock
        self._next: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        first = str(record.msg).partition("\n")[0]
        kind = next((message for message in self.messages if first.startswith(message)), None)
        if kind is None:
            return True
        now = self.clock()
        if now < self._next.get(kind, 0.0):
            self._held[kind] = self._held.get(kind, 0) + 1
            return False
        self._next[kind] = now + self.seconds
        held = self._held.pop(kind, 0)
        if held:
            record.msg = f"{record.msg}\n({held} more like this were held back since the last one)"
        return True


# --- who may touch whose memory -------------------------------------------------------------
