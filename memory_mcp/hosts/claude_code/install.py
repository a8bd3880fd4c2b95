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

import json
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import InvalidInput
from memory_mcp.base.settings import config_template
from memory_mcp.store.durable import atomic_write, ensure_directory

SERVER_NAME = "memory-mcp"
# Our hook handlers, recognised by what they run whatever the path to the command.
OUR_HOOK = re.compile(r"memory[-_]mcp\S*\s.*\bhook (session-start|prompt|stop)\b")
# event -> (our hook, timeout seconds)
HOOKS = {"SessionStart": ("session-start", 15), "UserPromptSubmit": ("prompt", 15), "Stop": ("stop", 30)}


@dataclass
class SettingsChange:
    """One file and what it holds after installing; `changed` is False when it already did."""

    path: Path
    content: dict[str, Any]
    changed: bool
    ours: dict[str, Any]  # our entries alone: what a dry run shows (the rest may hold secrets)
    backup: Path | None = None


def write_config_template(path: Path, replace: bool) -> Path:
    """Write the commented config (every setting at its default) at `path`; refuse to replace a
    config already there unless told to."""
    if path.exists() and not replace:
        raise InvalidInput(f"{path} already exists; edit it, or pass --force to replace it with the defaults")
    ensure_directory(path.parent)
    atomic_write(path, (json.dumps(config_template(), indent=2) + "\n").encode())
    return path


def memory_command() -> list[str]:
    """How to run this very installation: its `memory-mcp` script, else its Python with -m."""
    script = Path(sys.executable).with_name("memory-mcp")
    if script.exists():
        return [str(script)]
    found = shutil.which("memory-mcp")
    return [found] if found else [sys.executable, "-m", "memory_mcp"]


def claude_code_changes(
    home: Path, project: Path | None, command: list[str], config: Path | None
) -> list[SettingsChange]:
    """What installing into Claude Code would make of its settings files (nothing is written).

    For the user: ~/.claude/settings.json and ~/.claude.json. For one project: its
    .claude/settings.local.json and the project's entry in ~/.claude.json, both private to this
    user, since the command lines hold paths of this machine (a teammate's would differ)."""
    options = ["--config", str(config.resolve())] if config is not None else []
    server = {"type": "stdio", "command": command[0], "args": [*command[1:], *options]}
    hooks_file = home / ".claude" / "settings.json" if project is None else project / ".claude" / "settings.local.json"
    where = [] if project is None else ["projects", str(project.resolve())]
    return [
        _change(hooks_file, lambda settings: _with_hooks(settings, command, options), _our_hooks),
        _change(
            home / ".claude.json", lambda state: _with_server(state, where, server), lambda s: _our_server(s, where)
        ),
    ]


def apply(changes: list[SettingsChange]) -> list[SettingsChange]:
    """Write the changed files, each after copying the old one aside, through any symbolic link
    (a settings file kept in a dotfiles folder stays there); the same list, with backups."""
    stamp = utc_now().replace(":", "").replace("-", "")
    for change in changes:
        if not change.changed:
            continue
        target = change.path.resolve()
        ensure_directory(target.parent)
        if target.exists():
            change.backup = target.with_name(f"{target.name}.{stamp}.bak")
            atomic_write(change.backup, target.read_bytes())
        atomic_write(target, (json.dumps(change.content, indent=2, ensure_ascii=False) + "\n").encode())
    return changes


def _change(path: Path, merge: Any, ours: Any) -> SettingsChange:
    current = _read(path)
    merged = merge(json.loads(json.dumps(current)))
    return SettingsChange(path, merged, changed=merged != current, ours=ours(merged))


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        content = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{path} cannot be read as JSON ({exc}); fix or move it, then install again") from None
    if not isinstance(content, dict):
        raise InvalidInput(f"{path} holds no JSON object; fix or move it, then install again")
    return content


def _object(parent: dict[str, Any], key: str, what: str) -> dict[str, Any]:
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        raise InvalidInput(f"{what} is not a JSON object; fix it, then install again")
    return value


def _with_hooks(settings: dict[str, Any], command: list[str], flags: list[str]) -> dict[str, Any]:
    hooks = _object(settings, "hooks", "the settings' hooks")
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


def _with_server(state: dict[str, Any], where: list[str], server: dict[str, Any]) -> dict[str, Any]:
    scope = state
    for key in where:
        scope = _object(scope, key, "/".join(where[: where.index(key) + 1]))
    servers = _object(scope, "mcpServers", "mcpServers")
    existing = servers.get(SERVER_NAME)
    servers[SERVER_NAME] = {**existing, **server} if isinstance(existing, dict) else server  # keeps its env
    return state


def _our_hooks(settings: dict[str, Any]) -> dict[str, Any]:
    return {
        event: [
            handler
            for group in settings["hooks"].get(event, [])
            for handler in group.get("hooks", [])
            if OUR_HOOK.search(str(handler.get("command", "")))
        ]
        for event in HOOKS
    }


def _our_server(state: dict[str, Any], where: list[str]) -> dict[str, Any]:
    scope = state
    for key in where:
        scope = scope[key]
    return {"mcpServers": {SERVER_NAME: scope["mcpServers"][SERVER_NAME]}}
