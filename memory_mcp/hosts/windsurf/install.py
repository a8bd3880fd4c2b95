"""Setting memory-mcp up in Windsurf: Cascade's two hooks in hooks.json (~/.codeium/windsurf/ for
the user, <project>/.windsurf/ for one project) and, for the user, the MCP server in mcp_config.json
(Windsurf reads servers for the user only: a project install leaves them be).

Cascade's hooks cannot give the model anything (they answer by exit code), so the hooks store:
pre_user_prompt keeps the prompt, post_cascade_response stores it with Cascade's response; recall
in Windsurf is through the memory tools.
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

HOOKS = {"pre_user_prompt": "prompt", "post_cascade_response": "stop"}
AFTER_INSTALL = """\
Restart Windsurf to load the hooks. Cascade's hooks cannot add context: every exchange is
remembered, and Cascade recalls through the memory tools."""


def _hooks_file(home: Path, project: Path | None) -> Path:
    return home / ".codeium" / "windsurf" / "hooks.json" if project is None else project / ".windsurf" / "hooks.json"


def _servers_file(home: Path) -> Path:
    return home / ".codeium" / "windsurf" / "mcp_config.json"


class WindsurfInstaller:
    """Windsurf: the two hooks in hooks.json; for the user, the server in mcp_config.json."""

    name = "windsurf"
    after_install = AFTER_INSTALL

    def changes(
        self, home: Path, project: Path | None, command: list[str], config: Path | None
    ) -> list[SettingsChange]:
        options = config_options(config)
        handlers = flat_handlers(HOOKS, command, ["--host", self.name, *options], show_output=False)
        server = {"command": command[0], "args": [*command[1:], *options]}
        changes = [change_file(_hooks_file(home, project), lambda hooks: with_handlers(hooks, handlers))]
        if project is None:
            changes.append(change_file(_servers_file(home), lambda servers: with_server(servers, "mcpServers", server)))
        return changes

    def removal(self, home: Path, project: Path | None) -> list[SettingsChange]:
        changes = [removal_from(_hooks_file(home, project), lambda hooks: without_handlers(hooks, list(HOOKS)))]
        if project is None:
            changes.append(removal_from(_servers_file(home), lambda servers: without_server(servers, "mcpServers")))
        return changes
