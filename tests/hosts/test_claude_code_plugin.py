"""memory-mcp as a Claude Code plugin: this checkout is a marketplace, the real Claude Code CLI
(npm, pinned) validates it, adds it and installs the plugin without a prompt, and a `claude -p`
session against a scripted Anthropic API on 127.0.0.1 gets the plugin's hooks and MCP server.

The plugin runs memory-mcp with `uvx` from `${CLAUDE_PLUGIN_ROOT}`; the test gives uv the cache this
environment keeps and UV_OFFLINE=1, so the package is built from the checkout with no network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from host_clis import CLAUDE_CODE, host_command
from http_helpers import HttpServer, issue_token
from memory_blocks import blocks
from project import PROJECT_ROOT, network_environment
from scripted_anthropic import Reply, ScriptedAnthropic, ToolCall, last_tool_results

import memory_mcp

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

MARKET = "memory-mcp"
PLUGIN = f"memory-mcp@{MARKET}"
# A plugin's MCP tools are named after the plugin and the server it declares.
RETRIEVE = "mcp__plugin_memory-mcp_memory-mcp__retrieve_memory"
LISTING_TURNS = 60  # at most, half a second apart: the model's wait for the plugin's server


def _manifest(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((PROJECT_ROOT / ".claude-plugin" / name).read_text(encoding="utf-8"))
    return loaded


def test_the_plugins_version_is_the_packages() -> None:
    assert _manifest("plugin.json")["version"] == memory_mcp.__version__


@dataclass
class PluginHost:
    """The Claude Code CLI in a home of its own, where the plugin is to be installed."""

    executable: Path
    user_home: Path
    api: ScriptedAnthropic

    def environment(self) -> dict[str, str]:
        """What Claude Code runs with: no MEMORY_MCP_HOME of its own (the plugin's option decides)
        and uv from this environment, offline, on the cache kept between runs."""
        return {
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
            "HOME": str(self.user_home),
            "CLAUDE_CONFIG_DIR": str(self.user_home / ".claude"),
            "UV_CACHE_DIR": str(Path(sys.prefix) / "uv-cache"),
            "UV_OFFLINE": "1",
            "ANTHROPIC_BASE_URL": self.api.base_url,
            "ANTHROPIC_API_KEY": "sk-ant-test-not-a-key",
            "ENABLE_TOOL_SEARCH": "false",  # MCP tools listed to the model directly
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }

    def claude(self, *arguments: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.executable), *arguments],
            cwd=cwd or self.user_home,
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    def session(self, prompt: str, project: Path, *flags: str) -> list[dict[str, Any]]:
        """`claude -p PROMPT [FLAGS]` in `project`; the requests the model was sent meanwhile."""
        before = len(self.api.requests)
        done = self.claude("-p", prompt, *flags, cwd=project)
        assert done.returncode == 0, done.stderr[-2000:]
        sent: list[dict[str, Any]] = self.api.requests[before:]
        return sent


@pytest.fixture
def host(tmp_path: Path) -> Iterator[PluginHost]:
    user_home = tmp_path / "user"
    user_home.mkdir()
    api = ScriptedAnthropic().start()
    try:
        api.respond = once_the_server_is_listed(lambda request: "Done.")
        plugin_host = PluginHost(host_command(CLAUDE_CODE), user_home, api)
        # What a user's first session does while Claude Code waits: uv fetches the dependencies
        # (from the package index, as a user's would: on a fresh machine the cache is empty) and
        # builds the checkout into its cache. Done here, the sessions run offline, and the server's
        # start-up in a session is not a race with that build.
        environment = plugin_host.environment()
        online = {name: value for name, value in environment.items() if name != "UV_OFFLINE"} | network_environment()
        built = subprocess.run(
            ["uvx", "--from", str(PROJECT_ROOT), "--with-editable", str(PROJECT_ROOT), "memory-mcp", "--version"],
            env=online,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert built.returncode == 0, built.stderr[-2000:]
        yield plugin_host
    finally:
        api.stop()


def test_claude_code_validates_the_marketplace_and_the_plugin(host: PluginHost) -> None:
    for target in (PROJECT_ROOT, PROJECT_ROOT / ".claude-plugin" / "plugin.json"):
        done = host.claude("plugin", "validate", str(target))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "✔ Validation passed" in done.stdout and "✘" not in done.stdout, done.stdout


def test_the_installed_plugin_remembers_across_sessions_in_the_chosen_folder(host: PluginHost, home: Path) -> None:
    added = host.claude("plugin", "marketplace", "add", str(PROJECT_ROOT))
    assert added.returncode == 0, added.stdout + added.stderr
    installed = host.claude("plugin", "install", PLUGIN, "--config", f"memory_folder={home}")
    assert installed.returncode == 0, installed.stdout + installed.stderr

    shop = host.user_home / "code" / "webshop"
    (shop / ".git").mkdir(parents=True)
    first = host.session("In this repo we use pnpm, never npm, and the tests run with vitest.", shop)
    assert not any(blocks(request) for request in first), "nothing remembered yet"
    assert offers_retrieve(first[-1]), "the plugin's server, listed"
    assert (home / "users" / "default" / "pages.jsonl").exists(), "the Stop hook stored it in the chosen folder"

    later = host.session("Which package manager should I use to add a dependency?", shop)
    given = "\n".join(block for request in later for block in blocks(request))
    assert "we use pnpm, never npm" in given, "the prompt hook put the earlier exchange before the model"

    removed = host.claude("plugin", "uninstall", PLUGIN)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    listed = json.loads(host.claude("plugin", "list", "--json").stdout)
    assert PLUGIN not in [plugin["id"] for plugin in listed]


def test_with_every_option_left_empty_the_plugin_remembers_in_the_default_folder(host: PluginHost) -> None:
    """An option never set is absent from the hooks' environment (and a hook whose arguments named
    it would not run at all): the hooks read it from there and fall back to ~/.memory-mcp."""
    assert host.claude("plugin", "marketplace", "add", str(PROJECT_ROOT)).returncode == 0
    assert host.claude("plugin", "install", PLUGIN).returncode == 0
    project = host.user_home / "code" / "webshop"
    (project / ".git").mkdir(parents=True)
    first = host.session("In this repo we use pnpm, never npm, and the tests run with vitest.", project)
    assert offers_retrieve(first[-1]), "the server runs on defaults"
    assert (host.user_home / ".memory-mcp" / "users" / "default" / "pages.jsonl").exists()


def test_with_a_team_server_set_the_plugins_server_and_hooks_use_it_alone(host: PluginHost, tmp_path: Path) -> None:
    """The two server options make the hooks and the server the plugin starts use the team's
    memory, for the token's user: nothing is kept on this machine."""
    config = tmp_path / "server.json"
    config.write_text(json.dumps({"data_storage_path": str(tmp_path / "team")}), encoding="utf-8")
    token = issue_token(config, "dana@corp.example")
    with HttpServer(config, tmp_path / "server.log") as team:
        assert host.claude("plugin", "marketplace", "add", str(PROJECT_ROOT)).returncode == 0
        installed = host.claude(
            "plugin", "install", PLUGIN, "--config", f"memory_server_url={team.base}", "--config",
            f"memory_server_token={token}",
        )  # fmt: skip
        assert installed.returncode == 0, installed.stdout + installed.stderr
        shop = host.user_home / "code" / "webshop"
        (shop / ".git").mkdir(parents=True)
        first = host.session("In this repo we use pnpm, never npm, and the tests run with vitest.", shop)
        assert offers_retrieve(first[-1]), "served from the team server"
        host.api.respond = once_the_server_is_listed(recall_once)
        later = host.session(
            "Which package manager should I use to add a dependency?", shop, "--allowedTools", RETRIEVE
        )
    given = "\n".join(block for request in later for block in blocks(request))
    assert "we use pnpm, never npm" in given, "the prompt hook asked the team server"
    recalled = [result for request in later for result in last_tool_results(request)]
    assert any("we use pnpm, never npm" in result for result in recalled), "the tool call reached the team server"
    assert (tmp_path / "team" / "users" / "dana%40corp%2eexample" / "pages.jsonl").exists()
    assert not list(host.user_home.glob(".memory-mcp/users/*/pages.jsonl")), "nothing kept on this machine"


def recall_once(request: dict[str, Any]) -> Reply:
    """The model calls the plugin's retrieve tool once, where it is offered, then answers."""
    if offers_retrieve(request) and not last_tool_results(request):
        return ToolCall(RETRIEVE, {"query": "package manager pnpm npm"})
    return "Use pnpm."


def once_the_server_is_listed(then: Callable[[dict[str, Any]], Reply]) -> Callable[[dict[str, Any]], Reply]:
    """The model's replies: `then`'s once the plugin's tools are offered; before, a look at the
    project's files, half a second apart, LISTING_TURNS times at most. Claude Code connects a
    plugin's server without waiting for it and offers its tools from the next request on: on a
    loaded machine, a session's first request goes before the server has started."""

    def respond(request: dict[str, Any]) -> Reply:
        if offers_retrieve(request) or len(request.get("messages", [])) > 2 * LISTING_TURNS:
            return then(request)
        time.sleep(0.5)
        return ToolCall("Glob", {"pattern": "*"})

    return respond


def offers_retrieve(request: dict[str, Any]) -> bool:
    return any(tool.get("name") == RETRIEVE for tool in request.get("tools", []))
