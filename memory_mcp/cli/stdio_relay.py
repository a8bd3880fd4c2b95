"""The `memory-mcp` a host starts for stdio, as a relay: it pipes the host's newline-delimited
JSON-RPC to the one process that serves every stdio session of this user (`memory_mcp.mcp.daemon`),
starting that process when nobody answers, so memory is loaded once however many sessions run. The
prompt hooks ask that process too (`ask_shared_process`), instead of a hook helper of their own.

Standard library only, and nothing heavy: it starts in tens of milliseconds and stays small. The
shared process is found by a socket in the data folder's run/ folder (owner-only) named by a hash
of what makes its code and settings: the package's version, place and files' times, the data folder,
the config file and when it was written, and the environment variables settings read. Its first line
says where the host started this process (that folder is the session's project); then bytes pass
untouched both ways.

If the shared process dies mid-call, every request it did not answer gets a JSON-RPC error here, so
the host sees the call fail (an exchange is acknowledged only once it is on disk); then a new one is
started and the session's `initialize` replayed to it, and the session goes on.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from memory_mcp import __version__
from memory_mcp.base.environment import (
    HOME_VARIABLE,
    SERVER_URL_VARIABLE,
    SETTINGS_VARIABLES,
    SHARED_PROCESS_VARIABLE,
    default_config_path,
    default_data_path,
)
from memory_mcp.base.private_sockets import PACKAGE_FOLDER, code_stamp, is_private_folder
from memory_mcp.hosts.relay import (
    ANSWER_TIMEOUT_SECONDS,
    MAX_MESSAGE_BYTES,
    HelperFailed,
    run_folder,
    socket_address,
)

if TYPE_CHECKING:
    import subprocess

SHARING_SETTING = "shared_process_idle_minutes"
# The shared process's exit statuses (memory_mcp.mcp.daemon): sharing is off, or it cannot serve.
EXIT_NOT_SHARED, EXIT_CANNOT_SERVE = 3, 4
DAEMON_MODULE = "memory_mcp.cli.shared_process"
# A shared process binds its socket once its store is open; one that takes longer has a problem,
# and the session is served in this process instead.
START_WAIT_SECONDS = 60.0
CONNECT_RETRY_SECONDS = 0.02
GREETING_SECONDS = 10.0
MAX_GREETING_BYTES = 4096
# Replacements of a shared process that died, per session: past them, the session ends.
MAX_RESTARTS = 5
INTERNAL_ERROR = -32603
UNANSWERED = (
    "memory-mcp: the shared memory process ended before answering, so this call was not acknowledged "
    "(an add_memory may or may not have been stored); a new process now serves this session: try again"
)


def relayed_options(arguments: Sequence[str]) -> dict[str, str] | None:
    """The options of a command line that serves over stdio and nothing else (`--config`,
    `--transport stdio`), or None for any other command line: it goes on to the command line
    itself, unchanged. A `--log-level` asks for the server's log on this session's stderr, which a
    shared process cannot give: that session is served in its own process."""
    options, given = {}, iter(arguments)
    for word in given:
        name, equals, value = word.partition("=")
        if name not in ("--config", "--transport"):
            return None
        if not equals:
            value = next(given, "")
        if not value:
            return None
        options[name] = value
    if options.get("--transport", "stdio") != "stdio":
        return None
    return options


def sharing_on(environ: Mapping[str, str], config: str | None) -> bool:
    """Whether these sessions share a process (shared_process_idle_minutes above 0), known without
    loading the settings: the environment's variable wins (as in load_settings), else the config
    file's value (the one given, else config.json of the data folder), else the default, off. A
    value the settings would refuse is left to them: the session is served here and they say why.
    Sessions whose memory is on a team's server (memory_server.url) hold none here: never shared."""
    path = Path(config) if config else default_config_path(environ)
    try:
        written = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        written = {}
    if not isinstance(written, dict):
        return False
    server = written.get("memory_server")
    if environ.get(SERVER_URL_VARIABLE) or (isinstance(server, dict) and server.get("url")):
        return False
    given = environ.get(SHARED_PROCESS_VARIABLE) or written.get(SHARING_SETTING)
    try:
        return float(given or 0) > 0
    except (TypeError, ValueError):
        return False


def shared_socket(environ: Mapping[str, str], config: str | None) -> Path:
    """Where the process sharing these settings listens: <data folder>/run/shared-<hash>.sock."""
    sockets = run_folder(default_data_path(environ)).absolute()  # the hook helper's too
    variables = sorted((name, environ[name]) for name in SETTINGS_VARIABLES if environ.get(name))
    config_path = Path(config) if config else default_config_path(environ)
    made_of = [__version__, str(PACKAGE_FOLDER), code_stamp(), str(sockets), config, variables]
    made_of.append(file_stamp(config_path))  # an edited config file is served by a new process
    name = hashlib.sha256(json.dumps(made_of).encode()).hexdigest()[:16]
    return sockets / f"shared-{name}.sock"


def file_stamp(path: Path) -> list[int]:
    """When and how large `path` was last written ([] when it is not there)."""
    try:
        info = path.stat()
    except OSError:
        return []
    return [info.st_mtime_ns, info.st_size]


class Connection:
    """A connection to a shared process, past its greeting."""

    def __init__(self, sock: socket.socket, pid: int, lines: io.BufferedReader) -> None:
        self.socket, self.pid, self.lines = sock, pid, lines


def connect(socket_path: Path, hello: Mapping[str, Any]) -> Connection | None:
    """A connection to the process listening at `socket_path`, told `hello` (the host's folder,
    and a hook's request if it is one); None when nobody answers there (no socket, a stale one,
    a process closing down)."""
    if not is_private_folder(socket_path.parent):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(GREETING_SECONDS)
        with socket_address(socket_path) as address:
            sock.connect(address)
        sock.sendall(json.dumps(hello).encode() + b"\n")
        lines = sock.makefile("rb")
        greeting = lines.readline(MAX_GREETING_BYTES)
        if not greeting.endswith(b"\n"):
            raise ConnectionResetError("closed before its greeting")
        pid = int(json.loads(greeting)["pid"])
        sock.settimeout(None)
    except (OSError, ValueError, KeyError, TypeError):
        sock.close()
        return None
    return Connection(sock, pid, lines)


class Launcher:
    """Reaches the shared process for one session's settings, starting it when nobody answers."""

    def __init__(self, environ: Mapping[str, str], config: str | None, folder: str) -> None:
        self.variables = dict(environ)
        self.config = None if config is None else str(Path(config).expanduser().absolute())
        self.folder = folder
        self.socket_path = shared_socket(environ, self.config)
        if HOME_VARIABLE in self.variables:  # the shared process works in its socket's folder
            self.variables[HOME_VARIABLE] = str(default_data_path(environ).absolute())

    def reach(self) -> Connection | int:
        """A connection, or the exit status of a shared process that would not serve."""
        hello = {"cwd": self.folder}
        connection = connect(self.socket_path, hello)
        if connection is not None:
            return connection
        child, deadline = self.start(), time.monotonic() + START_WAIT_SECONDS
        while child is not None and time.monotonic() < deadline:
            connection = connect(self.socket_path, hello)
            if connection is not None:
                return connection
            status = child.poll()
            if status in (EXIT_NOT_SHARED, EXIT_CANNOT_SERVE):
                return status
            if status is not None and status > 0:  # it failed (its log says why): serve here
                return EXIT_CANNOT_SERVE
            if status is not None:  # killed while starting, or it served and left since: another
                child = self.start()
            time.sleep(CONNECT_RETRY_SECONDS)
        return EXIT_CANNOT_SERVE

    def start(self) -> subprocess.Popen[bytes] | None:
        """A new shared process, on its way (it makes its folder and logs to a file there)."""
        import subprocess

        if not hasattr(os, "setsid"):
            return None
        command = [sys.executable, "-m", DAEMON_MODULE, str(self.socket_path)]
        return subprocess.Popen(
            [*command, *([self.config] if self.config else [])],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=self.variables,
            start_new_session=True,
        )


def ask_shared_process(request: dict[str, Any], config: str | None, environ: Mapping[str, str]) -> Any:
    """The shared process's answer to a prompt hook's `request` ({"argv", "stdin", "cwd",
    "environ"}), or None when none is listening: one is then started for the next hook, and this
    one is answered by its own process as before. An answer not given within the hook helper's
    bound raises HelperFailed: the prompt goes on without context."""
    launcher = Launcher(environ, config, request["cwd"])
    connection = connect(launcher.socket_path, {"cwd": request["cwd"], "hook": request})
    if connection is None:
        launcher.start()
        return None
    with connection.socket, connection.lines:
        line = _answer_line(connection, time.monotonic() + ANSWER_TIMEOUT_SECONDS)
    if line is None:
        return None  # it ended (idle, or killed) between taking the request and answering
    try:
        return json.loads(line)
    except ValueError as exc:
        raise HelperFailed(f"the shared memory process's answer could not be read ({exc})") from None


def _answer_line(connection: Connection, deadline: float) -> bytes | None:
    """One line, all of it by `deadline` however it trickles in (HelperFailed otherwise), or None
    when the connection ends first."""
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or len(line) > MAX_MESSAGE_BYTES:
            raise HelperFailed(f"the shared memory process gave no answer within {ANSWER_TIMEOUT_SECONDS:g} s")
        try:
            connection.socket.settimeout(left)
            chunk = connection.lines.read1(65536)
        except TimeoutError:
            continue
        except OSError:
            return None
        if not chunk:
            return None
        line += chunk
    return line


def request_key(message: Any) -> str | None:
    """The id of a request (as JSON text: 1 and "1" are different ids), None for anything else."""
    if isinstance(message, dict) and "method" in message and "id" in message:
        return json.dumps(message["id"])
    return None


def answer_key(message: Any) -> str | None:
    """The id a response answers, None for anything else."""
    if isinstance(message, dict) and "method" not in message and ("result" in message or "error" in message):
        return json.dumps(message.get("id"))
    return None


def parsed(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None  # the shared process answers it (parse error): nothing to track


class Relay:
    """Two directions: the host's lines to the shared process (the calling thread), its lines to
    the host (a thread of its own, which also replaces a shared process that died)."""

    def __init__(self, launcher: Launcher, connection: Connection, host_in: IO[bytes], host_out: IO[bytes]) -> None:
        self.launcher, self.connection = launcher, connection
        self.host_in, self.host_out = host_in, host_out
        self.lock = threading.Lock()
        self.unanswered: dict[str, Any] = {}  # key -> the request's id
        self.initialize: bytes | None = None
        self.initialized: bytes | None = None
        self.closing = False
        self.restarts = 0

    def run(self) -> int:
        answers = threading.Thread(target=self._to_host, daemon=True)
        answers.start()
        for line in iter(self.host_in.readline, b""):
            self._to_shared(line)
        with self.lock:
            self.closing = True
            connection = self.connection
        try:
            connection.socket.shutdown(socket.SHUT_WR)  # the session ends; its answers still come
        except OSError:
            pass
        answers.join(GREETING_SECONDS)
        return 0

    def _to_shared(self, line: bytes) -> None:
        message = parsed(line)
        with self.lock:
            key = request_key(message)
            if key is not None:
                self.unanswered[key] = message["id"]
                if message.get("method") == "initialize":
                    self.initialize = line
            elif isinstance(message, dict) and message.get("method") == "notifications/initialized":
                self.initialized = line
            connection = self.connection  # sent outside the lock: a full socket must not stop answers
        try:
            connection.socket.sendall(line)
        except OSError:
            pass  # the process died: `_to_host` answers this request and replaces it

    def _to_host(self) -> None:
        while True:
            try:
                line = self.connection.lines.readline()
            except OSError:
                line = b""
            if line:
                key = answer_key(parsed(line))
                if key is not None:
                    with self.lock:
                        self.unanswered.pop(key, None)
                self._write(line)
                continue
            with self.lock:
                if self.closing:
                    return
                self._answer_unanswered()
                if not self._replace():
                    self.host_out.flush()
                    os._exit(1)  # no process to serve the session: the host sees its server end

    def _answer_unanswered(self) -> None:
        for request_id in self.unanswered.values():
            error = {"code": INTERNAL_ERROR, "message": UNANSWERED}
            self._write(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode() + b"\n")
        self.unanswered.clear()

    def _replace(self) -> bool:
        """Connect to a new shared process (the lock held) and replay the session's start to it."""
        self.connection.socket.close()
        while self.restarts < MAX_RESTARTS:
            self.restarts += 1
            connection = self.launcher.reach()
            if not isinstance(connection, Connection):
                break
            if self._replay(connection):
                print(
                    f"memory-mcp: shared process {self.connection.pid} ended; {connection.pid} serves on",
                    file=sys.stderr,
                )
                self.connection = connection
                return True
            connection.socket.close()
        print("memory-mcp: the shared process ended and no other could be started: ending the session", file=sys.stderr)
        return False

    def _replay(self, connection: Connection) -> bool:
        """Send the session's `initialize` and `notifications/initialized` again, its answer dropped."""
        if self.initialize is None:
            return True
        try:
            connection.socket.sendall(self.initialize)
            wanted = request_key(parsed(self.initialize))
            while answer_key(parsed(line := connection.lines.readline())) != wanted:
                if not line:
                    return False
            if self.initialized is not None:
                connection.socket.sendall(self.initialized)
        except OSError:
            return False
        return True

    def _write(self, line: bytes) -> None:
        try:
            self.host_out.write(line)
            self.host_out.flush()
        except OSError:
            os._exit(0)  # the host is gone


def relay_stdio(options: Mapping[str, str], environ: Mapping[str, str]) -> int | None:
    """Serve this session through the shared process: its exit status, or None when this process
    must serve it itself (sharing off, no Unix sockets, or a shared process that would not serve)."""
    if not hasattr(socket, "AF_UNIX") or not sharing_on(environ, options.get("--config")):
        return None
    try:
        folder = os.getcwd()
    except OSError:  # a folder removed under the host: the command line says so
        return None
    launcher = Launcher(environ, options.get("--config"), folder)
    connection = launcher.reach()
    if not isinstance(connection, Connection):
        return None
    return Relay(launcher, connection, sys.stdin.buffer, sys.stdout.buffer).run()
