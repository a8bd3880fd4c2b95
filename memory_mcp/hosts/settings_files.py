"""Hosts' settings files, edited with care: our entries merged into the user's, everything else in
them kept; a file that is changed is first copied aside; a file that is not valid JSON is never
touched; installing twice changes nothing the second time.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import InvalidInput
from memory_mcp.base.settings import config_template
from memory_mcp.store.durable import atomic_write, ensure_directory


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


def change_file(
    path: Path, merge: Callable[[dict[str, Any]], dict[str, Any]], ours: Callable[[dict[str, Any]], dict[str, Any]]
) -> SettingsChange:
    """What `merge` makes of the JSON object in `path` (nothing is written); `ours` picks our entries."""
    current = read_object(path)
    merged = merge(json.loads(json.dumps(current)))
    return SettingsChange(path, merged, changed=merged != current, ours=ours(merged))


def read_object(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        content = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{path} cannot be read as JSON ({exc}); fix or move it, then install again") from None
    if not isinstance(content, dict):
        raise InvalidInput(f"{path} holds no JSON object; fix or move it, then install again")
    return content


def json_object(parent: dict[str, Any], key: str, what: str) -> dict[str, Any]:
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        raise InvalidInput(f"{what} is not a JSON object; fix it, then install again")
    return value
