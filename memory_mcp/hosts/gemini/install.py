"""Setting memory-mcp up in Gemini CLI: the three hooks and the MCP server entry, both in its
settings.json (~/.gemini/settings.json for the user, <project>/.gemini/settings.json for one
project; Gemini merges the two).

Gemini's hooks differ from Claude Code's in names and units: SessionStart, BeforeAgent (each
prompt) and AfterAgent (each finished turn); each handler has a `name` and a timeout in
milliseconds. Installing merges our entries into the file and keeps everything else in it;
installing again replaces our entries in place; uninstalling takes out exactly ours.

Gemini runs the hooks of settings files only in a folder the user trusts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memory_mcp.hosts.hook_entries import (
    config_options,
    hook_command,
    with_grouped,
    with_server,
    without_grouped,
    without_server,
)
from memory_mcp.hosts.settings_files import SettingsChange, change_file, removal_from

HOST_FLAGS = ["--host", "gemini"]  # Gemini's payloads are recognised anyway; named, nothing is guessed
# Gemini event -> (our hook, the handler's name, timeout in milliseconds): the same seconds as in
# Claude Code; a stop stores the exchange and may wait on the store's lock.
HOOKS = {
    "SessionStart": ("session-start", "memory-mcp-session-start", 15_000),
    "BeforeAgent": ("prompt", "memory-mcp-prompt", 15_000),
    "AfterAgent": ("stop", "memory-mcp-stop", 30_000),
}
AFTER_INSTALL = """\
Gemini CLI runs these hooks only in folders you trust: answer its trust question when it asks,
or use /permissions trust; in scripts, GEMINI_CLI_TRUST_WORKSPACE=true. Start gemini anew to load them."""


def settings_file(home: Path, project: Path | None) -> Path:
    return (home if project is None else project) / ".gemini" / "settings.json"


def _with_entries(settings: dict[str, Any], command: list[str], options: list[str]) -> dict[str, Any]:
    """Our three handlers and our server entry, merged into the settings."""
    handlers = {
        event: {"type": "command", "name": name, "command": hook_command(command, hook, [*HOST_FLAGS, *options])}
        for event, (hook, name, _) in HOOKS.items()
    }
    first_time = {event: {"timeout": timeout} for event, (_, _, timeout) in HOOKS.items()}
    settings = with_grouped(settings, handlers, first_time)
    return with_server(settings, "mcpServers", {"command": command[0], "args": [*command[1:], *options]})


def _without_entries(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings without our handlers (a group or event left empty goes too) and our server."""
    return without_server(without_grouped(settings, list(HOOKS)), "mcpServers")


class GeminiInstaller:
    """Gemini CLI: the three hooks and the MCP server in its settings.json, for the user or one project."""

    name = "gemini"
    after_install = AFTER_INSTALL

    def changes(
        self, home: Path, project: Path | None, command: list[str], config: Path | None
    ) -> list[SettingsChange]:
        options = config_options(config)
        return [change_file(settings_file(home, project), lambda s: _with_entries(s, command, options))]

    def removal(self, home: Path, project: Path | None) -> list[SettingsChange]:
        return [removal_from(settings_file(home, project), _without_entries)]
