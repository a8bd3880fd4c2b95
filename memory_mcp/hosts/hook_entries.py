"""Our entries in hosts' settings files, merged in and taken out, the user's left as they are: hook
handlers in groups (`{"hooks": {Event: [{"hooks": [handler]}]}}`, as Claude Code's settings and
Codex's hooks.json have them) or in flat lists (Cursor, Windsurf, Copilot CLI, VS Code), and the
MCP server's entry. Ours are recognised by what they run, whatever the path to the command."""

from __future__ import annotations

import re
import shlex
from typing import Any

from memory_mcp.base.errors import InvalidInput
from memory_mcp.hosts.settings_files import json_object

SERVER_NAME = "memory-mcp"
# Our hook handlers, recognised by what they run whatever the path to the command.
OUR_HOOK = re.compile(r"memory[-_]mcp\S*\s.*\bhook (session-start|prompt|stop)\b")
# event -> (our hook, timeout seconds)
HOOKS = {"SessionStart": ("session-start", 15), "UserPromptSubmit": ("prompt", 15), "Stop": ("stop", 30)}


def with_hooks(settings: dict[str, Any], command: list[str], flags: list[str]) -> dict[str, Any]:
    hooks = json_object(settings, "hooks", "the settings' hooks")
    for event, (name, timeout) in HOOKS.items():
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list) or not all(
            isinstance(group, dict) and isinstance(group.get("hooks", []), list) for group in groups
        ):
            raise InvalidInput(f"hooks.{event} is not a list of hook groups; fix it, then install again")
        ours = [
            (group, index)
            for group in groups
            for index, existing in enumerate(group.get("hooks", []))
            if isinstance(existing, dict) and OUR_HOOK.search(str(existing.get("command", "")))
        ]
        handler = {"type": "command", "command": shlex.join([*command, "hook", name, *flags]), "timeout": timeout}
        if ours:
            group, index = ours[0]
            group["hooks"][index] = {**group["hooks"][index], "type": "command", "command": handler["command"]}
            for extra_group, extra_index in reversed(ours[1:]):
                del extra_group["hooks"][extra_index]
        else:
            groups.append({"hooks": [handler]})
        hooks[event] = [group for group in groups if group.get("hooks")]
    return settings


def without_hooks(settings: dict[str, Any]) -> dict[str, Any]:
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return settings
    for event in HOOKS:
        groups = hooks.get(event)
        if not isinstance(groups, list):
            continue
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                group["hooks"] = [
                    handler
                    for handler in group["hooks"]
                    if not (isinstance(handler, dict) and OUR_HOOK.search(str(handler.get("command", ""))))
                ]
        kept = [group for group in groups if not (isinstance(group, dict) and group.get("hooks") == [])]
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    if not hooks:
        del settings["hooks"]
    return settings


def is_ours(handler: Any) -> bool:
    return isinstance(handler, dict) and bool(OUR_HOOK.search(str(handler.get("command", ""))))


def with_handlers(settings: dict[str, Any], handlers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Our handler for each event merged into a flat list of handlers (`{"hooks": {Event: [handler]}}`,
    as Cursor, Windsurf, Copilot CLI and VS Code have them): ours already there replaced in place,
    keeping what the user added to it; a second copy dropped."""
    hooks = json_object(settings, "hooks", "the settings' hooks")
    for event, handler in handlers.items():
        entries = hooks.setdefault(event, [])
        if not isinstance(entries, list):
            raise InvalidInput(f"hooks.{event} is not a list of hooks; fix it, then install again")
        found = [index for index, entry in enumerate(entries) if is_ours(entry)]
        if found:
            entries[found[0]] = {**entries[found[0]], **handler}
            for index in reversed(found[1:]):
                del entries[index]
        else:
            entries.append(handler)
    return settings


def without_handlers(settings: dict[str, Any], events: list[str]) -> dict[str, Any]:
    """The settings without our handlers in flat lists (an event left empty goes too)."""
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return settings
    for event in events:
        entries = hooks.get(event)
        if isinstance(entries, list):
            kept = [entry for entry in entries if not is_ours(entry)]
            if kept:
                hooks[event] = kept
            else:
                del hooks[event]
    if not hooks:
        del settings["hooks"]
    return settings


def with_server(settings: dict[str, Any], key: str, server: dict[str, Any]) -> dict[str, Any]:
    """Our MCP server entry under `key` (mcpServers, servers): one already there keeps what the
    user added to it (its env, say)."""
    servers = json_object(settings, key, key)
    existing = servers.get(SERVER_NAME)
    servers[SERVER_NAME] = {**existing, **server} if isinstance(existing, dict) else server
    return settings


def without_server(settings: dict[str, Any], key: str) -> dict[str, Any]:
    """The settings without our MCP server entry (and without `key` when it held only ours)."""
    servers = settings.get(key)
    if isinstance(servers, dict) and SERVER_NAME in servers:
        del servers[SERVER_NAME]
        if not servers:
            del settings[key]
    return settings
