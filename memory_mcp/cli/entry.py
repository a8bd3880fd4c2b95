"""The `memory-mcp` command's first step, on the standard library alone.

Claude Code runs `memory-mcp hook prompt` before every prompt and waits for it, and importing the
whole package takes a quarter of a second: when a hook helper is listening, it answers instead
(`hook_helper`). A stdio server becomes a relay to the one process every session shares
(`stdio_relay`), unless sharing is off. Everything else, and a prompt hook with no helper, goes on
to the command line.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Sequence

from memory_mcp.base.environment import process_environment
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
    arguments = list(sys.argv[1:] if argv is None else argv)
    words = command_words(arguments)[:2]
    if words[:1] == ["hook"] and words[1:] and words[1] in HELPED_HOOKS:
        event = sys.stdin.read()
        try:
            answer = _helper_answer(arguments, event)
        except HelperFailed as exc:
            print(f"memory-mcp hook {words[1]}: {exc}", file=sys.stderr)
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

    return command_line(arguments, keep_hook_helper=True)


def _relayed(arguments: list[str]) -> int | None:
    """Serve over stdio through the shared process: the exit status, or None to serve here."""
    from memory_mcp.cli.stdio_relay import relay_stdio, relayed_options

    options = relayed_options(arguments)
    return None if options is None else relay_stdio(options, process_environment())


def _helper_answer(arguments: list[str], event: str) -> dict[str, str] | None:
    """The helper's answer to this hook, checked, or None if no helper can be asked."""
    environ = process_environment()
    try:
        cwd = os.getcwd()
    except OSError:  # a folder removed under the caller: the command line says so
        return None
    answer = ask_helper({"argv": arguments, "stdin": event, "cwd": cwd, "environ": environ}, helper_socket(environ))
    return None if answer is None else hook_answer(answer)
