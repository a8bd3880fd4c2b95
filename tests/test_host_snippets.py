"""The README's host snippets, run exactly as pasted with only the path changed: each starts a
working server with no config file, and `memory-mcp init` writes the config that server reads."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from command_line import cli
from project import PROJECT_ROOT
from stdio_helpers import connect_command, ok, run

from memory_mcp.base.settings import Settings, load_settings
from memory_mcp.hosts.installers import INSTALLERS

pytestmark = pytest.mark.integration

README = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
PLACEHOLDER = "/path/to/memory-mcp/.venv/bin/memory-mcp"
INSTALLED = str(Path(sys.executable).with_name("memory-mcp"))  # this checkout's .venv when run by make


def host_section() -> str:
    return README.split("## Add it to your MCP host")[1].split("\n## ")[0]


def json_snippets() -> list[tuple[str, dict[str, Any]]]:
    """(host heading, server entry) of every JSON snippet in the host section."""
    found = []
    for heading, body in re.findall(r"^### (.+?)\n(.*?)(?=^### |\Z)", host_section(), re.MULTILINE | re.DOTALL):
        for block in re.findall(r"```json\n(.*?)```", body, re.DOTALL):
            config = json.loads(block.replace(PLACEHOLDER, INSTALLED))
            servers = config.get("mcpServers") or config["servers"]
            found += [(heading, entry) for entry in servers.values()]
    return found


def command_lines() -> list[list[str]]:
    lines = re.findall(r"^(/path/to/memory-mcp/\S+.*|claude mcp add .*)$", host_section(), re.MULTILINE)
    return [shlex.split(line.split("#")[0].replace(PLACEHOLDER, INSTALLED)) for line in lines]


def test_the_readme_has_a_snippet_for_each_host() -> None:
    assert [heading for heading, _ in json_snippets()] == ["Claude Desktop (one-click bundle)"]
    assert [line[:3] for line in command_lines()] == [
        [INSTALLED, "install", "claude-code"],
        [INSTALLED, "uninstall", "claude-code"],
        ["claude", "mcp", "add"],
    ]


def test_every_host_install_knows_has_a_readme_block_with_its_install_and_undo() -> None:
    """Each block's line `memory-mcp install NAME  # ... or OTHER ...; `uninstall NAME` (or OTHER) ...`."""
    lines = re.findall(r"^memory-mcp install ([a-z-]+) .*#(.*)$", host_section(), re.MULTILINE)
    named = {name: comment for name, comment in lines}
    for comment in named.copy().values():
        for other in re.findall(r"\bor ([a-z-]+);", comment):
            named[other] = comment
    assert sorted(named) == sorted(set(INSTALLERS) - {"claude-code"}), "claude-code's block names this checkout's path"
    for name, comment in named.items():
        assert f"uninstall {name}" in comment or f"(or {name})" in comment, f"{name}: how to undo it"


@pytest.mark.parametrize("host", sorted(INSTALLERS))
def test_each_hosts_install_line_runs(host: str, tmp_path: Path) -> None:
    outcome = cli(tmp_path / "data", "install", host, "--dry-run", env={"HOME": str(tmp_path)})
    assert outcome.code == 0 and "would change" in outcome.stdout, outcome.stderr
    assert [path for path in tmp_path.rglob("*") if path.is_file()] == [], "a dry run writes nothing"


async def _remember_and_recall(command: list[str], user_home: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    async with connect_command(command, {"HOME": str(user_home)}) as client:
        added = ok(await client.call_tool("add_memory", {"user_input": "I keep bees", "agent_response": "Lovely"}))
        recalled = ok(await client.call_tool("retrieve_memory", {"query": "what do I keep?"}))
        return added, recalled


@pytest.mark.parametrize(("host", "entry"), json_snippets(), ids=[host for host, _ in json_snippets()])
def test_each_json_snippet_starts_a_server_that_remembers(host: str, entry: dict[str, Any], tmp_path: Path) -> None:
    assert entry.get("type", "stdio") == "stdio"
    _, recalled = run(lambda: _remember_and_recall([entry["command"], *entry["args"]], tmp_path))
    assert "I keep bees" in recalled["context"]
    assert (tmp_path / ".memory-mcp" / "users" / "default" / "pages.jsonl").exists(), "the default data folder"


def test_the_claude_mcp_add_line_starts_a_server_that_remembers(tmp_path: Path) -> None:
    [line] = [line for line in command_lines() if line[0] == "claude"]
    command = line[line.index("--") + 1 :]
    _, recalled = run(lambda: _remember_and_recall(command, tmp_path))
    assert "I keep bees" in recalled["context"]


def test_the_install_and_uninstall_lines_run(tmp_path: Path) -> None:
    install, uninstall = [line for line in command_lines() if line[0] == INSTALLED]
    outcome = cli(tmp_path / "data", *install[1:], "--dry-run", env={"HOME": str(tmp_path)})
    assert outcome.code == 0 and "hook prompt" in outcome.stdout, outcome.stderr
    outcome = cli(tmp_path / "data", *uninstall[1:], "--dry-run", env={"HOME": str(tmp_path)})
    assert outcome.code == 0 and outcome.stdout.count("unchanged") == 2, outcome.stderr


def test_init_writes_the_config_the_server_then_reads_without_being_told(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    written = cli(tmp_path / "unused", "init", env={**env, "MEMORY_MCP_HOME": ""})
    assert written.code == 0, written.stderr
    path = tmp_path / ".memory-mcp" / "config.json"
    assert str(path) in written.stdout and oct(path.stat().st_mode & 0o777) == "0o600"
    assert load_settings(path, environ={}).model_dump(exclude={"data_storage_path", "http"}) == Settings().model_dump(
        exclude={"data_storage_path", "http"}
    ), "every setting at its default"
    from_environment = load_settings(path, environ={"MEMORY_MCP_LLM_MODEL": "qwen2.5:7b", "OPENAI_API_KEY": "k"})
    assert (from_environment.llm_model, from_environment.openai_api_key) == ("qwen2.5:7b", "k"), (
        "the written config hides nothing the environment gives (the bundle passes the model so)"
    )

    again = cli(tmp_path / "unused", "init", env={**env, "MEMORY_MCP_HOME": ""})
    assert again.code == 1 and "--force" in again.stderr, "an edited config is never overwritten unasked"

    config = json.loads(path.read_text(encoding="utf-8"))
    assert config["// user_id"] and config["memory"]["// debounce_seconds"], "each setting is explained"
    config["user_id"] = "ana"
    path.write_text(json.dumps(config), encoding="utf-8")
    entry = json_snippets()[0][1]
    added, _ = run(lambda: _remember_and_recall([entry["command"], *entry["args"]], tmp_path))
    assert added["user_id"] == "ana", "the server read ~/.memory-mcp/config.json with no --config"
