"""The `memory-mcp` command line's grammar: every command, its options and their help."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memory_mcp import __version__
from memory_mcp.hosts.installers import INSTALLERS
from memory_mcp.hosts.registry import HOST_NAMES
from memory_mcp.portability.history import KINDS as HISTORY_KINDS

DASHBOARD_PORT = 8766  # the HTTP server's default is 8765: both can run side by side
JSON_HELP = "print JSON for scripts instead of tables"
PROJECT_HELP = "only exchanges of this project (its folder's name, or its whole path)"
EVERY_USER_HELP = "only this user (default: every user)"


@dataclass(frozen=True)
class Commands:
    """Where commands are added (the top level's, or a command's own actions), each taking the
    options every command shares."""

    subparsers: argparse._SubParsersAction[argparse.ArgumentParser]
    shared: argparse.ArgumentParser

    def add(self, name: str, help_text: str, json: bool = True) -> argparse.ArgumentParser:
        """A command `name`; with `json`, its `--json` for scripts."""
        command = self.subparsers.add_parser(name, parents=[self.shared], help=help_text, description=help_text)
        if json:
            command.add_argument("--json", action="store_true", help=JSON_HELP)
        return command


def build_parser() -> argparse.ArgumentParser:
    shared = _shared_options()
    parser = _main_parser(shared)
    commands = Commands(parser.add_subparsers(dest="command", metavar="COMMAND"), shared)
    for add in GRAMMARS:
        add(commands)
    return parser


def _shared_options() -> argparse.ArgumentParser:
    """The options every command takes, wherever they stand on the line."""
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="JSON config file (see config.example.json)",
    )
    shared.add_argument(
        "--log-level",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        default=argparse.SUPPRESS,
        help="what to log on stderr (default: INFO when serving, WARNING otherwise); stdout carries only output",
    )
    return shared


def _main_parser(shared: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`memory-mcp` without a command: the MCP server, and how it listens."""
    parser = argparse.ArgumentParser(
        prog="memory-mcp",
        parents=[shared],
        description="Long-term memory for LLM agents, served over the Model Context Protocol (stdio). "
        "With a command, look after the stored memory instead.",
        epilog="Without --config the embedded defaults apply and data lives in $MEMORY_MCP_HOME or ~/.memory-mcp. "
        "OPENAI_API_KEY and OPENAI_BASE_URL fill the LLM settings the config leaves empty.",
    )
    parser.add_argument(
        "--transport",
        choices=["stdio", "streamable-http"],
        default="stdio",
        help="MCP transport (default: stdio); streamable-http serves many clients (see http.* settings)",
    )
    parser.add_argument("--host", help="with streamable-http: address to listen on (default: http.host, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="with streamable-http: port to listen on (default: http.port, 8765)")
    parser.add_argument("--version", action="version", version=f"memory-mcp {__version__}")
    return parser


def _add_users(commands: Commands) -> None:
    commands.add("users", "list users with their exchanges, facts and pending updates")


def _add_show(commands: Commands) -> None:
    show = commands.add("show", "show a user's profile, and optionally facts and recent exchanges")
    show.add_argument("user")
    show.add_argument("--agent", help="one of the user's agents")
    show.add_argument("--facts", action="store_true", help="also list the facts")
    show.add_argument("--pages", type=_count, default=0, metavar="N", help="also list the last N exchanges")
    show.add_argument("--project", help=PROJECT_HELP)


def _add_search(commands: Commands) -> None:
    search = commands.add("search", "search a user's exchanges (archived ones too) and facts")
    search.add_argument("user")
    search.add_argument("query")
    search.add_argument("--agent")
    search.add_argument("--limit", type=int, default=10)
    search.add_argument("--project", help=PROJECT_HELP)


def _add_export(commands: Commands) -> None:
    export = commands.add("export", "print everything stored for a user as one JSON document")
    export.add_argument("user")
    export.add_argument("--agent")


def _add_import(commands: Commands) -> None:
    restore = commands.add(
        "import",
        "import an export, a DeerFlow memory.json, a MemoryOS data directory, or past conversations: a ChatGPT "
        "or Claude.ai data export, Claude Code transcripts, Codex session files (recognised by their content)",
    )
    restore.add_argument(
        "source",
        type=Path,
        nargs="?",
        help="a JSON file, an export's .zip, a folder of sessions, or with --from-memoryos a MemoryOS data "
        "directory (optional with --format claude-code or codex: ~/.claude/projects, ~/.codex/sessions)",
    )
    restore.add_argument(
        "--format",
        choices=["export", *HISTORY_KINDS],
        help="read SOURCE as this instead of recognising it: export (memory-mcp's or DeerFlow's), chatgpt, "
        "claude-ai, claude-code, codex",
    )
    restore.add_argument("--user", help="import into this user id (with --from-memoryos: one user, renamed)")
    restore.add_argument("--mode", choices=["merge", "replace"], default="merge")
    restore.add_argument("--from-memoryos", action="store_true", help="SOURCE is a MemoryOS data_storage_path")
    restore.add_argument("--memoryos-user", metavar="ID", help="with --from-memoryos: import only this MemoryOS user")
    restore.add_argument("--assistant", help="MemoryOS assistant_id whose knowledge to bring (default: all)")
    restore.add_argument("--yes", action="store_true", help="with --mode replace: do not ask for confirmation")


def _add_embed(commands: Commands) -> None:
    embed_help = (
        "compute the embeddings exchanges lack (embeddings.backend 'local' or 'openai'). About 0.1 s an "
        "exchange on two cores with the local model, so 100,000 take hours; stop it any time (Ctrl-C) and "
        "run it again: it goes on where it stopped"
    )
    embed = commands.add("embed", embed_help)
    embed.add_argument("user", nargs="?", help=EVERY_USER_HELP)
    embed.add_argument("--agent", help="only this agent of the user")


def _add_dashboard(commands: Commands) -> None:
    dashboard = commands.add("dashboard", "serve the web dashboard on this machine, to see, search and correct memory")
    dashboard.add_argument(
        "--port", type=int, default=DASHBOARD_PORT, help=f"port on 127.0.0.1 (default {DASHBOARD_PORT})"
    )
    dashboard.add_argument(
        "--open", action="store_true", help="open it in the default browser, with the key it prints (see README)"
    )


def _add_forget(commands: Commands) -> None:
    forget = commands.add("forget", "erase everything stored for a user (or one agent), or one exchange")
    forget.add_argument("user")
    forget.add_argument("--agent")
    forget.add_argument(
        "--exchange", metavar="ID", help="erase only this exchange (its id as `show --pages N` and `search` list it)"
    )
    forget.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def _add_token(commands: Commands) -> None:
    token = commands.add("token", "issue, list or revoke the bearer tokens of the HTTP server", json=False)
    actions = Commands(token.add_subparsers(dest="token_action", metavar="ACTION", required=True), commands.shared)
    token_add = actions.add("add", "issue a token for a user; it is shown once and stored hashed")
    token_add.add_argument("user")
    token_add.add_argument("--label", default="", help="what the token is for (a host, a service...)")
    actions.add("list", "list issued tokens (ids, users, labels; never the tokens)")
    revoke = actions.add("revoke", "revoke a token by its id; running servers stop accepting it at once")
    revoke.add_argument("token_id")


def _add_flush(commands: Commands) -> None:
    flush = commands.add("flush", "run structured extraction now for everything pending")
    flush.add_argument("user", nargs="?", help=EVERY_USER_HELP)
    flush.add_argument("--agent")
    flush.add_argument(
        "--retry-failed", action="store_true", help="also retry exchanges set aside after repeated unusable replies"
    )


def _add_scrub(commands: Commands) -> None:
    scrub = commands.add("scrub", "replace secrets and private spans in what is already stored")
    scrub.add_argument("user", nargs="?", help="only this user and their agents (default: every user)")


def _add_hook(commands: Commands) -> None:
    hook_help = "agent hosts' hooks: a digest per session, what is relevant to each prompt, each reply remembered"
    hook = commands.add("hook", hook_help, json=False)
    events = Commands(hook.add_subparsers(dest="hook_event", metavar="EVENT", required=True), commands.shared)
    for name, help_text in (
        ("session-start", "for SessionStart: print the session's digest (profile, standing facts, latest work)"),
        ("prompt", "for UserPromptSubmit: print what memory holds that is relevant to the prompt, not given before"),
        ("stop", "for Stop: store the exchanges of the session's transcript that are not stored yet"),
    ):
        event = events.add(name, help_text, json=False)
        event.add_argument("--user", help="whose memory (default: the config's user_id)")
        event.add_argument("--agent", help="an agent's memory beside the user's (default: the config's assistant_id)")
        event.add_argument(
            "--host",
            dest="host_name",
            choices=HOST_NAMES,
            help="the host running the hook (default: recognised from what it sends)",
        )
        # Retired: each exchange records its project now. Accepted, so that hooks installed with it still run.
        event.add_argument("--project-agent", action="store_true", help=argparse.SUPPRESS)
        if name == "prompt":
            event.add_argument("--max-tokens", type=int, help="budget of the block (default: max_injection_tokens)")


def _add_init(commands: Commands) -> None:
    init = commands.add(
        "init", "write a config file with every setting at its default, each explained, to edit", json=False
    )
    init.add_argument(
        "--path",
        type=Path,
        help="where to write it (default: config.json in the data folder, read whenever no --config is given)",
    )
    init.add_argument("--force", action="store_true", help="replace a config file already there")


def _add_install(commands: Commands) -> None:
    install_help = "add memory-mcp to a host's settings: its hooks (automatic memory) and its MCP server entry"
    install = commands.add("install", install_help, json=False)
    install.add_argument("target", metavar="HOST", choices=sorted(INSTALLERS), help="the host to add memory-mcp to")
    install.add_argument(
        "--project", action="store_true", help="for this folder only (its own settings files), not everywhere"
    )
    install.add_argument(
        "--dry-run", action="store_true", help="print the lines each file would change; change nothing"
    )
    install.add_argument(
        "--command",
        dest="launch",
        metavar="COMMAND",
        help="how the host should start memory-mcp (default: this installation)",
    )


def _add_uninstall(commands: Commands) -> None:
    uninstall_help = "take memory-mcp out of a host's settings (what install added), keeping everything else"
    uninstall = commands.add("uninstall", uninstall_help, json=False)
    uninstall.add_argument("target", metavar="HOST", choices=sorted(INSTALLERS), help="the host to take it out of")
    uninstall.add_argument("--project", action="store_true", help="the entries install --project wrote here")
    uninstall.add_argument("--dry-run", action="store_true", help="print what would change; change nothing")


def _add_migrate(commands: Commands) -> None:
    move = commands.add("migrate", "copy all stored memory from one storage backend to the other, and verify it")
    move.add_argument("--from", dest="source", choices=["json", "postgres"], required=True, help="backend to read")
    move.add_argument("--to", dest="target", choices=["json", "postgres"], required=True, help="backend to fill")
    move.add_argument(
        "--resume", action="store_true", help="continue a migration that stopped, copying only what is missing"
    )


def _count(text: str) -> int:
    """A number of things to list: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number, 0 or more (got {text!r})")
    return value


# Every command's grammar, in the order `memory-mcp --help` lists them.
GRAMMARS: tuple[Callable[[Commands], None], ...] = (
    _add_users,
    _add_show,
    _add_search,
    _add_export,
    _add_import,
    _add_embed,
    _add_dashboard,
    _add_forget,
    _add_token,
    _add_flush,
    _add_scrub,
    _add_hook,
    _add_init,
    _add_install,
    _add_uninstall,
    _add_migrate,
)
