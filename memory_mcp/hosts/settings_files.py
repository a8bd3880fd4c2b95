"""Hosts' settings files, edited with care: our entries merged into the user's, everything else in
them kept; a file that is changed is first copied aside; a file that is not valid JSON is never
touched; installing twice changes nothing the second time. A dry run shows each change as the
lines that differ, secrets in them hidden.
"""

from __future__ import annotations

import difflib
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import InvalidInput
from memory_mcp.base.settings import config_template
from memory_mcp.memory.redaction import redact
from memory_mcp.store.durable import atomic_write, ensure_directory


@dataclass
class SettingsChange:
    """One file and what it holds after the change: a JSON object, a script's text, or None for a
    file removed. `changed` is False when it already held that; `before` is what it holds now."""

    path: Path
    content: dict[str, Any] | str | None
    changed: bool
    before: dict[str, Any] | str | None
    executable: bool = False  # a script the host runs
    backup: Path | None = None

    def diff(self) -> list[str]:
        """The lines that change, as a unified diff without context lines (the rest of a file may
        hold the user's secrets), and each line shown with any secret in it hidden."""
        lines = difflib.unified_diff(
            _lines(self.before), _lines(self.content), str(self.path), str(self.path), n=0, lineterm=""
        )
        return [redact(line) for line in lines]


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
        if target.exists():
            change.backup = target.with_name(f"{target.name}.{stamp}.bak")
            atomic_write(change.backup, target.read_bytes())
        if change.content is None:
            target.unlink(missing_ok=True)
            continue
        ensure_directory(target.parent)
        atomic_write(target, _text(change.content).encode())
        if change.executable:
            target.chmod(0o755)
    return changes


def change_file(path: Path, merge: Callable[[dict[str, Any]], dict[str, Any]]) -> SettingsChange:
    """What `merge` makes of the JSON object in `path` (nothing is written)."""
    current = read_object(path)
    merged = merge(json.loads(json.dumps(current)))
    return SettingsChange(path, merged, changed=merged != current, before=current if path.exists() else None)


def change_toml(path: Path, edit: Callable[[tomlkit.TOMLDocument], None]) -> SettingsChange:
    """What `edit` makes of the TOML file at `path`, its comments and layout kept (nothing is
    written); a file that is not valid TOML is never touched (InvalidInput says why)."""
    try:
        current = path.read_text(encoding="utf-8") if path.exists() else None
        document = tomlkit.parse(current or "")
    except (OSError, ValueError, tomlkit.exceptions.TOMLKitError) as exc:
        raise InvalidInput(f"{path} cannot be read as TOML ({exc}); fix or move it, then install again") from None
    edit(document)
    edited = tomlkit.dumps(document)
    return SettingsChange(path, edited, changed=edited != (current or ""), before=current)


def change_script(path: Path, script: str | None, ours: Callable[[str], bool]) -> SettingsChange:
    """The script at `path` made `script` (None: removed), when the one there is ours or there is
    none; a script of the user's is never replaced (InvalidInput says which)."""
    try:
        current: str | None = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        current = None
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{path} cannot be read ({exc}); move it, then try again") from None
    if current is not None and not ours(current):
        if script is None:
            return SettingsChange(path, current, changed=False, before=current)  # not ours to remove
        raise InvalidInput(f"{path} is a hook of your own; move it (or merge it by hand), then install again")
    return SettingsChange(path, script, changed=script != current, before=current, executable=True)


def _text(content: dict[str, Any] | str) -> str:
    return content if isinstance(content, str) else json.dumps(content, indent=2, ensure_ascii=False) + "\n"


def _lines(content: dict[str, Any] | str | None) -> list[str]:
    return [] if content is None else _text(content).splitlines()


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
