"""The Claude Code plugin's hook command, run exactly as its hooks.json gives it, passes each plugin
option that is set (Claude Code puts them in the hook's environment as CLAUDE_PLUGIN_OPTION_<KEY>)
to memory-mcp as the variable memory-mcp reads, and leaves the default for each option left empty.

What the command runs is `uvx`: here a stand-in on PATH that records its arguments and environment
(the real Claude Code and uv run the plugin in tests/hosts/test_claude_code_plugin.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from project import PROJECT_ROOT

HOOKS = json.loads((PROJECT_ROOT / "plugins" / "memory-mcp" / "hooks.json").read_text(encoding="utf-8"))["hooks"]
PASSED = (
    "MEMORY_MCP_HOME",
    "OPENAI_BASE_URL",
    "MEMORY_MCP_LLM_MODEL",
    "OPENAI_API_KEY",
    "MEMORY_MCP_SERVER_URL",
    "MEMORY_MCP_SERVER_TOKEN",
)
RECORDER = """\
import json, os, sys
names = {names!r}
with open({out!r}, "w") as out:
    json.dump({{"argv": sys.argv[1:], "environ": {{n: os.environ[n] for n in names if n in os.environ}}}}, out)
"""


def run_hook(event: str, options: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    """Run the plugin's `event` hook with `options` set; what `uvx` was started with."""
    [group] = HOOKS[event]
    [handler] = group["hooks"]
    stand_in = tmp_path / "bin" / "uvx"
    stand_in.parent.mkdir(exist_ok=True)
    out = tmp_path / f"{event}.json"
    script = RECORDER.format(names=PASSED, out=str(out))
    stand_in.write_text(f"#!{sys.executable}\n{script}", encoding="utf-8")
    stand_in.chmod(0o755)
    environ = {name: value for name, value in os.environ.items() if name not in PASSED}
    environ |= {"PATH": f"{stand_in.parent}{os.pathsep}{os.environ['PATH']}", "CLAUDE_PLUGIN_ROOT": str(PROJECT_ROOT)}
    environ |= {f"CLAUDE_PLUGIN_OPTION_{key.upper()}": value for key, value in options.items()}
    done = subprocess.run(
        [handler["command"], *handler["args"]],
        env=environ,
        input="{}",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    recorded: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return recorded


@pytest.mark.parametrize(
    ("event", "hook"), [("SessionStart", "session-start"), ("UserPromptSubmit", "prompt"), ("Stop", "stop")]
)
def test_every_set_option_reaches_memory_mcp_as_its_variable(event: str, hook: str, tmp_path: Path) -> None:
    options = {
        "memory_folder": str(tmp_path / "memory"),
        "llm_base_url": "http://127.0.0.1:11434/v1",
        "llm_model": "qwen2.5:7b",
        "llm_api_key": "sk-local-not-a-secret",
        "memory_server_url": "https://memory.example.com",
        "memory_server_token": "mm_not-a-real-token",
    }
    started = run_hook(event, options, tmp_path)
    assert started["argv"] == [
        "--from",
        str(PROJECT_ROOT),
        "--with-editable",
        str(PROJECT_ROOT),
        "memory-mcp",
        "hook",
        hook,
        "--host",
        "claude-code",
    ]
    assert started["environ"] == dict(zip(PASSED, options.values(), strict=True))


def test_an_option_left_empty_leaves_the_default(tmp_path: Path) -> None:
    started = run_hook("Stop", {"memory_folder": "", "llm_model": "qwen2.5:7b"}, tmp_path)
    assert started["environ"] == {"MEMORY_MCP_LLM_MODEL": "qwen2.5:7b"}
