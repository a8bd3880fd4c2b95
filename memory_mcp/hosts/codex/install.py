"""Setting memory-mcp up in Codex CLI: the three hooks in its hooks.json and the MCP server in its
config.toml.

Codex reads hooks from ~/.codex/hooks.json (for the user) and <project>/.codex/hooks.json (for a
trusted project), in the same shape as Claude Code's settings' `hooks`, so the entries are merged
and taken out the way Claude Code's are, each command naming `--host codex`. The server is the
`[mcp_servers.memory-mcp]` table of ~/.codex/config.toml (or the project's .codex/config.toml),
edited in place: the user's comments, layout and other tables are kept.

Codex runs a hook only once the user has trusted it: it keeps, in config.toml, a hash of each
handler as it was reviewed, so a handler installed (or changed) here waits for the user's review
in the TUI's /hooks. The hash is not written for the user: trusting a command is theirs to do.
"""

from __future__ import annotations

from pathlib import Path

import tomlkit

from memory_mcp.base.environment import SETTINGS_VARIABLES
from memory_mcp.hosts.hook_entries import SERVER_NAME, config_options, with_hooks, without_hooks
from memory_mcp.hosts.settings_files import SettingsChange, change_file, change_toml, removal_from

HOST_FLAGS = ["--host", "codex"]  # Codex's payloads are recognised anyway; named, nothing is guessed
AFTER_INSTALL = """\
Codex runs a new or changed hook only once you trust it: start `codex`, open /hooks, choose
"Review hook trust" and trust the three memory-mcp hooks (Codex keeps a hash of each command in
~/.codex/config.toml; reinstalling with another command asks again)."""


def hooks_file(home: Path, project: Path | None) -> Path:
    return home / ".codex" / "hooks.json" if project is None else project / ".codex" / "hooks.json"


def config_file(home: Path, project: Path | None) -> Path:
    return (home if project is None else project) / ".codex" / "config.toml"


def _with_server(config: tomlkit.TOMLDocument, command: list[str], options: list[str]) -> None:
    """Our server's table, its command, arguments and forwarded variables set; anything the user
    added to it (env) kept. Codex gives a server only a few variables of its own environment
    (PATH, HOME, ...): without `env_vars`, a MEMORY_MCP_HOME the hooks see would not reach the
    server, and the tools would use another memory than the hooks."""
    servers = config.setdefault("mcp_servers", tomlkit.table(is_super_table=True))
    ours = {"command": command[0], "args": [*command[1:], *options], "env_vars": list(SETTINGS_VARIABLES)}
    if SERVER_NAME in servers:
        given = [name for name in servers[SERVER_NAME].get("env_vars", []) if name not in SETTINGS_VARIABLES]
        servers[SERVER_NAME].update(ours | {"env_vars": [*given, *SETTINGS_VARIABLES]})
        return
    server = tomlkit.table()
    server.update(ours)
    server.add(tomlkit.nl())  # a blank line before whatever table follows
    servers[SERVER_NAME] = server


def _without_server(config: tomlkit.TOMLDocument) -> None:
    servers = config.get("mcp_servers")
    if isinstance(servers, dict) and SERVER_NAME in servers:
        del servers[SERVER_NAME]
        if not servers:
            del config["mcp_servers"]


class CodexInstaller:
    """Codex CLI: the three hooks in its hooks.json, the server in its config.toml, for the user or
    one project."""

    name = "codex"
    after_install = AFTER_INSTALL

    def changes(
        self, home: Path, project: Path | None, command: list[str], config: Path | None
    ) -> list[SettingsChange]:
        options = config_options(config)
        flags = [*HOST_FLAGS, *options]
        return [
            change_file(hooks_file(home, project), lambda hooks: with_hooks(hooks, command, flags)),
            change_toml(config_file(home, project), lambda config: _with_server(config, command, options)),
        ]

    def removal(self, home: Path, project: Path | None) -> list[SettingsChange]:
        return [
            removal_from(hooks_file(home, project), without_hooks),
            change_toml(config_file(home, project), _without_server),
        ]
