"""Asking the hook helper: the process a prompt hook leaves behind, with memory loaded, to answer
the next prompt hooks in tens of milliseconds instead of reading memory anew each time.

Standard library only: the command's first step asks here before anything heavy is imported.
The helper listens on a Unix socket in a folder of the data home that only its owner may enter;
each installation of the package has its own socket, so no helper answers for other code.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memory_mcp import __version__
from memory_mcp.base.environment import default_data_path
from memory_mcp.base.private_sockets import is_private_folder

RUN_FOLDER = "run"
# A helper still loading a large memory may take a while; one that takes longer has a problem,
# and the prompt must go on without it.
ANSWER_TIMEOUT_SECONDS = 10.0
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# Unix socket addresses hold about a hundred bytes (104 on macOS, 108 on Linux, with the final NUL).
MAX_SOCKET_ADDRESS_BYTES = 100


class HelperFailed(Exception):
    """A helper was there but gave no usable answer; the message is one line."""


def helper_socket(environ: Mapping[str, str] | None = None) -> Path:
    """Where this installation's helper listens for the data home `environ` names."""
    installation = f"{__version__}\0{Path(__file__).resolve().parent}"
    name = hashlib.sha256(installation.encode()).hexdigest()[:12]
    return run_folder(default_data_path(environ)) / f"hook-helper-{name}.sock"


def run_folder(data_home: Path) -> Path:
    """Where the processes of a data home keep their sockets and locks (owner-only)."""
    return data_home / RUN_FOLDER


def ask_helper(request: dict[str, Any], socket_path: Path, timeout: float = ANSWER_TIMEOUT_SECONDS) -> Any:
    """The helper's answer to `request`, or None when no helper is listening (the caller then
    does the work itself). `timeout` bounds the whole exchange, however the answer trickles in;
    a helper that takes the request and gives no usable answer within it raises HelperFailed."""
    if not hasattr(socket, "AF_UNIX") or not is_private_folder(socket_path.parent):
        return None
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        try:
            with socket_address(socket_path) as address:
                connection.connect(address)
            send_message(connection, request)
        except OSError:  # no socket, nobody listening, a helper closing down, a path too long
            return None
        try:
            return receive_message(connection, deadline)
        except TimeoutError:
            raise HelperFailed(f"the hook helper gave no answer within {timeout:g} s") from None
        except (EOFError, ConnectionResetError):
            return None  # it closed down (idle, or its code changed) between taking the request and answering
        except (OSError, ValueError) as exc:
            raise HelperFailed(f"the hook helper's answer could not be read ({exc})") from None


def hook_answer(answer: Any) -> dict[str, str]:
    """A helper's answer to a hook, checked: what the hook prints on stdout and on stderr."""
    if not (
        isinstance(answer, dict)
        and set(answer) == {"stdout", "stderr"}
        and all(isinstance(value, str) for value in answer.values())
    ):
        raise HelperFailed("the hook helper's answer is not what a hook prints (ignored)")
    return answer


@contextmanager
def socket_address(path: Path) -> Iterator[str]:
    """An address for `path` that bind and connect accept: a path too long for a socket address
    is reached from inside its folder. That changes the working folder for a moment, so only a
    process with a single thread may use a long path."""
    if len(os.fsencode(path)) <= MAX_SOCKET_ADDRESS_BYTES:
        yield str(path)
        return
    previous = os.getcwd()
    os.chdir(path.parent)
    try:
        yield path.name
    finally:
        os.chdir(previous)


def send_message(connection: socket.socket, message: Any) -> None:
    """One JSON value, then the end of this side of the connection."""
    connection.sendall(json.dumps(message).encode())
    connection.shutdown(socket.SHUT_WR)


def receive_message(connection: socket.socket, deadline: float | None = None) -> Any:
    """The JSON value the other side sent (EOFError if it sent nothing), all of it by `deadline`
    (time.monotonic()) if one is given: TimeoutError otherwise."""
    chunks, size = [], 0
    while True:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no whole answer in time")
            connection.settimeout(left)
        chunk = connection.recv(65536)
        if not chunk:
            break
        size += len(chunk)
        if size > MAX_MESSAGE_BYTES:
            raise ValueError(f"a message over {MAX_MESSAGE_BYTES} bytes")
        chunks.append(chunk)
    if not chunks:
        raise EOFError("nothing received")
    return json.loads(b"".join(chunks))
