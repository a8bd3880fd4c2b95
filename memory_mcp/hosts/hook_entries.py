"""Our entries in hosts' settings files, merged in and taken out, the user's left as they are: hook
handlers in groups (`{"hooks": {Event: [{"hooks": [handler]}]}}`, as Claude Code's settings, Codex's
hooks.json and Gemini CLI's settings have them) or in flat lists (Cursor, Windsurf, Copilot CLI,
VS Code), and the MCP server's entry. Ours are recognised by what they run, whatever the path to
the command; one of ours already there is replaced in place, keeping what the user added to it (a
timeout, an env), and a second copy is dropped.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from memory_mcp.base.errors import InvalidInput
from memory_mcp.hosts.settings_files import json_object

SERVER_NAME = "memory-mcp"
# Our hook handlers, recognised by what they run whatever the path to the command.
OUR_HOOK = re.compile(r"memory[-_]mcp\S*\s.*\bhook (session-start|prompt|stop)\b")
# Claude Code's events (Codex's are the same) -> (our hook, timeout seconds)
HOOKS = {"SessionStart": ("session-start", 15), "UserPromptSubmit": ("prompt", 15), "Stop": ("stop", 30)}


def is_ours(handler: Any) -> bool:
    return isinstance(handler, dict) and bool(OUR_HOOK.search(str(handler.get("command", ""))))


def config_options(config: Path | None) -> list[str]:
    """The options naming the config file the hooks and the server are to read, if one was given."""
    return ["--config", str(config.resolve())] if config is not None else []


def hook_command(command: list[str], hook: str, flags: list[str]) -> str:
    return shlex.join([*command, "hook", hook, *flags])


def flat_handlers(
    events: dict[str, str], command: list[str], flags: list[str], **fields: Any
) -> dict[str, dict[str, Any]]:
    """A handler per host event (event -> our hook) running our hook with `flags`, with `fields`."""
    return {event: {**fields, "command": hook_command(command, hook, flags)} for event, hook in events.items()}


def with_hooks(settings: dict[str, Any], command: list[str], flags: list[str]) -> dict[str, Any]:
    """Claude Code's three hooks (as Codex takes them too) merged into grouped settings."""
    handlers = {
        event: {"type": "command", "command": hook_command(command, hook, flags)} for event, (hook, _) in HOOKS.items()
    }
    return with_grouped(settings, handlers, {event: {"timeout": timeout} for event, (_, timeout) in HOOKS.items()})


def without_hooks(settings: dict[str, Any]) -> dict[str, Any]:
    return without_grouped(settings, list(HOOKS))


def with_grouped(
    settings: dict[str, Any], handlers: dict[str, dict[str, Any]], first_time: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Our handler for each event merged into grouped settings; `first_time` is what a new one
    also gets (a timeout the user may change afterwards)."""
    hooks = json_object(settings, "hooks", "the settings' hooks")
    for event, handler in handlers.items():
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list) or not all(
            isinstance(group, dict) and isinstance(group.get("hooks", []), list) for group in groups
        ):
            raise InvalidInput(f"hooks.{event} is not a list of hook groups; fix it, then install again")
        found = [
            (group, index) for group in groups for index, item in enumerate(group.get("hooks", [])) if is_ours(item)
        ]
        if found:
            group, index = found[0]
            group["hooks"][index] = {**group["hooks"][index], **handler}
            for extra_group, extra_index in reversed(found[1:]):
                del extra_group["hooks"][extra_index]
        else:
            groups.append({"hooks": [{**handler, **first_time.get(event, {})}]})
        hooks[event] = [group for group in groups if group.get("hooks")]
    return settings


def without_grouped(settings: dict[str, Any], events: list[str]) -> dict[str, Any]:
    """The settings without our handlers in groups (a group or event left empty goes too)."""

    def kept(groups: list[Any]) -> list[Any]:
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                group["hooks"] = [item for item in group["hooks"] if not is_ours(item)]
        return [group for group in groups if not (isinstance(group, dict) and group.get("hooks") == [])]

    return _pruned(settings, events, kept)


def with_handlers(settings: dict[str, Any], handlers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Our handler for each event merged into flat lists of handlers."""
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
    return _pruned(settings, events, lambda entries: [entry for entry in entries if not is_ours(entry)])


def _pruned(settings: dict[str, Any], events: list[str], kept: Any) -> dict[str, Any]:
    """Each event's list as `kept` leaves it: an event left empty goes, and `hooks` when it is empty."""
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return settings
    for event in events:
        entries = hooks.get(event)
        if not isinstance(entries, list):
            continue
        remaining = kept(entries)
        if remaining:
            hooks[event] = remaining
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
