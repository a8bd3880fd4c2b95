"""The `memory-mcp` command: serve over MCP (the default), or look after memory from a shell.

This is the composition root: settings are read once here and handed to the service, which the
server and every subcommand share. Each command's work is in its group's module under
`cli/commands/`; the tables at the end say which function runs which command.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence

from memory_mcp import __version__
from memory_mcp.base.errors import MemoryServiceError
from memory_mcp.base.phrases import extraction_said
from memory_mcp.base.projects import project_of
from memory_mcp.base.settings import ConfigError, Settings, load_settings
from memory_mcp.cli.commands import browse, dashboard, forgetting, portability, setup, upkeep
from memory_mcp.cli.entry import command_words
from memory_mcp.cli.hook_command import hook_arguments, run_hook
from memory_mcp.cli.parser import build_parser
from memory_mcp.service.memory_service import MemoryService

log = logging.getLogger("memory_mcp")


def main(argv: Sequence[str] | None = None, keep_hook_helper: bool = False) -> int:
    """The command line; `keep_hook_helper`: a prompt hook answered here leaves a hook helper
    behind (the real command does; a caller running hooks in its own process must not fork)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if command_words(arguments)[:1] == ["hook"]:
        args = hook_arguments(arguments)
        if args is None:
            return 0
    else:
        args = build_parser().parse_args(arguments)
    level = getattr(args, "log_level", None) or ("INFO" if args.command is None else "WARNING")
    # stdout belongs to the protocol (or the command's output): every log line goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=level, format="%(levelname)s %(name)s: %(message)s")
    # One line per LLM request is noise at INFO; failures are logged by the updater itself.
    for chatty in ("httpx", "httpx2"):
        logging.getLogger(chatty).setLevel(max(logging.WARNING, logging.getLevelName(level)))
    if args.command == "hook":
        return run_hook(args, arguments, keep_hook_helper)
    if args.command == "init":
        return _reporting_errors("init", lambda: setup.init(args))
    try:
        settings = load_settings(getattr(args, "config", None))
    except ConfigError as exc:
        print(f"memory-mcp: {exc}", file=sys.stderr)
        return 2
    if args.command is None and args.transport == "stdio" and (args.host or args.port):
        print("memory-mcp: --host and --port go with --transport streamable-http", file=sys.stderr)
        return 2
    settings.http = settings.http.model_copy(
        update={name: value for name, value in (("host", args.host), ("port", args.port)) if value is not None}
    )
    if args.command in STORELESS_COMMANDS:
        return _reporting_errors(args.command, lambda: STORELESS_COMMANDS[args.command](settings, args))
    if args.command is None and args.transport == "stdio" and settings.memory_server.url:
        return serve_remotely(settings)
    try:
        service = MemoryService(settings)  # opens the store: a database may be unreachable
    except MemoryServiceError as exc:
        print(f"memory-mcp: {exc}", file=sys.stderr)
        return 1
    if args.command is None:
        return serve(service, args.transport)
    try:
        return _reporting_errors(args.command, lambda: COMMANDS[args.command](service, args))
    finally:
        service.close()


def _reporting_errors(command: str, run: Callable[[], int]) -> int:
    """A command's deliberate errors become one line on stderr and exit status 1."""
    try:
        return run()
    except MemoryServiceError as exc:
        print(f"memory-mcp {command}: {exc}", file=sys.stderr)
        return 1


def serve(service: MemoryService, transport: str) -> int:
    import anyio

    from memory_mcp.mcp.server import build_server
    from memory_mcp.mcp.stdio import serve_stdio

    settings = service.settings
    log.info(
        "memory-mcp %s on %s; data in %s; %s",
        __version__,
        transport,
        service.location,
        extraction_said("server" if service.extraction_on else "host", settings.llm_model),
    )
    if settings.memory.enabled and settings.llm_endpoint_set and settings.llm_model is None:
        log.warning("an LLM endpoint is set but llm_model is not: no extraction until it names the model to ask")
    if transport == "streamable-http":
        return _serve_http(service)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, functools.partial(_flush_and_exit, service))
    service.start()
    try:
        # A host starts its stdio server in the folder it works in: that is the calls' project.
        anyio.run(serve_stdio, build_server(service, default_project=project_of(os.getcwd())))
    finally:
        service.close()
    return 0


def serve_remotely(settings: Settings) -> int:
    """Serve this stdio session through the team's memory server: no memory is loaded here."""
    import anyio

    from memory_mcp.mcp.remote_bridge import serve_remotely as bridge

    log.info("memory-mcp %s on stdio; memory on the server at %s", __version__, settings.memory_server.url)
    anyio.run(bridge, settings.memory_server, project_of(os.getcwd()))
    return 0


def _serve_http(service: MemoryService) -> int:
    """Serve over HTTP; uvicorn turns SIGTERM/SIGINT into a graceful stop (open requests finish),
    after which pending updates get their bounded flush here."""
    from memory_mcp.hosts.remote import HOOKS_PATH
    from memory_mcp.hosts.remote_api import hooks_app
    from memory_mcp.mcp.http import HttpSetupError, run_http

    # uvicorn handles the stop signal, then restores these handlers and raises it again: with the
    # default ones the process would die there, before pending updates get their flush below.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    try:
        run_http(service, service.settings.http, (HOOKS_PATH, hooks_app))
    except (HttpSetupError, MemoryServiceError) as exc:
        print(f"memory-mcp: {exc}", file=sys.stderr)
        return 2
    finally:
        left = service.close()
        log.info("stopped; %s", f"{left} memory updates left to resume at next start" if left else "nothing pending")
    return 0


def _flush_and_exit(service: MemoryService, signum: int, frame: object) -> None:
    """Give pending updates their bounded flush, then leave at once.

    An orderly return cannot be had here: the SDK reads stdin in a thread blocked in read(),
    which would keep the process alive until the host closes the pipe. Leaving abruptly loses
    nothing: every acknowledged exchange is already on disk, and unfinished updates resume at
    the next start.
    """
    log.info("%s: finishing pending memory updates, then exiting", signal.Signals(signum).name)
    service.close()
    logging.shutdown()
    os._exit(0)


# Each command is a thin wrapper over the service, the same core the MCP tools call.
COMMANDS: dict[str, Callable[[MemoryService, argparse.Namespace], int]] = {
    "users": browse.users,
    "show": browse.show,
    "search": browse.search,
    "export": portability.export_memory,
    "import": portability.import_memory,
    "forget": forgetting.forget,
    "flush": upkeep.flush,
    "scrub": forgetting.scrub,
    "embed": upkeep.embed,
    "dashboard": dashboard.serve_dashboard,
}
# Commands that open no memory store through the service: the token file, or both backends at once.
STORELESS_COMMANDS: dict[str, Callable[[Settings, argparse.Namespace], int]] = {
    "token": setup.token,
    "install": setup.install,
    "uninstall": setup.uninstall,
    "migrate": portability.migrate,
}
