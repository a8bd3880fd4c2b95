"""Setting memory-mcp up in Cursor: its three hooks in hooks.json and the MCP server in mcp.json
(~/.cursor/ for the user, <project>/.cursor/ for one project).

Cursor's hooks.json holds `{"version": 1, "hooks": {event: [{"command": ...}]}}`: sessionStart
(the session's digest), beforeSubmitPrompt (the prompt kept for its reply) and afterAgentResponse
(the exchange stored). Installing merges our entries and keeps everything else; uninstalling takes
out exactly ours.
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

HOOKS = {"sessionStart": "session-start", "beforeSubmitPrompt": "prompt", "afterAgentResponse": "stop"}
AFTER_INSTALL = """\
Restart Cursor (or reopen the window) to load the hooks; project hooks run in a trusted workspace.
Cursor's prompt hook cannot add context: each session starts with memory, and within it the agent
recalls through the memory tools."""


def _folder(home: Path, project: Path | None) -> Path:
    return (home if project is None else project) / ".cursor"


class CursorInstaller:
    """Cursor: the three hooks in hooks.json, the server in mcp.json, for the user or one project."""

    name = "cursor"
    after_install = AFTER_INSTALL

    def changes(
        self, home: Path, project: Path | None, command: list[str], config: Path | None
    ) -> list[SettingsChange]:
        options = config_options(config)
        handlers = flat_handlers(HOOKS, command, ["--host", self.name, *options])
        server = {"command": command[0], "args": [*command[1:], *options]}
        folder = _folder(home, project)
        return [
            change_file(folder / "hooks.json", lambda hooks: with_handlers({"version": 1, **hooks}, handlers)),
            change_file(folder / "mcp.json", lambda servers: with_server(servers, "mcpServers", server)),
        ]

    def removal(self, home: Path, project: Path | None) -> list[SettingsChange]:
        folder = _folder(home, project)
        return [
            removal_from(
                folder / "hooks.json", lambda hooks: without_handlers(hooks, list(HOOKS)), bare={"version": 1}
            ),
            removal_from(folder / "mcp.json", lambda servers: without_server(servers, "mcpServers")),
        ]
