"""Who is at the other end of a loopback connection: a server that asks for no token serves only
the account that started it.

Listening on 127.0.0.1 keeps other machines out, not other accounts of this one: the data folders
are theirs alone (0700), but a tokenless server would read and write memory for anyone who can
open a TCP connection. On Linux the kernel lists every TCP socket with its owner's uid
(/proc/net/tcp, /proc/net/tcp6): the client's end of the connection is the socket whose local port
is the request's client port and whose remote port is the server's. Elsewhere there is no such
list, and the server says at start that it cannot tell accounts apart (tokens do).
"""

from __future__ import annotations

import os
from pathlib import Path

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

SOCKET_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
ESTABLISHED = "01"
REFUSAL = (
    "This memory-mcp server answers only the account that started it, as it asks for no token. "
    "Issue a token (memory-mcp token add USER) to serve others.\n"
)


def accounts_told_apart() -> bool:
    """Whether this system lets a server see the account at the other end of a connection."""
    return SOCKET_TABLES[0].exists()


def peer_uid(client_port: int, server_port: int) -> int | None:
    """The uid owning the client's end of a TCP connection on this machine, or None when no such
    socket is listed (gone, or on another machine)."""
    for table in SOCKET_TABLES:
        try:
            lines = table.read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 8 or fields[3] != ESTABLISHED:
                continue
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if (local_port, remote_port) == (client_port, server_port):
                return int(fields[7])
    return None


class OwnerOnly:
    """ASGI middleware: a request from another account on this machine gets 403 (where accounts
    can be told apart: see `accounts_told_apart`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.owner = os.getuid()
        self.checking = accounts_told_apart()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.checking and scope["type"] == "http":
            client, server = scope.get("client"), scope.get("server")
            uid = peer_uid(client[1], server[1]) if client and server else None
            if uid != self.owner:
                await PlainTextResponse(REFUSAL, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)
