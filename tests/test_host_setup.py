"""`memory-mcp install claude-code`: our entries merged into Claude Code's settings files, nothing
else in them touched, idempotent, a backup of each file it changes, and entries that really run."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from claude_code_session import Transcript, coding_session
from command_line import Outcome, cli, run_command
from stdio_helpers import connect_command, run

pytestmark = pytest.mark.integration

OTHER_SETTINGS: dict[str, Any] = {
    "model": "opus",
    "permissions": {"allow": ["Bash(npm test)"]},
    "hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit-bash"}]}],
    },
}
OTHER_STATE: dict[str, Any] = {
    "numStartups": 12,
    "primaryApiKey": "sk-ant-secret-never-shown",
    "mcpServers": {"memory": {"type": "stdio", "command": "npx", "args": ["@modelcontextprotocol/server-memory"]}},
}


def install(home: Path, user_home: Path, *flags: str, cwd: Path | None = None) -> Outcome:
    return cli(home, "install", "claude-code", *flags, env={"HOME": str(user_home)}, cwd=cwd)


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def handlers(settings: dict[str, Any], event: str) -> list[str]:
    return [hook["command"] for group in settings["hooks"][event] for hook in group["hooks"]]


@pytest.fixture
def user_home(tmp_path: Path) -> Path:
    user_home = tmp_path / "user"
    (user_home / ".claude").mkdir(parents=True)
    # Laid out as Claude Code writes them (a one-line file would be one changed line, all of it shown).
    (user_home / ".claude" / "settings.json").write_text(json.dumps(OTHER_SETTINGS, indent=2), encoding="utf-8")
    (user_home / ".claude.json").write_text(json.dumps(OTHER_STATE, indent=2), encoding="utf-8")
    return user_home


def test_installing_for_the_user_adds_our_entries_keeps_the_rest_and_backs_up(home: Path, user_home: Path) -> None:
    outcome = install(home, user_home)
    assert outcome.code == 0, outcome.stderr
    settings, state = read(user_home / ".claude" / "settings.json"), read(user_home / ".claude.json")

    assert {k: v for k, v in settings.items() if k != "hooks"} == {
        k: v for k, v in OTHER_SETTINGS.items() if k != "hooks"
    }
    assert settings["hooks"]["PreToolUse"] == OTHER_SETTINGS["hooks"]["PreToolUse"]
    [prompt] = handlers(settings, "UserPromptSubmit")
    assert prompt.endswith(" hook prompt")
    [start] = handlers(settings, "SessionStart")
    assert start.endswith(" hook session-start")
    stop = handlers(settings, "Stop")
    assert stop[0] == "notify-send done" and stop[1].endswith(" hook stop") and len(stop) == 2
    assert state["numStartups"] == 12 and state["mcpServers"]["memory"] == OTHER_STATE["mcpServers"]["memory"]
    assert state["mcpServers"]["memory-mcp"]["type"] == "stdio"

    backups = sorted(p.name for p in user_home.rglob("*.bak"))
    assert len(backups) == 2
    [settings_backup] = (user_home / ".claude").glob("settings.json.*.bak")
    assert read(settings_backup) == OTHER_SETTINGS

    again = install(home, user_home)
    assert again.code == 0 and again.stdout.count("unchanged") == 2
    assert read(user_home / ".claude" / "settings.json") == settings
    assert len(list(user_home.rglob("*.bak"))) == 2, "nothing changed: nothing backed up"


def test_uninstalling_takes_out_our_entries_alone_and_leaves_the_files_as_they_were(
    home: Path, user_home: Path
) -> None:
    assert install(home, user_home).code == 0
    env = {"HOME": str(user_home)}
    preview = cli(home, "uninstall", "claude-code", "--dry-run", env=env)
    assert preview.code == 0 and preview.stdout.count("would change") == 2
    assert handlers(read(user_home / ".claude" / "settings.json"), "UserPromptSubmit"), "a dry run writes nothing"

    outcome = cli(home, "uninstall", "claude-code", env=env)
    assert outcome.code == 0, outcome.stderr
    assert read(user_home / ".claude" / "settings.json") == OTHER_SETTINGS
    assert read(user_home / ".claude.json") == OTHER_STATE
    again = cli(home, "uninstall", "claude-code", env=env)
    assert again.code == 0 and again.stdout.count("unchanged") == 2


def test_installing_again_from_elsewhere_replaces_our_hooks_in_place(home: Path, user_home: Path) -> None:
    install(home, user_home)
    install(home, user_home, "--command", "/opt/other/bin/memory-mcp")
    settings = read(user_home / ".claude" / "settings.json")
    assert handlers(settings, "UserPromptSubmit") == ["/opt/other/bin/memory-mcp hook prompt"]
    assert handlers(settings, "Stop") == ["notify-send done", "/opt/other/bin/memory-mcp hook stop"]
    assert read(user_home / ".claude.json")["mcpServers"]["memory-mcp"]["command"] == "/opt/other/bin/memory-mcp"


def test_hooks_installed_with_the_retired_project_agent_flag_still_run_and_a_reinstall_drops_it(
    home: Path, user_home: Path, tmp_path: Path
) -> None:
    """--project-agent kept each project in an agent of its own, apart from the user's memory and
    from the MCP tools; every exchange records its project now, so the flag is accepted and
    ignored, and installing again writes the hooks without it."""
    old = "/opt/old/bin/memory-mcp hook stop --project-agent"
    settings_file = user_home / ".claude" / "settings.json"
    settings_file.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": old}]}]}}))
    transcript = Transcript(tmp_path / "session.jsonl", cwd=str(tmp_path))
    coding_session(transcript)
    ran = run_command(
        [sys.executable, "-m", "memory_mcp", *shlex.split(old)[1:]], home, stdin=json.dumps(transcript.stop_input())
    )
    assert (ran.code, ran.stderr) == (0, "") and (home / "users" / "default" / "pages.jsonl").exists()
    install(home, user_home)
    assert [h for h in handlers(read(settings_file), "Stop") if "--project-agent" in h] == []


def test_dry_run_prints_our_entries_alone_and_writes_nothing(home: Path, user_home: Path) -> None:
    before = {p: p.read_bytes() for p in user_home.rglob("*") if p.is_file()}
    outcome = install(home, user_home, "--dry-run")
    assert outcome.code == 0 and "hook prompt" in outcome.stdout and "would change" in outcome.stdout
    assert "sk-ant-secret" not in outcome.stdout and "notify-send" not in outcome.stdout, "nothing else of the files"
    assert {p: p.read_bytes() for p in user_home.rglob("*") if p.is_file()} == before


def test_reinstalling_keeps_what_the_user_added_to_our_entries_and_writes_through_links(
    home: Path, user_home: Path, tmp_path: Path
) -> None:
    dotfiles = tmp_path / "dotfiles" / "claude-settings.json"
    dotfiles.parent.mkdir()
    (user_home / ".claude" / "settings.json").rename(dotfiles)
    (user_home / ".claude" / "settings.json").symlink_to(dotfiles)
    install(home, user_home)
    state = read(user_home / ".claude.json")
    state["mcpServers"]["memory-mcp"]["env"] = {"OPENAI_API_KEY": "sk-mine"}
    (user_home / ".claude.json").write_text(json.dumps(state), encoding="utf-8")
    settings = read(dotfiles)
    settings["hooks"]["Stop"][-1]["hooks"][0]["timeout"] = 45
    dotfiles.write_text(json.dumps(settings), encoding="utf-8")

    assert install(home, user_home, "--command", "/opt/new/memory-mcp").code == 0
    assert (user_home / ".claude" / "settings.json").is_symlink(), "the link is kept, the file it names updated"
    assert read(user_home / ".claude.json")["mcpServers"]["memory-mcp"]["env"] == {"OPENAI_API_KEY": "sk-mine"}
    [stop] = [h for group in read(dotfiles)["hooks"]["Stop"] for h in group["hooks"] if "memory-mcp" in h["command"]]
    assert stop == {"type": "command", "command": "/opt/new/memory-mcp hook stop", "timeout": 45}


@pytest.mark.parametrize("hooks", [{"Stop": None}, {"Stop": [{"hooks": None}]}, {"Stop": "notify-send"}, []])
def test_hook_sections_of_the_wrong_shape_are_refused_and_nothing_is_written(
    home: Path, user_home: Path, hooks: Any
) -> None:
    (user_home / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks}), encoding="utf-8")
    before = {p: p.read_bytes() for p in user_home.rglob("*") if p.is_file()}
    line = install(home, user_home).error_line()
    assert "hooks" in line and "fix" in line
    assert {p: p.read_bytes() for p in user_home.rglob("*") if p.is_file()} == before


def test_a_settings_file_that_is_not_json_is_an_error_and_nothing_is_written(home: Path, user_home: Path) -> None:
    (user_home / ".claude" / "settings.json").write_text("{ // my notes\n}", encoding="utf-8")
    before = {p: p.read_bytes() for p in user_home.rglob("*") if p.is_file()}
    line = install(home, user_home).error_line()
    assert "settings.json" in line and "JSON" in line
    assert {p: p.read_bytes() for p in user_home.rglob("*") if p.is_file()} == before


def test_a_project_install_writes_private_files_and_its_entries_run(home: Path, tmp_path: Path) -> None:
    """Hooks go to the project's settings.local.json and the server to the project's entry in
    ~/.claude.json: both this user's alone, since they hold this machine's paths. What the
    installer writes is what Claude Code runs: the server entry starts a real stdio session, the
    Stop hook stores the session, each exchange with its project, and the next session's hooks
    bring it back."""
    project, user_home = tmp_path / "app", tmp_path / "user"
    project.mkdir()
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"data_storage_path": str(tmp_path / "data")}), encoding="utf-8")
    outcome = install(home, user_home, "--project", "--config", str(config), cwd=project)
    assert outcome.code == 0, outcome.stderr
    assert not (user_home / ".claude").exists() and not (project / ".mcp.json").exists()
    state = read(user_home / ".claude.json")
    assert "mcpServers" not in state, "nothing for the user's other projects"
    server = state["projects"][str(project.resolve())]["mcpServers"]["memory-mcp"]

    async def tools() -> list[str]:
        async with connect_command([server["command"], *server["args"]]) as client:
            return [tool.name for tool in (await client.list_tools()).tools]

    assert "retrieve_memory" in run(tools)

    settings = read(project / ".claude" / "settings.local.json")
    transcript = Transcript(tmp_path / "session.jsonl", cwd=str(project))
    coding_session(transcript)
    [stop] = handlers(settings, "Stop")
    [start] = handlers(settings, "SessionStart")
    [prompt] = handlers(settings, "UserPromptSubmit")
    assert str(config) in stop and str(config) in start and str(config) in prompt
    stored = _run_hook(home, stop, transcript.stop_input(), project)
    assert (stored.code, stored.stdout, stored.stderr) == (0, "", "")
    later = Transcript(tmp_path / "later.jsonl", session_id="later", cwd=str(project))
    digest = _run_hook(home, start, later.start_input(), project)
    assert "Polars" in json.loads(digest.stdout)["hookSpecificOutput"]["additionalContext"]
    recalled = _run_hook(home, prompt, later.prompt_input("Which dataframe library?"), project)
    assert recalled.stdout == "", "the digest gave it already"
    pages = (tmp_path / "data" / "users" / "default" / "pages.jsonl").read_text(encoding="utf-8").splitlines()
    assert {json.loads(line)["project"] for line in pages} == {str(project.resolve())}, "the user's own memory"


def _run_hook(home: Path, command: str, event: dict[str, Any], cwd: Path) -> Outcome:
    """The hook's command line exactly as the settings hold it, as Claude Code runs it."""
    return run_command(shlex.split(command), home, stdin=json.dumps(event), cwd=cwd)
