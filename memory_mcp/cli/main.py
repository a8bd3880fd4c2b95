"""The `memory-mcp` command: serve over MCP (the default), or look after memory from a shell.

This is the composition root: settings are read once here and handed to the service, which the
server and every subcommand share.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from memory_mcp import __version__
from memory_mcp.base.environment import default_config_path
from memory_mcp.base.errors import InvalidInput, MemoryServiceError, NotFound
from memory_mcp.base.ids import validate_identifier
from memory_mcp.base.projects import project_name, project_of
from memory_mcp.base.settings import ConfigError, Settings, load_settings
from memory_mcp.base.wording import extraction_said, plural
from memory_mcp.cli.entry import command_words
from memory_mcp.cli.hook_command import hook_arguments, run_hook
from memory_mcp.cli.parser import build_parser
from memory_mcp.hosts.claude_code import install as claude_code_install
from memory_mcp.models import (
    ExportRequest,
    FlushRequest,
    ForgetExchangeRequest,
    ForgetExchangeResult,
    ForgetRequest,
    ForgetResult,
    ImportRequest,
    Page,
    ProfileRequest,
    RetrieveMemoryRequest,
    SearchFactsRequest,
)
from memory_mcp.portability.documents import parse_import
from memory_mcp.portability.memoryos import from_memoryos
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
        return _reporting_errors("init", lambda: _init(args))
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


def _serve_http(service: MemoryService) -> int:
    """Serve over HTTP; uvicorn turns SIGTERM/SIGINT into a graceful stop (open requests finish),
    after which pending updates get their bounded flush here."""
    from memory_mcp.mcp.http import HttpSetupError, run_http

    # uvicorn handles the stop signal, then restores these handlers and raises it again: with the
    # default ones the process would die there, before pending updates get their flush below.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    try:
        run_http(service, service.settings.http)
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


# --- commands -------------------------------------------------------------------------------
# Each is a thin wrapper over the service, the same core the MCP tools call.


def _users(service: MemoryService, args: argparse.Namespace) -> int:
    result = service.memory_status()
    return _emit(args, result, lambda: _console().status(result))


def _require_stored(service: MemoryService, user: str, agent: str | None) -> None:
    """The user (and agent) the command line names: valid ids, with memory stored."""
    try:
        validate_identifier("user_id", user)
        if agent is not None:
            validate_identifier("--agent", agent)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    if not service.is_stored(user, agent):
        who = user + (f"/{agent}" if agent else "")
        raise NotFound(f"nothing is stored for {who}; `memory-mcp users` lists the users with memory")


def _show(service: MemoryService, args: argparse.Namespace) -> int:
    _require_stored(service, args.user, args.agent)
    profile = service.get_user_profile(
        ProfileRequest.build(user_id=args.user, agent_name=args.agent, include_knowledge=args.facts)
    )
    if args.project is None:
        pages = service.latest_pages(profile.user_id, profile.agent_name, args.pages)
    else:
        newest, _ = service.find_pages(profile.user_id, profile.agent_name, _in_project(args.project), args.pages)
        pages = newest[::-1]
    if args.json:
        return _print_json(
            {"profile": profile.model_dump(mode="json"), "pages": [p.model_dump(mode="json") for p in pages]}
        )
    _console().profile(profile, pages)
    return 0


def _search(service: MemoryService, args: argparse.Namespace) -> int:
    _require_stored(service, args.user, args.agent)
    identity = {"user_id": args.user, "agent_name": args.agent}
    pages = service.search_exchanges(RetrieveMemoryRequest.build(query=args.query, max_results=args.limit, **identity))
    if args.project is not None:
        pages = [page for page in pages if _in_project(args.project)(page)]
    facts = service.search_facts(SearchFactsRequest.build(query=args.query, limit=args.limit, **identity))
    if args.json:
        return _print_json(
            {"pages": [page.model_dump(mode="json") for page in pages], "facts": facts.model_dump(mode="json")["facts"]}
        )
    _console().search(args.query, pages, facts)
    return 0


def _in_project(project: str) -> Callable[[Page], bool]:
    """Whether an exchange belongs to `project`: its whole path, or its folder's name."""
    return lambda page: page.project is not None and project in (page.project, project_name(page.project))


def _export(service: MemoryService, args: argparse.Namespace) -> int:
    _require_stored(service, args.user, args.agent)
    return _print_json(
        service.export_memory(ExportRequest.build(user_id=args.user, agent_name=args.agent)).model_dump(mode="json")
    )


def _import(service: MemoryService, args: argparse.Namespace) -> int:
    if args.from_memoryos:
        converted = from_memoryos(args.source, args.memoryos_user, args.assistant, rename_to=args.user)
        documents = [document.model_dump(mode="json") for document in converted]
        target = None
    else:
        try:
            documents = [json.loads(args.source.read_text(encoding="utf-8"))]
        except (OSError, ValueError) as exc:
            raise InvalidInput(f"{args.source} could not be read as JSON ({exc})") from None
        if not isinstance(documents[0], dict):
            raise InvalidInput(f"{args.source} must hold a JSON object")
        target = args.user
    requests = [ImportRequest.build(data=document, mode=args.mode, user_id=target) for document in documents]
    # every document is checked before any is written
    users = [parse_import(request.data, request.user_id, service.settings.user_id).user_id for request in requests]
    if (
        args.mode == "replace"
        and not args.yes
        and not _confirmed(f"Replace everything stored for {', '.join(users)}", users)
    ):
        print("memory-mcp import: not confirmed; nothing was changed", file=sys.stderr)
        return 1
    results = [service.import_memory(request) for request in requests]
    if args.json:
        return _print_json([result.model_dump(mode="json") for result in results])
    for result in results:
        _console().out.print(f"{result.user_id}: {result.message}")
    return 0


def _confirmed(question: str, users: list[str]) -> bool:
    """Whether the person at the terminal typed the user id (or, for several, `yes`) to confirm."""
    if not sys.stdin.isatty():
        raise InvalidInput("pass --yes to do this without being asked (no terminal to ask on)")
    expected = users[0] if len(users) == 1 else "yes"
    # On stderr: stdout may be a file (--json > out.json), and the question must reach the person.
    print(f"{question}? Type {'the user id' if len(users) == 1 else 'yes'} to confirm: ", end="", file=sys.stderr)
    sys.stderr.flush()
    return sys.stdin.readline().strip() == expected


def _forget(service: MemoryService, args: argparse.Namespace) -> int:
    _require_stored(service, args.user, args.agent)
    scope = args.user + (f"/{args.agent}" if args.agent else "")
    what = f"exchange {args.exchange} of {scope}" if args.exchange else f"everything stored for {scope}"
    if not args.exchange and not args.agent:
        what += " and all their agents"
    if not args.yes and not _confirmed(f"Erase {what}", [args.user]):
        print("memory-mcp forget: not confirmed; nothing was erased", file=sys.stderr)
        return 1
    result: ForgetResult | ForgetExchangeResult
    if args.exchange:
        result = service.forget_exchange(
            ForgetExchangeRequest.build(user_id=args.user, agent_name=args.agent, exchange_id=args.exchange)
        )
    else:
        result = service.forget(ForgetRequest.build(user_id=args.user, agent_name=args.agent, confirm=args.user))
    return _emit(args, result, lambda: _console().change(result))


def _embed(service: MemoryService, args: argparse.Namespace) -> int:
    if args.user:
        _require_stored(service, args.user, args.agent)

    began = time.monotonic()

    def progress(scope: Any, done: int, total: int) -> None:
        # Tens of thousands of exchanges take hours on a laptop's CPU: say how long is left.
        elapsed = time.monotonic() - began
        left = f", about {_duration(elapsed * (total - done) / done)} left" if done < total else ""
        print(f"\r{scope.describe()}: {done}/{total} embedded{left}\033[K", end="", file=sys.stderr, flush=True)

    stored = 0
    try:
        for user in [args.user] if args.user else service.list_users():
            began = time.monotonic()
            added = service.embed_missing(user, args.agent, progress)
            stored += added
            if added:
                print(file=sys.stderr)  # after the progress line
    except KeyboardInterrupt:
        print(f"\nstopped after {plural(stored, 'exchange')}: run it again to go on", file=sys.stderr)
        return 130
    print(f"{plural(stored, 'exchange')} embedded")
    return 0


def _dashboard(service: MemoryService, args: argparse.Namespace) -> int:
    """Serve the dashboard on the loopback interface until interrupted, to this account alone:
    every account on the machine can reach 127.0.0.1, only this one sees the key printed here."""
    import secrets
    from contextlib import nullcontext

    import uvicorn

    from memory_mcp.dashboard.app import create_app
    from memory_mcp.dashboard.opening import opened_in_browser

    key = secrets.token_urlsafe(32)
    url = f"http://127.0.0.1:{args.port}/?key={key}"
    # The one place the key is written: uvicorn's access log (which would hold it too) stays off.
    print(f"memory-mcp dashboard on {url} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    with opened_in_browser(url) if args.open else nullcontext():
        uvicorn.run(
            create_app(service, owner_key=key), host="127.0.0.1", port=args.port, log_level="warning", access_log=False
        )
    return 0


def _duration(seconds: float) -> str:
    """A rough span of time, as a person reads it: 40 s, 12 min, 3 h 10 min."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def _scrub(service: MemoryService, args: argparse.Namespace) -> int:
    result = service.scrub(args.user)
    return _emit(args, result, lambda: _console().change(result))


def _flush(service: MemoryService, args: argparse.Namespace) -> int:
    if args.user:
        _require_stored(service, args.user, args.agent)
    users = [args.user] if args.user else service.list_users()
    results = [
        service.flush_memory(FlushRequest.build(user_id=user, agent_name=args.agent, retry_failed=args.retry_failed))
        for user in users
    ]
    if args.json:
        return _print_json([result.model_dump(mode="json") for result in results])
    for result in results:
        _console().change(result)
    if not results:
        _console().out.print("no users: nothing to flush")
    return 0 if all(not result.errors for result in results) else 1


def _migrate(settings: Settings, args: argparse.Namespace) -> int:
    """Both backends come from the one config (the JSON files at data_storage_path, the database at
    storage.dsn), whichever of them storage.backend names; each is opened here, once."""
    from memory_mcp.portability.backend_copy import backend_settings, copy_memory, open_backend

    if args.source == args.target:
        raise InvalidInput(f"--from and --to must name different backends (both are {args.source})")
    source, target = (backend_settings(settings, name) for name in (args.source, args.target))
    with open_backend(source) as reading, open_backend(target) as writing, open_backend(target) as checking:
        report = copy_memory(reading, writing, checking, resume=args.resume)
    return _emit(args, report, lambda: _console().migration(report, f"{args.source} -> {args.target}"))


def _init(args: argparse.Namespace) -> int:
    """Before any settings are read: the config there may be the broken one being replaced."""
    path = claude_code_install.write_config_template(
        (args.path or default_config_path()).expanduser().absolute(), args.force
    )
    print(f'wrote {path}: every setting at its default, each explained by the "// name" line above it')
    if args.path is None:
        print("memory-mcp reads it whenever it is started without --config")
    else:
        print(f"start memory-mcp with --config {path} to use it")
    return 0


def _install(settings: Settings, args: argparse.Namespace) -> int:
    command = shlex.split(args.launch) if args.launch else claude_code_install.memory_command()
    config = getattr(args, "config", None)
    changes = claude_code_install.claude_code_changes(
        Path.home(), Path.cwd() if args.project else None, command, config
    )
    if args.dry_run:
        for change in changes:
            state = "would change" if change.changed else "unchanged"
            print(f"# {change.path} ({state}): our entries\n{json.dumps(change.ours, indent=2, ensure_ascii=False)}")
        return 0
    for change in claude_code_install.apply(changes):
        if change.changed:
            saved = f"; the old file is kept as {change.backup}" if change.backup else ""
            print(f"updated {change.path}{saved}")
        else:
            print(f"unchanged {change.path} (memory-mcp is already in it)")
    print("Restart Claude Code (or open /hooks) to load the hooks.")
    return 0


def _token(settings: Settings, args: argparse.Namespace) -> int:
    from memory_mcp.service.access import TokenRegistry  # with the MCP SDK: not loaded for the other commands

    assert settings.http.tokens_file is not None  # load_settings fills in the default
    registry = TokenRegistry(settings.http.tokens_file)
    if args.token_action == "add":
        issued = registry.issue(args.user, args.label)
        if args.json:
            return _print_json(issued.model_dump(mode="json", exclude={"record": {"sha256"}}))
        print(issued.token)
        print(
            f"token {issued.record.token_id} for user {issued.record.user_id}: shown this once, stored hashed in "
            f"{registry.path}. Clients send it as: Authorization: Bearer <token>",
            file=sys.stderr,
        )
        return 0
    if args.token_action == "revoke":
        revoked = registry.revoke(args.token_id)
        return _emit(args, revoked, lambda: print(f"revoked {revoked.token_id} (user {revoked.user_id})"))
    records = registry.records()
    if args.json:
        return _print_json([record.model_dump(mode="json", exclude={"sha256"}) for record in records])
    _console().tokens(records, registry.path)
    return 0


COMMANDS: dict[str, Callable[[MemoryService, argparse.Namespace], int]] = {
    "users": _users,
    "show": _show,
    "search": _search,
    "export": _export,
    "import": _import,
    "forget": _forget,
    "flush": _flush,
    "scrub": _scrub,
    "embed": _embed,
    "dashboard": _dashboard,
}
# Commands that open no memory store through the service: the token file, or both backends at once.
STORELESS_COMMANDS: dict[str, Callable[[Settings, argparse.Namespace], int]] = {
    "token": _token,
    "install": _install,
    "migrate": _migrate,
}


def _emit(args: argparse.Namespace, result: BaseModel, render: Callable[[], None]) -> int:
    if args.json:
        return _print_json(result.model_dump(mode="json"))
    render()
    return 0


def _console() -> Any:
    """The table renderer, imported only by commands that print tables (rich is not light)."""
    from memory_mcp.cli import rendering

    return rendering


def _print_json(value: Any) -> int:
    print(json.dumps(value, ensure_ascii=False, indent=2))
    return 0
