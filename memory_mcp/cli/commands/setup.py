"""Commands that set memory-mcp up: `init` (a config file), `install` (into a host's settings),
`token` (the HTTP server's bearer tokens)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from memory_mcp.base.environment import default_config_path
from memory_mcp.base.settings import Settings
from memory_mcp.cli.commands.output import console, emit, print_json
from memory_mcp.hosts import settings_files
from memory_mcp.hosts.installers import INSTALLERS
from memory_mcp.hosts.settings_files import SettingsChange


def init(args: argparse.Namespace) -> int:
    """Before any settings are read: the config there may be the broken one being replaced."""
    path = settings_files.write_config_template(
        (args.path or default_config_path()).expanduser().absolute(), args.force
    )
    print(f'wrote {path}: every setting at its default, each explained by the "// name" line above it')
    if args.path is None:
        print("memory-mcp reads it whenever it is started without --config")
    else:
        print(f"start memory-mcp with --config {path} to use it")
    return 0


def install(settings: Settings, args: argparse.Namespace) -> int:
    installer = INSTALLERS[args.target]
    command = shlex.split(args.launch) if args.launch else settings_files.memory_command()
    config = getattr(args, "config", None)
    changes = installer.changes(Path.home(), Path.cwd() if args.project else None, command, config)
    if _written(changes, args.dry_run, "memory-mcp is already in it"):
        print(installer.after_install)
    elif any(change.changed for change in changes):  # a dry run: what the user will have to do then
        print("# then:", *(f"# {line}" for line in installer.after_install.splitlines()), sep="\n")
    return 0


def uninstall(settings: Settings, args: argparse.Namespace) -> int:
    installer = INSTALLERS[args.target]
    changes = installer.removal(Path.home(), Path.cwd() if args.project else None)
    _written(changes, args.dry_run, "memory-mcp is not in it")
    return 0


def _written(changes: list[SettingsChange], dry_run: bool, unchanged_because: str) -> bool:
    """Write the changes (each changed file copied aside first) and say so; or, on a dry run, show
    the lines each would change and write nothing. True when files were written."""
    if dry_run:
        for change in changes:
            if not change.changed:
                print(f"# {change.path}: unchanged ({unchanged_because})")
                continue
            state = "would be removed" if change.content is None else "would change"
            print(f"# {change.path}: {state}", *change.diff(), sep="\n")
        return False
    for change in settings_files.apply(changes):
        saved = f"; the old file is kept as {change.backup}" if change.backup else ""
        if not change.changed:
            print(f"unchanged {change.path} ({unchanged_because})")
        elif change.content is None:
            print(f"removed {change.path}{saved}")
        else:
            print(f"updated {change.path}{saved}")
    return True


def token(settings: Settings, args: argparse.Namespace) -> int:
    from memory_mcp.service.access import TokenRegistry  # with the MCP SDK: not loaded for the other commands

    assert settings.http.tokens_file is not None  # load_settings fills in the default
    registry = TokenRegistry(settings.http.tokens_file)
    if args.token_action == "add":
        issued = registry.issue(args.user, args.label)
        if args.json:
            return print_json(issued.model_dump(mode="json", exclude={"record": {"sha256"}}))
        print(issued.token)
        print(
            f"token {issued.record.token_id} for user {issued.record.user_id}: shown this once, stored hashed in "
            f"{registry.path}. Clients send it as: Authorization: Bearer <token>",
            file=sys.stderr,
        )
        return 0
    if args.token_action == "revoke":
        revoked = registry.revoke(args.token_id)
        return emit(args, revoked, lambda: print(f"revoked {revoked.token_id} (user {revoked.user_id})"))
    records = registry.records()
    if args.json:
        return print_json([record.model_dump(mode="json", exclude={"sha256"}) for record in records])
    console().tokens(records, registry.path)
    return 0
