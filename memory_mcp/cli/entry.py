"""The `memory-mcp` command's first step, on the standard library alone.

Claude Code runs `memory-mcp hook prompt` before every prompt and waits for it, and importing the
whole package takes a quarter of a second: when a hook helper is listening, it answers instead
(`hook_helper`), or, where sessions share a process, that process. A stdio server becomes a relay
to the one process every session shares (`stdio_relay`), unless sharing is off. Everything else,
and a prompt hook nobody answered, goes on to the command line.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import sys
from collections.abc import Sequence
from typing import NoReturn

from memory_mcp.base.environment import process_environment
from memory_mcp.cli.stdio_relay import ask_shared_process, relay_stdio, relayed_options, sharing_on
from memory_mcp.hosts.relay import HelperFailed, ask_helper, helper_socket, hook_answer

# The hooks a helper answers: those the host waits for before the model sees anything.
HELPED_HOOKS = ("prompt", "session-start")
# Options that take a value, wherever they stand: their value is never a command word.
OPTIONS_WITH_VALUES = {
    "--config",
    "--log-level",
    "--transport",
    "--host",
    "--port",
    "--user",
    "--agent",
    "--max-tokens",
}


def command_words(arguments: Sequence[str]) -> list[str]:
    """The words of a command line that are neither options nor options' values, in order."""
    words, given = [], iter(arguments)
    for word in given:
        if word in OPTIONS_WITH_VALUES:
            next(given, None)
        elif not word.startswith("-"):
            words.append(word)
    return words


def main(argv: Sequence[str] | None = None) -> int:
    """The command line's exit status. Run as the process's command (no `argv` given), a hook
    ends the process here at once."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    status = _run(arguments)
    if argv is None and command_words(arguments)[:1] == ["hook"]:
        exit_at_once(status)
    return status


def exit_at_once(status: int) -> NoReturn:
    """End a hook's process without tearing the interpreter down. Its answer is written and its
    memory closed by now, and the host waits for the process to end: freeing the token encoding,
    the models and numpy one object at a time took ~0.12 s of a prompt hook over memory."""
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a host that closed its end: nothing to add
            stream.flush()
    os._exit(status)


def _run(arguments: list[str]) -> int:
    words = command_words(arguments)[:2]
    keep_hook_helper = True
    if words[:1] == ["hook"] and words[1:] and words[1] in HELPED_HOOKS:
        try:
            event = hook_input()
            answer, keep_hook_helper = _helper_answer(arguments, event)
        except Exception as exc:  # a helper that failed, or no home to find one in: never the host's failure
            reason = str(exc) if isinstance(exc, HelperFailed) else one_line(exc)
            print(f"memory-mcp hook {words[1]}: {reason}", file=sys.stderr)
            return 0
        if answer is not None:
            sys.stdout.write(answer["stdout"])
            sys.stderr.write(answer["stderr"])
            return 0
        sys.stdin = io.StringIO(event)  # read already: the command line reads it again
    elif not words:
        status = _relayed(arguments)
        if status is not None:
            return status
    from memory_mcp.cli.main import main as command_line

    return command_line(arguments, keep_hook_helper=keep_hook_helper)


def one_line(exc: Exception) -> str:
    """What a hook says of an error on stderr: its kind and the first line of its message."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def hook_input() -> str:
    """What the host sent on stdin, read as UTF-8 whatever the locale (hosts send UTF-8 JSON; a
    Windows pipe would be read in the ANSI code page), a broken byte replaced, never failing."""
    stream = getattr(sys.stdin, "buffer", None)
    return sys.stdin.read() if stream is None else stream.read().decode("utf-8", errors="replace")


def _relayed(arguments: list[str]) -> int | None:
    """Serve over stdio through the shared process: the exit status, or None to serve here."""
    options = relayed_options(arguments)
    return None if options is None else relay_stdio(options, process_environment())


def _helper_answer(arguments: list[str], event: str) -> tuple[dict[str, str] | None, bool]:
    """The answer to this hook from the process that keeps memory loaded, checked, or None if none
    can be asked; and whether a hook answering itself leaves a hook helper behind. Where sessions
    share a process (stdio_relay), that process answers, and no helper is kept."""
    environ = process_environment()
    try:
        cwd = os.getcwd()
    except OSError:  # a folder removed under the caller: the command line says so
        return None, True
    request = {"argv": arguments, "stdin": event, "cwd": cwd, "environ": environ}
    config = option_value(arguments, "--config")
    if hasattr(socket, "AF_UNIX") and sharing_on(environ, config):
        try:
            shared = ask_shared_process(request, config, environ)
        except OSError:  # no socket or process to be had (out of descriptors): the hook answers itself
            shared = None
        return (None if shared is None else hook_answer(shared)), False
    answer = ask_helper(request, helper_socket(environ))
    return (None if answer is None else hook_answer(answer)), True


def option_value(arguments: Sequence[str], name: str) -> str | None:
    """The value an option is given on a command line (`--name VALUE` or `--name=VALUE`), if any."""
    given = iter(arguments)
    for word in given:
        if word == name:
            return next(given, None)
        if word.startswith(name + "="):
            return word.partition("=")[2]
    return None
