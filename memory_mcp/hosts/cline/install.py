"""Setting memory-mcp up in Cline: two hook scripts, named after their events as Cline wants them,
in ~/Documents/Cline/Hooks/ (for the user) or <project>/.clinerules/hooks/ (for one project).

UserPromptSubmit gives the prompt what memory holds relevant to it (Cline 3; Cline 4 gives hooks'
context to tool hooks only) and keeps it for its reply; TaskComplete stores it with the task's
result. A script of the user's own under either name is never replaced.
"""

from __future__ import annotations

from pathlib import Path

from memory_mcp.hosts.hook_entries import config_options, hook_command
from memory_mcp.hosts.settings_files import SettingsChange, change_script

HOOKS = {"UserPromptSubmit": "prompt", "TaskComplete": "stop"}
MARK = "# memory-mcp hook:"  # how a script of ours is told from the user's
AFTER_INSTALL = """\
Turn on "Enable Hooks" in Cline's settings. For the memory tools as well, add the MCP server in
Cline's MCP settings (command: the one in these scripts, without its hook arguments)."""


def _folder(home: Path, project: Path | None) -> Path:
    return home / "Documents" / "Cline" / "Hooks" if project is None else project / ".clinerules" / "hooks"


def _ours(script: str) -> bool:
    return MARK in script


def _script(command: list[str], hook: str, options: list[str]) -> str:
    return (
        f"#!/bin/sh\n{MARK} {hook} (memory-mcp uninstall cline removes this file)\n"
        f"exec {hook_command(command, hook, ['--host', 'cline', *options])}\n"
    )


class ClineInstaller:
    """Cline: the two hook scripts, for the user or one project."""

    name = "cline"
    after_install = AFTER_INSTALL

    def changes(
        self, home: Path, project: Path | None, command: list[str], config: Path | None
    ) -> list[SettingsChange]:
        options = config_options(config)
        folder = _folder(home, project)
        return [change_script(folder / event, _script(command, hook, options), _ours) for event, hook in HOOKS.items()]

    def removal(self, home: Path, project: Path | None) -> list[SettingsChange]:
        return [change_script(_folder(home, project) / event, None, _ours) for event in HOOKS]
