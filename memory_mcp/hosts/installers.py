"""The hosts `memory-mcp install` and `uninstall` know: for each, the settings files it changes."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from memory_mcp.hosts.claude_code.install import ClaudeCodeInstaller
from memory_mcp.hosts.cline.install import ClineInstaller
from memory_mcp.hosts.codex.install import CodexInstaller
from memory_mcp.hosts.copilot.install import CopilotInstaller
from memory_mcp.hosts.cursor.install import CursorInstaller
from memory_mcp.hosts.gemini.install import GeminiInstaller
from memory_mcp.hosts.settings_files import SettingsChange
from memory_mcp.hosts.windsurf.install import WindsurfInstaller


class HostInstaller(Protocol):
    """One host's install: what its files hold with memory-mcp in them, and without."""

    name: str  # as the command line names the host
    after_install: str  # what the user does next, said once the files are written

    def changes(
        self, home: Path, project: Path | None, command: list[str], config: Path | None
    ) -> list[SettingsChange]: ...

    def removal(self, home: Path, project: Path | None) -> list[SettingsChange]: ...


INSTALLERS: dict[str, HostInstaller] = {
    installer.name: installer
    for installer in (
        ClaudeCodeInstaller(),
        CodexInstaller(),
        GeminiInstaller(),
        CursorInstaller(),
        CopilotInstaller("vscode"),
        CopilotInstaller("copilot"),
        ClineInstaller(),
        WindsurfInstaller(),
    )
}
