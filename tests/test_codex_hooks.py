"""Codex CLI's hooks through the real `memory-mcp hook ... --host codex` command, with payloads in
the shape Codex 0.171.0 sends (captured from it), and `memory-mcp install codex`: the hooks in its
hooks.json, everything else in it kept, idempotent, undone exactly."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from claude_code_session import Transcript, coding_session
from command_line import Outcome, cli

from memory_mcp.base.settings import Settings
from memory_mcp.hosts.registry import adapter_for
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

pytestmark = pytest.mark.integration


class Rollout:
    """A Codex session's rollout file, as Codex writes it, and the JSON its hooks receive."""

    def __init__(self, codex_home: Path, session_id: str, cwd: str = "/work/shop") -> None:
        folder = codex_home / "sessions" / "2026" / "11" / "27"
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"rollout-2026-11-27T11-48-10-{session_id}.jsonl"
        self.session_id, self.cwd = session_id, cwd
        self.turns = 0
        self._write({"type": "session_meta", "payload": {"id": session_id, "cwd": cwd, "cli_version": "0.171.0"}})

    def _write(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as file:
            file.write(json.dumps({"timestamp": "2026-11-27T11:48:10.922Z", **record}) + "\n")

    def _common(self, event: str) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "transcript_path": str(self.path),
            "cwd": self.cwd,
            "hook_event_name": event,
            "model": "gpt-5.5",
            "permission_mode": "default",
        }

    def start_input(self, source: str = "startup") -> dict[str, Any]:
        return {**self._common("SessionStart"), "source": source}

    def prompt_input(self, prompt: str) -> dict[str, Any]:
        """The prompt hook's input, once Codex has written the turn's user message."""
        self.turns += 1
        turn = self.turn_id()
        self._write({"type": "event_msg", "payload": {"type": "task_started", "turn_id": turn}})
        message = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}
        self._write({"type": "response_item", "payload": message})
        item = {"type": "UserMessage", "id": f"user-{turn}", "content": [{"type": "text", "text": prompt}]}
        self._write({"type": "event_msg", "payload": {"type": "item_completed", "turn_id": turn, "item": item}})
        return {**self._common("UserPromptSubmit"), "turn_id": turn, "prompt": prompt}

    def stop_input(self, reply: str) -> dict[str, Any]:
        return {
            **self._common("Stop"),
            "turn_id": self.turn_id(),
            "stop_hook_active": False,
            "last_assistant_message": reply,
        }

    def turn_id(self) -> str:
        return f"{self.session_id[:8]}-turn-{self.turns:04d}"


def hook(home: Path, event: str, payload: dict[str, Any], *flags: str) -> Outcome:
    return cli(home, "hook", event, *flags, stdin=json.dumps(payload))


def stored(home: Path) -> list[tuple[str, str, str | None]]:
    service = MemoryService(Settings(data_storage_path=home))
    try:
        scope = service.resolve_scope(None, None)
        pages = service.store.read_pages(Scope(scope.user_id, scope.agent_name)).pages
        return [(page.user_input, page.agent_response, page.thread_id) for page in pages]
    finally:
        service.close()


def context_of(outcome: Outcome, event: str) -> str:
    assert (outcome.code, outcome.stderr) == (0, "")
    output = json.loads(outcome.stdout)
    assert output == {
        "hookSpecificOutput": {
            "hookEventName": event,
            "additionalContext": output["hookSpecificOutput"]["additionalContext"],
        }
    }
    context: str = output["hookSpecificOutput"]["additionalContext"]
    assert context.startswith("<memory>") and context.rstrip().endswith("</memory>")
    return context


@pytest.fixture
def codex_home(tmp_path: Path) -> Path:
    return tmp_path / "user" / ".codex"


def test_stop_stores_the_turns_prompt_and_reply_once_even_when_stop_repeats(home: Path, codex_home: Path) -> None:
    session = Rollout(codex_home, "01a21cd5-9c01-72d1-8c13-091126c0bfde")
    assert hook(home, "prompt", session.prompt_input("Which test runner do we use?"), "--host", "codex").stdout == ""
    stop = session.stop_input("Vitest, run with pnpm test.")
    for _ in range(2):
        outcome = hook(home, "stop", stop, "--host", "codex")
        assert (outcome.code, outcome.stdout, outcome.stderr) == (0, "", "")
    assert stored(home) == [("Which test runner do we use?", "Vitest, run with pnpm test.", session.session_id)]

    session.prompt_input("And the linter?")
    hook(home, "stop", session.stop_input("Biome."))  # no --host: recognised by its turn_id
    assert [exchange[0] for exchange in stored(home)] == ["Which test runner do we use?", "And the linter?"]


def test_a_later_session_is_given_the_earlier_turn_as_codex_context(home: Path, codex_home: Path) -> None:
    first = Rollout(codex_home, "01a21cd5-0000-7000-8000-000000000001")
    first.prompt_input("In this repo we use pnpm, never npm.")
    hook(home, "stop", first.stop_input("Understood: pnpm only."), "--host", "codex")

    later = Rollout(codex_home, "01a21cd5-0000-7000-8000-000000000002")
    asked = hook(home, "prompt", later.prompt_input("Which package manager do we use here, pnpm or npm?"))
    assert "we use pnpm, never npm" in context_of(asked, "UserPromptSubmit"), "recognised as Codex by turn_id"


def test_a_digest_and_a_block_fit_what_codex_keeps_inline(home: Path, codex_home: Path) -> None:
    session = Rollout(codex_home, "01a21cd5-0000-7000-8000-000000000003")
    for turn in range(30):
        session.prompt_input(f"Garden plan, part {turn}: " + "tomatoes/basil[courgettes]{x}=1; " * 40)
        hook(home, "stop", session.stop_input(f"Noted part {turn}: " + "water_them(morning)->ok; " * 60))
    later = Rollout(codex_home, "01a21cd5-0000-7000-8000-000000000004")
    for event, payload, name in (
        ("session-start", later.start_input(), "SessionStart"),
        ("prompt", later.prompt_input("What is in the garden plan: tomatoes, basil?"), "UserPromptSubmit"),
    ):
        context = context_of(hook(home, event, payload), name)  # a session start: by its rollout file
        assert 1000 < len(context.encode()) <= 9_000, "Codex cuts beyond 2,500 tokens of 4 bytes"


def test_a_claude_code_payload_is_never_taken_for_codex(tmp_path: Path, codex_home: Path) -> None:
    claude = Transcript(tmp_path / "claude" / "projects" / "-work-app" / "session.jsonl")
    coding_session(claude)
    for payload in (claude.start_input(), claude.prompt_input("Hi"), claude.stop_input()):
        assert adapter_for(None, payload, {"CODEX_HOME": str(codex_home)}).name == "claude-code"
    session = Rollout(codex_home, "01a21cd5-0000-7000-8000-000000000005")
    for payload in (session.start_input(), session.prompt_input("Hi"), session.stop_input("Hello")):
        assert adapter_for(None, payload, {}).name == "codex"


USERS_HOOKS: dict[str, Any] = {
    "hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done", "timeout": 5}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit-bash"}]}],
    }
}


USERS_CONFIG = """\
# mine
model = "gpt-5.5"  # the model I use

[mcp_servers.acme]
command = "npx"
env = { GITHUB_TOKEN = "ghp_x1Y2x1Y2x1Y2x1Y2x1Y2x1Y2x1Y2x1Y2x1Y2" }

[hooks.state."/home/dev/.codex/hooks.json:stop:0:0"]
trusted_hash = "sha256:13e3ec12"
"""


def test_install_adds_our_three_hooks_keeps_the_users_and_uninstall_takes_out_exactly_ours(
    home: Path, codex_home: Path
) -> None:
    codex_home.mkdir(parents=True)
    hooks_file, config_file = codex_home / "hooks.json", codex_home / "config.toml"
    hooks_file.write_text(json.dumps(USERS_HOOKS), encoding="utf-8")
    config_file.write_text(USERS_CONFIG, encoding="utf-8")
    user = {"HOME": str(codex_home.parent)}

    dry = cli(home, "install", "codex", "--dry-run", env=user)
    assert dry.code == 0 and "--host codex" in dry.stdout and json.loads(hooks_file.read_text()) == USERS_HOOKS

    installed = cli(home, "install", "codex", env=user)
    assert installed.code == 0, installed.stderr
    assert "/hooks" in installed.stdout, "how to trust the hooks"
    config = tomllib.loads(config_file.read_text(encoding="utf-8"))
    assert config["model"] == "gpt-5.5" and config["hooks"] == tomllib.loads(USERS_CONFIG)["hooks"]
    assert sorted(config["mcp_servers"]) == ["acme", "memory-mcp"]
    server = config["mcp_servers"]["memory-mcp"]
    assert commands_run(server["command"], server["args"])
    assert {"MEMORY_MCP_HOME", "OPENAI_BASE_URL"} <= set(server["env_vars"]), "Codex forwards what settings read"
    assert config_file.read_text(encoding="utf-8").startswith('# mine\nmodel = "gpt-5.5"  # the model I use\n')
    hooks = json.loads(hooks_file.read_text())["hooks"]
    commands = {event: [h["command"] for group in hooks[event] for h in group["hooks"]] for event in hooks}
    assert commands["PreToolUse"] == ["audit-bash"] and commands["Stop"][0] == "notify-send done"
    for event, name in (("SessionStart", "session-start"), ("UserPromptSubmit", "prompt"), ("Stop", "stop")):
        assert commands[event][-1].endswith(f" hook {name} --host codex")
    [backup] = codex_home.glob("hooks.json.*.bak")
    assert json.loads(backup.read_text()) == USERS_HOOKS

    again = cli(home, "install", "codex", env=user)
    assert again.code == 0 and "unchanged" in again.stdout and json.loads(hooks_file.read_text())["hooks"] == hooks

    removed = cli(home, "uninstall", "codex", env=user)
    assert removed.code == 0, removed.stderr
    assert json.loads(hooks_file.read_text()) == USERS_HOOKS
    assert config_file.read_text(encoding="utf-8") == USERS_CONFIG, "comments, layout and trust kept to the byte"


def test_installing_again_keeps_the_variables_a_user_added_to_our_server(home: Path, codex_home: Path) -> None:
    codex_home.mkdir(parents=True)
    config_file = codex_home / "config.toml"
    config_file.write_text('[mcp_servers.memory-mcp]\ncommand = "old"\nenv_vars = ["MY_PROXY"]\n', encoding="utf-8")
    assert cli(home, "install", "codex", env={"HOME": str(codex_home.parent)}).code == 0
    server = tomllib.loads(config_file.read_text(encoding="utf-8"))["mcp_servers"]["memory-mcp"]
    assert server["env_vars"][0] == "MY_PROXY" and "MEMORY_MCP_HOME" in server["env_vars"]
    assert server["command"] != "old"


def commands_run(command: str, args: list[str]) -> bool:
    """Whether the server's command line, as written, starts memory-mcp (its --version answers)."""
    ran = subprocess.run([command, *args, "--version"], capture_output=True, text=True, timeout=60, check=False)
    return ran.returncode == 0 and "memory-mcp" in ran.stdout


def test_install_for_a_project_writes_its_own_hooks_file(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "shop"
    project.mkdir()
    user_home = tmp_path / "user"
    assert cli(home, "install", "codex", "--project", env={"HOME": str(user_home)}, cwd=project).code == 0
    hooks = json.loads((project / ".codex" / "hooks.json").read_text())["hooks"]
    assert sorted(hooks) == ["SessionStart", "Stop", "UserPromptSubmit"]
    assert not (user_home / ".codex").exists(), "nothing of the user's touched"
