"""`memory-mcp hook EVENT`: a host's hook run as a command, and the same work done by the prompt
helper a hook leaves behind (`python -m memory_mcp.cli.hook_command SOCKET IDLE_SECONDS
LINGER_SECONDS`).

Whatever goes wrong in a hook, the prompt goes on: one line on stderr, nothing on stdout, exit 0.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from memory_mcp.base.environment import claude_project_dir, process_environment
from memory_mcp.base.settings import Settings, load_settings
from memory_mcp.cli.entry import HELPED_HOOKS, hook_input, one_line
from memory_mcp.cli.parser import build_parser
from memory_mcp.hosts import hooks
from memory_mcp.hosts.events import HookEvent, HostAdapter, HostEvent
from memory_mcp.hosts.helper import keep_helper, serve_told
from memory_mcp.hosts.injection import HostSession
from memory_mcp.hosts.registry import adapter_for
from memory_mcp.hosts.relay import helper_socket
from memory_mcp.hosts.remote import answer_remotely
from memory_mcp.service.memory_service import MemoryService

# The command a hook starts its helper with: this module, run by this installation's own Python.
HELPER_COMMAND = [sys.executable, "-m", "memory_mcp.cli.hook_command"]


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """The parser, built once per process: a hook helper parses every request's command line
    (building it costs ~4 ms of each warm prompt hook)."""
    return build_parser()


def hook_arguments(arguments: Sequence[str]) -> argparse.Namespace | None:
    """A hook's command line parsed, or None when it is wrong: then the reason is one line on
    stderr, since argparse's exit status 2 would make Claude Code drop the prompt."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            return _parser().parse_args(arguments)
    except SystemExit as exc:
        if exc.code:
            print(said.getvalue().strip().splitlines()[-1], file=sys.stderr)
            return None
        raise


def run_hook(args: argparse.Namespace, arguments: list[str], leave_helper: bool) -> int:
    """Run a host's hook. Whatever goes wrong, the prompt must go on: one line on stderr,
    nothing on stdout, exit status 0."""
    try:
        environ, cwd, stdin = process_environment(), os.getcwd(), hook_input()
        settings, host, event, session = _hook_call(args, stdin, environ, cwd)
        if settings.memory_server.url:  # the team's server does the work: no memory loaded here
            _print(answer_remotely(settings, host, args.hook_event, event, session, getattr(args, "max_tokens", None)))
            return 0
        service = MemoryService(settings, short_lived=True)
        stored, index_due = None, False
        try:
            if args.hook_event == "stop":
                stored = hooks.remember_session(service, host, event, session)
                _print(host.answer("stop", ""))
                if stored is not None and stored[0].pages_added:
                    result = stored[0]
                    index_due = service.index_due(result.user_id, result.agent_name, result.pages_added)
            else:
                _print_context(service, args, host, event, session)
        finally:
            service.close()
        if args.hook_event in HELPED_HOOKS and leave_helper:
            first = {"argv": arguments, "stdin": stdin, "cwd": cwd, "environ": environ}
            idle, linger = settings.hook_helper_idle_minutes * 60, settings.hook_helper_linger_minutes * 60
            keep_helper(HELPER_COMMAND, helper_socket(environ), idle, linger, first)
        if stored is not None and stored[0].pages_added:
            result, newest_page = stored  # the result names the scope the pages went to
            if service.extraction_on:
                hooks.update_when_quiet(settings, result.user_id, result.agent_name, newest_page, cwd)
            if index_due:
                hooks.index_when_due(settings, result.user_id, result.agent_name, cwd)
    except Exception as exc:  # a hook never breaks the prompt: it says why and steps aside
        print(f"memory-mcp hook {args.hook_event}: {one_line(exc)}", file=sys.stderr)
    return 0


def _print_context(
    service: MemoryService, args: argparse.Namespace, host: HostAdapter, event: HostEvent, session: HostSession
) -> None:
    """What a context hook (prompt, session-start) prints for the host."""
    if args.hook_event == "prompt":
        _print(hooks.prompt_context(service, host, event, session, args.max_tokens))
    else:
        _print(hooks.start_context(service, host, event, session))


def _print(answer: str) -> None:
    if answer:
        print(answer, flush=True)


def _hook_call(
    args: argparse.Namespace, stdin: str, environ: Mapping[str, str], cwd: str
) -> tuple[Settings, HostAdapter, HostEvent, HostSession]:
    """A hook's settings, host, event and session, from its command line, stdin, environment and
    folder."""
    config = getattr(args, "config", None)
    settings = load_settings(None if config is None else Path(cwd) / config, environ)
    payload = json.loads(stdin)
    if not isinstance(payload, dict):
        raise ValueError("the hook's input is not a JSON object")
    host = adapter_for(getattr(args, "host_name", None), payload, environ)
    hook_event: HookEvent = args.hook_event
    event = host.read(hook_event, payload)
    folder = claude_project_dir(environ) or event.cwd or cwd  # the project, wherever the host has cd'd
    return settings, host, event, hooks.host_session(event, args.user, args.agent, folder)


class _HookHelper:
    """The hook helper's work: answer context hooks as `memory-mcp hook ...` would, reading
    settings anew for each request (its command line, environment and folder) and keeping a
    service, with its loaded memory, per distinct settings. It warms up on the first request's.
    In the shared process (`shared`), a request is answered with that process's service when its
    settings are the process's (the relay sends it there only then; should they differ, as when
    the config file changed in between, it gets a service of its own, as in a helper)."""

    MAX_SERVICES = 4

    def __init__(self, first_request: dict[str, Any], shared: MemoryService | None = None) -> None:
        self._first = first_request
        self._shared = shared
        self._services: dict[str, MemoryService] = {}

    def warm_up(self) -> None:
        args = hook_arguments(self._first["argv"])
        if args is not None:
            settings, _, _, session = _hook_call(args, self._first["stdin"], self._first["environ"], self._first["cwd"])
            self._service(settings).warm_up(session.user_id, session.agent_name)

    def answer(self, request: Any) -> dict[str, str]:
        out, said = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(said):
            args = None
            try:
                args = hook_arguments(request["argv"])
                if args is not None:
                    if self._shared is None:  # one request at a time: relative paths mean the caller's
                        os.chdir(request["cwd"])
                    settings, host, event, session = _hook_call(
                        args, request["stdin"], request["environ"], request["cwd"]
                    )
                    if settings.memory_server.url:
                        _print(
                            answer_remotely(
                                settings, host, args.hook_event, event, session, getattr(args, "max_tokens", None)
                            )
                        )
                    else:
                        _print_context(self._service(settings), args, host, event, session)
            except SystemExit:  # --help or --version: argparse wrote its text, as the command would
                pass
            except Exception as exc:  # the same promise as the hook itself
                event_name = getattr(args, "hook_event", "prompt")
                print(f"memory-mcp hook {event_name}: {one_line(exc)}", file=sys.stderr)
        return {"stdout": out.getvalue(), "stderr": said.getvalue()}

    def close(self) -> None:
        for service in self._services.values():
            service.close()

    def let_go(self) -> None:
        """Close the services, and with them the memory they loaded: what reading it again needs
        (the modules, numpy, the token encoding) stays loaded in the process."""
        self.close()
        self._services = {}

    def _service(self, settings: Settings) -> MemoryService:
        key = settings.model_dump_json()
        if self._shared is not None and key == self._shared.settings.model_dump_json():
            return self._shared
        service = self._services.pop(key, None)
        if service is None:
            service = MemoryService(settings, short_lived=True)
            if len(self._services) >= self.MAX_SERVICES:
                self._services.pop(next(iter(self._services))).close()
        self._services[key] = service  # the most recently used last
        return service


def prompt_helper(first_request: dict[str, Any]) -> _HookHelper:
    """The work of a hook helper started for `first_request` (hosts.helper.serve_told)."""
    return _HookHelper(first_request)


def shared_hooks(service: MemoryService) -> Callable[[dict[str, Any]], dict[str, str]]:
    """How the shared process answers prompt hooks: as the helper would, with its own service."""
    return _HookHelper({}, shared=service).answer


if __name__ == "__main__":
    raise SystemExit(serve_told(sys.argv[1:], prompt_helper))
