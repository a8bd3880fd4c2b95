"""The real Gemini CLI (npm, pinned) with memory-mcp installed as a user installs it
(`memory-mcp install gemini`), talking to a scripted Gemini API on 127.0.0.1 that records what
the model is sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host_clis import GEMINI, HostCli, installed_in_home
from scripted_gemini import ScriptedGemini, user_texts

MODEL = "gemini-2.5-flash"  # named, so Gemini CLI makes no routing call before the turn
# What the user's own settings hold before installing: the API-key login a scripted API needs.
USERS_SETTINGS = {"security": {"auth": {"selectedType": "gemini-api-key"}}, "ui": {"theme": "GitHub"}}


@dataclass
class GeminiCli(HostCli):
    """Gemini CLI with memory-mcp installed in a home of its own."""

    api: ScriptedGemini

    def environment(self) -> dict[str, str]:
        return super().environment() | {
            "GEMINI_CLI_HOME": str(self.user_home),
            "GOOGLE_GEMINI_BASE_URL": self.api.base_url,
            "GEMINI_API_KEY": "test-not-a-key",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",  # hooks run only in a trusted folder
        }

    def run(self, prompt: str, project: Path) -> list[dict[str, Any]]:
        """`gemini -m MODEL -p PROMPT` in `project`; the requests the model was sent meanwhile."""
        return self.run_cli(["-m", MODEL, "-p", prompt], project)


def hook_contexts(requests: list[dict[str, Any]]) -> list[str]:
    """What hooks gave the model: the user parts Gemini CLI wraps in <hook_context>."""
    return [
        text[text.index("<hook_context>") : text.index("</hook_context>")]
        for request in requests
        for text in user_texts(request)
        if "<hook_context>" in text
    ]


@contextmanager
def gemini_installed(tmp_path: Path, memory_home: Path) -> Iterator[GeminiCli]:
    """Gemini CLI in a home of its own under `tmp_path`, memory-mcp installed, its model scripted."""
    settings = {".gemini/settings.json": json.dumps(USERS_SETTINGS)}
    executable, user_home = installed_in_home(GEMINI, "gemini", tmp_path, memory_home, files=settings)
    api = ScriptedGemini(respond=lambda request: "Noted.").start()
    try:
        yield GeminiCli(executable, user_home, memory_home, api)
    finally:
        api.stop()
