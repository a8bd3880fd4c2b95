"""The `memory-mcp` command line's grammar: every command, its options and their help."""

from __future__ import annotations

import argparse
from pathlib import Path

from memory_mcp import __version__

DASHBOARD_PORT = 8766  # the HTTP server's default is 8765: both can run side by side


def build_parser() -> argparse.ArgumentParser:
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
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[shared], help=help_text, description=help_text)
        sub.add_argument("--json", action="store_true", help="print JSON for scripts instead of tables")
        return sub

    command("users", "list users with their exchanges, facts and pending updates")
    show = command("show", "show a user's profile, and optionally facts and recent exchanges")
    show.add_argument("user")
    show.add_argument("--agent", help="one of the user's agents")
    show.add_argument("--facts", action="store_true", help="also list the facts")
    show.add_argument("--pages", type=_count, default=0, metavar="N", help="also list the last N exchanges")
    show.add_argument("--project", help="only exchanges of this project (its folder's name, or its whole path)")
    search = command("search", "search a user's exchanges (archived ones too) and facts")
    search.add_argument("user")
    search.add_argument("query")
    search.add_argument("--agent")
    search.add_argument("--limit", type=int, default=10)
    search.add_argument("--project", help="only exchanges of this project (its folder's name, or its whole path)")
    export = command("export", "print everything stored for a user as one JSON document")
    export.add_argument("user")
    export.add_argument("--agent")
    restore = command("import", "import an export, a DeerFlow memory.json, or a MemoryOS data directory")
    restore.add_argument("source", type=Path, help="a JSON file, or with --from-memoryos a MemoryOS data directory")
    restore.add_argument("--user", help="import into this user id (with --from-memoryos: one user, renamed)")
    restore.add_argument("--mode", choices=["merge", "replace"], default="merge")
    restore.add_argument("--from-memoryos", action="store_true", help="SOURCE is a MemoryOS data_storage_path")
    restore.add_argument("--memoryos-user", metavar="ID", help="with --from-memoryos: import only this MemoryOS user")
    restore.add_argument("--assistant", help="MemoryOS assistant_id whose knowledge to bring (default: all)")
    restore.add_argument("--yes", action="store_true", help="with --mode replace: do not ask for confirmation")
    embed_help = (
        "compute the embeddings exchanges lack (embeddings.backend 'local' or 'openai'). About 0.1 s an "
        "exchange on two cores with the local model, so 100,000 take hours; stop it any time (Ctrl-C) and "
        "run it again: it goes on where it stopped"
    )
    embed = command("embed", embed_help)
    embed.add_argument("user", nargs="?", help="only this user (default: every user)")
    embed.add_argument("--agent", help="only this agent of the user")
    dashboard = command("dashboard", "serve the web dashboard on this machine, to see, search and correct memory")
    dashboard.add_argument(
        "--port", type=int, default=DASHBOARD_PORT, help=f"port on 127.0.0.1 (default {DASHBOARD_PORT})"
    )
    dashboard.add_argument(
        "--open", action="store_true", help="open it in the default browser, with the key it prints (see README)"
    )
    forget = command("forget", "erase everything stored for a user (or one agent), or one exchange")
    forget.add_argument("user")
    forget.add_argument("--agent")
    forget.add_argument(
        "--exchange", metavar="ID", help="erase only this exchange (its id as `show --pages N` and `search` list it)"
    )
    forget.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    token_help = "issue, list or revoke the bearer tokens of the HTTP server"
    token = commands.add_parser("token", parents=[shared], help=token_help, description=token_help)
    token_actions = token.add_subparsers(dest="token_action", metavar="ACTION", required=True)

    def token_action(name: str, help_text: str) -> argparse.ArgumentParser:
        action = token_actions.add_parser(name, parents=[shared], help=help_text, description=help_text)
        action.add_argument("--json", action="store_true", help="print JSON for scripts instead of tables")
        return action

    token_add = token_action("add", "issue a token for a user; it is shown once and stored hashed")
    token_add.add_argument("user")
    token_add.add_argument("--label", default="", help="what the token is for (a host, a service...)")
    token_action("list", "list issued tokens (ids, users, labels; never the tokens)")
    revoke = token_action("revoke", "revoke a token by its id; running servers stop accepting it at once")
    revoke.add_argument("token_id")
    flush = command("flush", "run structured extraction now for everything pending")
    flush.add_argument("user", nargs="?", help="only this user (default: every user)")
    flush.add_argument("--agent")
    flush.add_argument(
        "--retry-failed", action="store_true", help="also retry exchanges set aside after repeated unusable replies"
    )
    scrub = command("scrub", "replace secrets and private spans in what is already stored")
    scrub.add_argument("user", nargs="?", help="only this user and their agents (default: every user)")
    hook_help = "Claude Code hooks: a digest per session, what is relevant to each prompt, each reply remembered"
    hook = commands.add_parser("hook", parents=[shared], help=hook_help, description=hook_help)
    events = hook.add_subparsers(dest="hook_event", metavar="EVENT", required=True)
    for name, help_text in (
        ("session-start", "for SessionStart: print the session's digest (profile, standing facts, latest work)"),
        ("prompt", "for UserPromptSubmit: print what memory holds that is relevant to the prompt, not given before"),
        ("stop", "for Stop: store the exchanges of the session's transcript that are not stored yet"),
    ):
        event = events.add_parser(name, parents=[shared], help=help_text, description=help_text)
        event.add_argument("--user", help="whose memory (default: the config's user_id)")
        event.add_argument("--agent", help="an agent's memory beside the user's (default: the config's assistant_id)")
        # Retired: each exchange records its project now. Accepted, so that hooks installed with it still run.
        event.add_argument("--project-agent", action="store_true", help=argparse.SUPPRESS)
        if name == "prompt":
            event.add_argument("--max-tokens", type=int, help="budget of the block (default: max_injection_tokens)")
    init_help = "write a config file with every setting at its default, each explained, to edit"
    init = commands.add_parser("init", parents=[shared], help=init_help, description=init_help)
    init.add_argument(
        "--path",
        type=Path,
        help="where to write it (default: config.json in the data folder, read whenever no --config is given)",
    )
    init.add_argument("--force", action="store_true", help="replace a config file already there")
    install_help = "add memory-mcp to a host's settings: its MCP server entry, and for Claude Code its hooks"
    install = commands.add_parser("install", parents=[shared], help=install_help, description=install_help)
    install.add_argument("target", metavar="HOST", choices=["claude-code"], help="the host to add memory-mcp to")
    install.add_argument(
        "--project", action="store_true", help="for this folder only (its .claude/settings.local.json), not everywhere"
    )
    install.add_argument("--dry-run", action="store_true", help="print what the files would hold; change nothing")
    install.add_argument(
        "--command",
        dest="launch",
        metavar="COMMAND",
        help="how the host should start memory-mcp (default: this installation)",
    )
    move = command("migrate", "copy all stored memory from one storage backend to the other, and verify it")
    move.add_argument("--from", dest="source", choices=["json", "postgres"], required=True, help="backend to read")
    move.add_argument("--to", dest="target", choices=["json", "postgres"], required=True, help="backend to fill")
    move.add_argument(
        "--resume", action="store_true", help="continue a migration that stopped, copying only what is missing"
    )
    return parser


def _count(text: str) -> int:
    """A number of things to list: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number, 0 or more (got {text!r})")
    return value
