"""Setting memory-mcp up in Codex CLI: the three hooks in its hooks.json.

Codex reads hooks from ~/.codex/hooks.json (for the user) and <project>/.codex/hooks.json (for a
trusted project), in the same shape as Claude Code's settings' `hooks`, so the entries are merged
and taken out the way Claude Code's are, each command naming `--host codex`.

The MCP server entry lives in ~/.codex/config.toml, which is TOML: it is left to `codex mcp add`,
Codex's own writer of that file, rather than rewritten here (settings files are edited as JSON).

Codex runs a hook only once the user has trusted it: it keeps, in config.toml, a hash of each
handler as it was reviewed, so a handler installed (or changed) here waits for the user's review
in the TUI's /hooks. The hash is not written for the user: trusting a command is theirs to do.
"""

from __future__ import annotations

from pathlib import Path

from memory_mcp.hosts.hook_entries import with_hooks, without_hooks
from memory_mcp.hosts.settings_files import SettingsChange, change_file

HOST_FLAGS = ["--host", "codex"]  # Codex's payloads are recognised anyway; named, nothing is guessed
AFTER_INSTALL = """\
Codex runs a new or changed hook only once you trust it: start `codex`, open /hooks, choose
"Review hook trust" and trust the three memory-mcp hooks (Codex keeps a hash of each command in
~/.codex/config.toml; reinstalling with another command asks again).
For the memory tools as well, add the MCP server: codex mcp add memory-mcp -- memory-mcp"""


def hooks_file(home: Path, project: Path | None) -> Path:
    return home / ".codex" / "hooks.json" if project is None else project / ".codex" / "hooks.json"


class CodexInstaller:
    """Codex CLI: the three hooks in its hooks.json, for the user or one project."""

    name = "codex"
    after_install = AFTER_INSTALL

    def changes(
        self, home: Path, project: Path | None, command: list[str], config: Path | None
    ) -> list[SettingsChange]:
        options = ["--config", str(config.resolve())] if config is not None else []
        flags = [*HOST_FLAGS, *options]
        return [change_file(hooks_file(home, project), lambda hooks: with_hooks(hooks, command, flags))]

    def removal(self, home: Path, project: Path | None) -> list[SettingsChange]:
        return [change_file(hooks_file(home, project), without_hooks)]
