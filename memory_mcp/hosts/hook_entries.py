"""Hook entries in the shape Claude Code's settings give them (`{"hooks": {Event: [{"hooks": [handler]}]}}`),
which Codex's hooks.json copies: ours merged in, listed, and taken out, the user's left as they are.
Ours are recognised by what they run, whatever the path to the command."""

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


def our_hooks(settings: dict[str, Any]) -> dict[str, Any]:
    return {
        event: [
            handler
            for group in settings["hooks"].get(event, [])
            for handler in group.get("hooks", [])
            if OUR_HOOK.search(str(handler.get("command", "")))
        ]
        for event in HOOKS
    }


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
