"""Setting memory-mcp up in GitHub Copilot CLI and VS Code: one hooks file both read
(~/.copilot/hooks/memory-mcp.json for the user, <project>/.github/hooks/memory-mcp.json for one
project), with SessionStart (the session's digest) and Stop (the session's exchanges stored).

Both hosts load every JSON file in those folders and both take VS Code's event names, so one file
serves both and a session never runs the hooks twice. The MCP server goes where each host reads
it: Copilot CLI's ~/.copilot/mcp-config.json; VS Code's <project>/.vscode/mcp.json.
"""

from __future__ import annotations

from pathlib import Path

from memory_mcp.hosts.hook_entries import (
    config_options,
    flat_handlers,
    with_handlers,
    with_server,
    without_handlers,
    without_server,
)
from memory_mcp.hosts.settings_files import SettingsChange, change_file, removal_from

HOOKS = {"SessionStart": "session-start", "Stop": "stop"}
AFTER_INSTALL = {
    "copilot": "Start copilot anew to load the hooks (the same file gives VS Code's agent its memory).",
    "vscode": (
        "Reload VS Code to load the hooks (the same file gives Copilot CLI its memory). VS Code's prompt hook\n"
        "cannot add context: each session starts with memory, and within it the agent recalls through the\n"
        "memory tools. For the tools in every workspace: code --add-mcp "
        '\'{"name":"memory-mcp","command":"memory-mcp"}\''
    ),
}


def _hooks_file(home: Path, project: Path | None) -> Path:
    folder = home / ".copilot" / "hooks" if project is None else project / ".github" / "hooks"
    return folder / "memory-mcp.json"


def _servers(name: str, home: Path, project: Path | None) -> tuple[Path, str, dict[str, object]] | None:
    """Where the host reads the MCP server from, under which key, with what else the entry needs."""
    if name == "copilot":  # Copilot CLI reads servers for the user only: a project install leaves them be
        return (
            (home / ".copilot" / "mcp-config.json", "mcpServers", {"type": "local", "tools": ["*"]})
            if project is None
            else None
        )
    if project is not None:
        return project / ".vscode" / "mcp.json", "servers", {"type": "stdio"}
    return None  # VS Code's user settings live in a profile: `code --add-mcp` writes them


class CopilotInstaller:
    """Copilot CLI or VS Code: the shared hooks file, and the host's MCP server entry."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.after_install = AFTER_INSTALL[name]

    def changes(
        self, home: Path, project: Path | None, command: list[str], config: Path | None
    ) -> list[SettingsChange]:
        options = config_options(config)
        handlers = flat_handlers(HOOKS, command, options, type="command")
        changes = [
            change_file(_hooks_file(home, project), lambda hooks: with_handlers({"version": 1, **hooks}, handlers))
        ]
        servers = _servers(self.name, home, project)
        if servers is not None:
            path, key, extra = servers
            server = {**extra, "command": command[0], "args": [*command[1:], *options]}
            changes.append(change_file(path, lambda settings: with_server(settings, key, server)))
        return changes

    def removal(self, home: Path, project: Path | None) -> list[SettingsChange]:
        hooks_file = _hooks_file(home, project)
        changes = [removal_from(hooks_file, lambda hooks: without_handlers(hooks, list(HOOKS)), bare={"version": 1})]
        servers = _servers(self.name, home, project)
        if servers is not None:
            path, key, _ = servers
            changes.append(removal_from(path, lambda settings: without_server(settings, key)))
        return changes
