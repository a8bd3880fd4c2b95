"""Setting memory-mcp up: its own config file to edit, and its entries in Claude Code's settings
(the MCP server and the three hooks).

Claude Code reads hooks from settings files (the user's ~/.claude/settings.json, or a project's
.claude/settings.local.json) and MCP servers from ~/.claude.json (for the user, or under
"projects" for one project).
Installing merges our entries into those files and leaves everything else in them as it was;
installing again replaces our entries in place, so it never adds a second copy. A file that is
changed is first copied aside, and a file that is not valid JSON is never touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memory_mcp.hosts.hook_entries import (
    config_options,
    with_hooks,
    with_server,
    without_hooks,
    without_server,
)
from memory_mcp.hosts.settings_files import SettingsChange, change_file, json_object, removal_from


def claude_code_changes(
    home: Path, project: Path | None, command: list[str], config: Path | None
) -> list[SettingsChange]:
    """What installing into Claude Code would make of its settings files (nothing is written).

    For the user: ~/.claude/settings.json and ~/.claude.json. For one project: its
    .claude/settings.local.json and the project's entry in ~/.claude.json, both private to this
    user, since the command lines hold paths of this machine (a teammate's would differ)."""
    options = config_options(config)
    server = {"type": "stdio", "command": command[0], "args": [*command[1:], *options]}
    hooks_file = home / ".claude" / "settings.json" if project is None else project / ".claude" / "settings.local.json"
    where = [] if project is None else ["projects", str(project.resolve())]
    return [
        change_file(hooks_file, lambda settings: with_hooks(settings, command, options)),
        change_file(home / ".claude.json", lambda state: _with_server(state, where, server)),
    ]


def _with_server(state: dict[str, Any], where: list[str], server: dict[str, Any]) -> dict[str, Any]:
    scope = state
    for key in where:
        scope = json_object(scope, key, "/".join(where[: where.index(key) + 1]))
    with_server(scope, "mcpServers", server)
    return state


def claude_code_removal(home: Path, project: Path | None) -> list[SettingsChange]:
    """What uninstalling from Claude Code would make of the files install writes: our hooks and our
    server entry gone, everything else as it was (nothing is written)."""
    hooks_file = home / ".claude" / "settings.json" if project is None else project / ".claude" / "settings.local.json"
    where = [] if project is None else ["projects", str(project.resolve())]
    return [
        removal_from(hooks_file, without_hooks),
        removal_from(home / ".claude.json", lambda state: _without_server(state, where)),
    ]


def _without_server(state: dict[str, Any], where: list[str]) -> dict[str, Any]:
    scope: Any = state
    for key in where:
        scope = scope.get(key) if isinstance(scope, dict) else None
    if isinstance(scope, dict):
        without_server(scope, "mcpServers")
    return state


class ClaudeCodeInstaller:
    """Claude Code: the MCP server in ~/.claude.json, the three hooks in its settings."""

    name = "claude-code"
    after_install = "Restart Claude Code (or open /hooks) to load the hooks."

    def changes(
        self, home: Path, project: Path | None, command: list[str], config: Path | None
    ) -> list[SettingsChange]:
        return claude_code_changes(home, project, command, config)

    def removal(self, home: Path, project: Path | None) -> list[SettingsChange]:
        return claude_code_removal(home, project)
