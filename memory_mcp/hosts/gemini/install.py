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

import shlex
from pathlib import Path
from typing import Any

from memory_mcp.base.errors import InvalidInput
from memory_mcp.hosts.hook_entries import is_ours, with_server, without_server
from memory_mcp.hosts.settings_files import SettingsChange, change_file, json_object

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


def _groups(hooks: dict[str, Any], event: str) -> list[Any]:
    groups = hooks.setdefault(event, [])
    if not isinstance(groups, list) or not all(
        isinstance(group, dict) and isinstance(group.get("hooks", []), list) for group in groups
    ):
        raise InvalidInput(f"hooks.{event} is not a list of hook groups; fix it, then install again")
    return groups


def _with_entries(settings: dict[str, Any], command: list[str], options: list[str]) -> dict[str, Any]:
    """Our three handlers (each replacing ours already there, any second copy dropped, what the
    user added to it kept) and our server entry, merged into the settings."""
    hooks = json_object(settings, "hooks", "the settings' hooks")
    for event, (hook, name, timeout) in HOOKS.items():
        groups = _groups(hooks, event)
        handler = {
            "type": "command",
            "name": name,
            "command": shlex.join([*command, "hook", hook, *HOST_FLAGS, *options]),
        }
        found = [
            (group, index) for group in groups for index, item in enumerate(group.get("hooks", [])) if is_ours(item)
        ]
        if found:
            group, index = found[0]
            group["hooks"][index] = {**group["hooks"][index], **handler}  # keeps a timeout the user changed
            for extra_group, extra_index in reversed(found[1:]):
                del extra_group["hooks"][extra_index]
        else:
            groups.append({"hooks": [{**handler, "timeout": timeout}]})
        hooks[event] = [group for group in groups if group.get("hooks")]
    return with_server(settings, "mcpServers", {"command": command[0], "args": [*command[1:], *options]})


def _without_entries(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings without our handlers (a group or event left empty goes too) and our server."""
    hooks = settings.get("hooks")
    if isinstance(hooks, dict):
        for event in HOOKS:
            groups = hooks.get(event)
            if not isinstance(groups, list):
                continue
            for group in groups:
                if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                    group["hooks"] = [item for item in group["hooks"] if not is_ours(item)]
            kept = [group for group in groups if not (isinstance(group, dict) and group.get("hooks") == [])]
            if kept:
                hooks[event] = kept
            else:
                del hooks[event]
        if not hooks:
            del settings["hooks"]
    return without_server(settings, "mcpServers")


class GeminiInstaller:
    """Gemini CLI: the three hooks and the MCP server in its settings.json, for the user or one project."""

    name = "gemini"
    after_install = AFTER_INSTALL

    def changes(
        self, home: Path, project: Path | None, command: list[str], config: Path | None
    ) -> list[SettingsChange]:
        options = ["--config", str(config.resolve())] if config is not None else []
        return [change_file(settings_file(home, project), lambda s: _with_entries(s, command, options))]

    def removal(self, home: Path, project: Path | None) -> list[SettingsChange]:
        return [change_file(settings_file(home, project), _without_entries)]
