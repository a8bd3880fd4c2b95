"""Gemini CLI's hooks run as Gemini CLI runs them: `memory-mcp hook ... --host gemini` in its own
process, stdin and environment in the shape Gemini CLI 0.61.0 was seen to send; and
`memory-mcp install gemini` / `uninstall gemini` on a user's settings.json."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from command_line import Outcome, cli, run_command

from memory_mcp.base.settings import Settings
from memory_mcp.hosts.registry import adapter_for
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

integration = pytest.mark.integration

TOLD = "In this repo we use pnpm, never npm, and the tests run with vitest."
REPLY = "Noted: pnpm and vitest."
# What `gemini -p` puts before the prompt when SessionStart gave context (Gemini escapes < and >).
START_CONTEXT = "<hook_context>&lt;memory&gt;\n## Lately in webshop\n&lt;/memory&gt;</hook_context>\n\n"
USERS_SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "hooks": {
        "AfterAgent": [{"hooks": [{"type": "command", "name": "notify", "command": "notify-send done"}]}],
        "BeforeTool": [{"matcher": "run_shell_command", "hooks": [{"type": "command", "command": "audit-shell"}]}],
    },
    "mcpServers": {"github": {"command": "github-mcp", "args": ["stdio"], "env": {"GITHUB_TOKEN": "ghp_secret"}}},
}


def payload(
    event: str, session: str, cwd: Path, stamp: str = "2026-11-27T11:49:53.998Z", **fields: Any
) -> dict[str, Any]:
    """A hook's stdin as Gemini CLI sends it."""
    chats = cwd.parent / ".gemini" / "tmp" / cwd.name / "chats" / f"session-2026-11-27T11-49-{session[:8]}.jsonl"
    sent = {"session_id": session, "transcript_path": str(chats), "cwd": str(cwd), "hook_event_name": event}
    return {**sent, "timestamp": stamp, **fields}


def hook(home: Path, event: str, sent: dict[str, Any], *flags: str) -> Outcome:
    """`memory-mcp hook EVENT FLAGS` with the environment Gemini CLI gives its hooks."""
    folder = sent["cwd"]
    env = {"GEMINI_SESSION_ID": sent["session_id"], "GEMINI_PROJECT_DIR": folder, "GEMINI_CWD": folder}
    return cli(home, "hook", event, *flags, stdin=json.dumps(sent), env={**env, "CLAUDE_PROJECT_DIR": folder})


def context_of(outcome: Outcome, event: str) -> str:
    assert (outcome.code, outcome.stderr) == (0, "")
    answer = json.loads(outcome.stdout)
    assert answer["hookSpecificOutput"]["hookEventName"] == event
    context: str = answer["hookSpecificOutput"]["additionalContext"]
    return context


def stored(home: Path) -> list[tuple[str, str, str | None]]:
    service = MemoryService(Settings(data_storage_path=home))
    try:
        return [(p.user_input, p.agent_response, p.thread_id) for p in service.store.read_pages(Scope("default")).pages]
    finally:
        service.close()


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    folder = tmp_path / "code" / "webshop"
    folder.mkdir(parents=True)
    return folder


@integration
def test_after_agent_stores_the_turn_once_as_the_user_typed_it(home: Path, shop: Path) -> None:
    turn = payload("AfterAgent", "s-one", shop, prompt=START_CONTEXT + TOLD, prompt_response=REPLY)
    assert hook(home, "stop", turn, "--host", "gemini") == Outcome(0, "", "")
    assert stored(home) == [(TOLD, REPLY, "s-one")], "without the context Gemini put before the prompt"
    hook(home, "stop", turn, "--host", "gemini")
    assert stored(home) == [(TOLD, REPLY, "s-one")], "the same turn's hook again (user and project): stored once"

    retried = {**turn, "timestamp": "2026-11-27T11:50:01.000Z", "stop_hook_active": True}
    empty = payload(
        "AfterAgent", "s-one", shop, "2026-11-27T11:51:00.000Z", prompt="go", prompt_response="[no response text]"
    )
    for sent in (retried, empty):
        assert hook(home, "stop", sent, "--host", "gemini") == Outcome(0, "", "")
    assert len(stored(home)) == 1, "a retried turn, and a turn without a reply, store nothing"


@integration
def test_before_agent_gives_another_session_what_is_relevant_as_json_context(home: Path, shop: Path) -> None:
    prompt = payload("BeforeAgent", "s-two", shop, prompt="Which package manager for a new dependency?")
    assert hook(home, "prompt", prompt, "--host", "gemini").stdout == "", "nothing stored yet"
    hook(home, "stop", payload("AfterAgent", "s-one", shop, prompt=TOLD, prompt_response=REPLY), "--host", "gemini")

    context = context_of(hook(home, "prompt", prompt, "--host", "gemini"), "BeforeAgent")
    assert context.startswith("<memory>") and TOLD in context
    start = context_of(
        hook(home, "session-start", payload("SessionStart", "s-three", shop, source="startup")), "SessionStart"
    )
    assert "## Lately in webshop" in start and TOLD in start


@integration
def test_without_host_a_gemini_payload_is_recognised(home: Path, shop: Path) -> None:
    hook(home, "stop", payload("AfterAgent", "s-one", shop, prompt=START_CONTEXT + TOLD, prompt_response=REPLY))
    assert stored(home) == [(TOLD, REPLY, "s-one")]
    prompt = payload("BeforeAgent", "s-two", shop, prompt="Which package manager for a new dependency?")
    assert TOLD in context_of(hook(home, "prompt", prompt), "BeforeAgent")


def test_a_session_start_is_geminis_only_with_its_session_in_the_environment(shop: Path) -> None:
    start = payload("SessionStart", "s-one", shop, source="startup")
    assert adapter_for(None, start, {"GEMINI_SESSION_ID": "s-one"}).name == "gemini"
    assert adapter_for(None, payload("BeforeAgent", "s-one", shop, prompt="hi"), {}).name == "gemini"
    claude_start = {"session_id": "c-one", "cwd": str(shop), "hook_event_name": "SessionStart", "source": "startup"}
    for environ in ({}, {"GEMINI_SESSION_ID": "s-one", "GEMINI_PROJECT_DIR": str(shop)}):
        assert adapter_for(None, claude_start, environ).name == "claude-code", "Claude Code started inside Gemini CLI"
    claude_prompt = {**claude_start, "hook_event_name": "UserPromptSubmit", "prompt": "hi"}
    assert adapter_for(None, claude_prompt, {"GEMINI_SESSION_ID": "c-one"}).name == "claude-code"


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def install(home: Path, user_home: Path, *args: str, cwd: Path | None = None) -> Outcome:
    return cli(home, *args, env={"HOME": str(user_home)}, cwd=cwd)


def ours(settings: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [hook for group in settings["hooks"][event] for hook in group["hooks"] if "memory-mcp" in hook["name"]]


@pytest.fixture
def user_home(tmp_path: Path) -> Path:
    user_home = tmp_path / "user"
    (user_home / ".gemini").mkdir(parents=True)
    # Laid out as Gemini CLI writes it (a one-line file would be one changed line, all of it shown).
    (user_home / ".gemini" / "settings.json").write_text(json.dumps(USERS_SETTINGS, indent=2), encoding="utf-8")
    return user_home


@integration
def test_install_adds_our_hooks_and_server_keeps_the_users_and_uninstall_takes_out_ours_alone(
    home: Path, user_home: Path, shop: Path
) -> None:
    settings_file = user_home / ".gemini" / "settings.json"
    outcome = install(home, user_home, "install", "gemini")
    assert outcome.code == 0 and "trust" in outcome.stdout, outcome.stderr
    settings = read(settings_file)
    expected = {
        "SessionStart": ("session-start", 15000),
        "BeforeAgent": ("prompt", 15000),
        "AfterAgent": ("stop", 30000),
    }
    for event, (name, timeout) in expected.items():
        [handler] = ours(settings, event)
        assert handler["command"].endswith(f" hook {name} --host gemini") and handler["timeout"] == timeout
    assert settings["hooks"]["AfterAgent"][0] == USERS_SETTINGS["hooks"]["AfterAgent"][0], "the user's first"
    assert settings["hooks"]["BeforeTool"] == USERS_SETTINGS["hooks"]["BeforeTool"]
    assert settings["security"] == USERS_SETTINGS["security"]
    assert settings["mcpServers"]["github"] == USERS_SETTINGS["mcpServers"]["github"]
    assert settings["mcpServers"]["memory-mcp"]["command"] == shlex.split(ours(settings, "AfterAgent")[0]["command"])[0]
    [backup] = (user_home / ".gemini").glob("settings.json.*.bak")
    assert read(backup) == USERS_SETTINGS

    again = install(home, user_home, "install", "gemini")
    assert again.code == 0 and "unchanged" in again.stdout and read(settings_file) == settings
    sent = payload("AfterAgent", "s-one", shop, prompt=TOLD, prompt_response=REPLY)
    ran = run_command(shlex.split(ours(settings, "AfterAgent")[0]["command"]), home, stdin=json.dumps(sent))
    assert (ran.code, ran.stderr) == (0, "") and stored(home) == [(TOLD, REPLY, "s-one")], "the entry really runs"

    preview = install(home, user_home, "uninstall", "gemini", "--dry-run")
    assert preview.code == 0 and "would change" in preview.stdout and read(settings_file) == settings
    assert install(home, user_home, "uninstall", "gemini").code == 0
    assert read(settings_file) == USERS_SETTINGS
    assert "unchanged" in install(home, user_home, "uninstall", "gemini").stdout


@integration
def test_a_dry_run_shows_our_entries_alone_and_project_installs_go_to_the_projects_settings(
    home: Path, user_home: Path, shop: Path
) -> None:
    before = {p: p.read_bytes() for p in user_home.rglob("*") if p.is_file()}
    preview = install(home, user_home, "install", "gemini", "--dry-run")
    assert preview.code == 0 and "hook prompt --host gemini" in preview.stdout and "would change" in preview.stdout
    assert "ghp_secret" not in preview.stdout and "notify-send" not in preview.stdout, "nothing else of the file"
    assert {p: p.read_bytes() for p in user_home.rglob("*") if p.is_file()} == before

    assert install(home, user_home, "install", "gemini", "--project", cwd=shop).code == 0
    project = read(shop / ".gemini" / "settings.json")
    assert [len(ours(project, event)) for event in ("SessionStart", "BeforeAgent", "AfterAgent")] == [1, 1, 1]
    assert {p: p.read_bytes() for p in user_home.rglob("*") if p.is_file()} == before, "the user's file untouched"
    assert install(home, user_home, "uninstall", "gemini", "--project", cwd=shop).code == 0
    assert not (shop / ".gemini" / "settings.json").exists(), "the file install made is gone"


@integration
def test_installing_again_from_elsewhere_replaces_ours_in_place_keeping_what_the_user_changed(
    home: Path, user_home: Path
) -> None:
    settings_file = user_home / ".gemini" / "settings.json"
    install(home, user_home, "install", "gemini")
    settings = read(settings_file)
    ours(settings, "AfterAgent")[0]["timeout"] = 45000
    settings["mcpServers"]["memory-mcp"]["env"] = {"OPENAI_API_KEY": "sk-mine"}
    settings_file.write_text(json.dumps(settings), encoding="utf-8")

    assert install(home, user_home, "install", "gemini", "--command", "/opt/other/bin/memory-mcp").code == 0
    settings = read(settings_file)
    [stop] = ours(settings, "AfterAgent")
    assert stop == {
        "type": "command",
        "name": "memory-mcp-stop",
        "command": "/opt/other/bin/memory-mcp hook stop --host gemini",
        "timeout": 45000,
    }
    assert settings["mcpServers"]["memory-mcp"] == {
        "command": "/opt/other/bin/memory-mcp",
        "args": [],
        "env": {"OPENAI_API_KEY": "sk-mine"},
    }
