"""Hosts' settings files, edited with care: our entries merged into the user's, everything else in
them kept, each JSON file rewritten in its own layout (indent, separators, final newline); a file
that is changed is first copied aside; a file that is not valid JSON is never touched; installing
twice changes nothing the second time. A dry run shows each change as the lines that differ between
the file as it is and as it will be written, secrets in them hidden.
"""

from __future__ import annotations

import difflib
import json
import re
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


@dataclass(frozen=True)
class JsonLayout:
    """How a JSON file is laid out, read off its text, so that a change rewrites it the same way:
    a file the user keeps compact or tab-indented stays so, and taking our entries out again gives
    back the very bytes it had. A new file gets two-space indentation."""

    indent: str | None = "  "
    item_separator: str = ","
    key_separator: str = ": "
    final_newline: bool = True

    @classmethod
    def of(cls, text: str | None, content: dict[str, Any]) -> JsonLayout:
        """The layout that writes `content` back as `text` exactly, when a standard one does;
        else the text's indentation with the usual separators."""
        if not text or not text.strip():
            return cls()
        indented = re.search(r"\n([ \t]+)\S", text)
        indent, final_newline = (indented.group(1) if indented else None), text.endswith("\n")
        # The serialiser's own choices first: a file they cannot tell apart (one key) gets those.
        usual = [(",", ": ")] if indent else [(", ", ": "), (",", ":")]
        for item, key in dict.fromkeys([*usual, (",", ": "), (", ", ": "), (",", ":"), (", ", ":")]):
            layout = cls(indent, item, key, final_newline)
            if layout.dumps(content) == text:
                return layout
        return cls(indent, "," if indent else ", ", ": ", final_newline)

    def dumps(self, content: dict[str, Any]) -> str:
        text = json.dumps(
            content, indent=self.indent, separators=(self.item_separator, self.key_separator), ensure_ascii=False
        )
        return text + "\n" if self.final_newline else text


@dataclass
class SettingsChange:
    """One file and what it holds after the change: a JSON object (written in `layout`), a script's
    text, or None for a file removed. `changed` is False when it already held that; `before` is the
    file's text now (None: there is none)."""

    path: Path
    content: dict[str, Any] | str | None
    changed: bool
    before: str | None
    executable: bool = False  # a script the host runs
    backup: Path | None = None
    layout: JsonLayout = JsonLayout()

    def text(self) -> str | None:
        """Exactly what the file will hold (None: removed)."""
        if self.content is None or isinstance(self.content, str):
            return self.content
        return self.layout.dumps(self.content)

    def diff(self) -> list[str]:
        """The lines that change between the file as it is and as it will be written, as a unified
        diff without context lines (the rest of a file may hold the user's secrets), and each line
        shown with any secret in it hidden."""
        before, after = (self.before or "").splitlines(), (self.text() or "").splitlines()
        lines = difflib.unified_diff(before, after, str(self.path), str(self.path), n=0, lineterm="")
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
        atomic_write(target, (change.text() or "").encode())
        if change.executable:
            target.chmod(0o755)
    return changes


def change_file(path: Path, merge: Callable[[dict[str, Any]], dict[str, Any]]) -> SettingsChange:
    """What `merge` makes of the JSON object in `path` (nothing is written)."""
    text = _read_text(path)
    current = _parsed_object(path, text)
    merged = merge(json.loads(json.dumps(current)))
    return SettingsChange(path, merged, changed=merged != current, before=text, layout=JsonLayout.of(text, current))


def removal_from(
    path: Path, take_out: Callable[[dict[str, Any]], dict[str, Any]], bare: dict[str, Any] | None = None
) -> SettingsChange:
    """What `take_out` makes of the JSON object in `path`; a file left holding nothing but `bare`
    (what an install starts a new file with: `{}` unless given) is removed, as it was before."""
    change = change_file(path, take_out)
    if change.changed and change.content == (bare or {}):
        change.content = None
    return change


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
    if not edited.strip():  # nothing left in it: removed (as it was before an install made it)
        return SettingsChange(path, None, changed=bool(current), before=current)
    if not current or current.endswith("\n") and not current.endswith("\n\n"):
        edited = edited.rstrip("\n") + "\n"  # no blank line left at the end
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


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{path} cannot be read ({exc}); fix or move it, then install again") from None


def _parsed_object(path: Path, text: str | None) -> dict[str, Any]:
    try:
        content = json.loads(text or "{}")
    except ValueError as exc:
        raise InvalidInput(f"{path} cannot be read as JSON ({exc}); fix or move it, then install again") from None
    if not isinstance(content, dict):
        raise InvalidInput(f"{path} holds no JSON object; fix or move it, then install again")
    return content


def json_object(parent: dict[str, Any], key: str, what: str) -> dict[str, Any]:
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        raise InvalidInput(f"{what} is not a JSON object; fix it, then install again")
    return value
