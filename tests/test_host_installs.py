"""`memory-mcp install HOST` and `uninstall HOST` for Cursor, Windsurf, Cline, Copilot CLI and
VS Code: our entries merged into the user's files (theirs kept, a backup of each file changed),
installing twice changes nothing, a dry run prints the lines it would change (no secret of the
user's) and writes nothing, uninstalling leaves the files as they were, and what is written runs."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from command_line import Outcome, cli, cli_env
from hook_calls import stored

pytestmark = pytest.mark.integration

SECRET = "ghp_" + "x1Y2" * 9
OTHER_SERVER = {"command": "npx", "args": ["@acme/mcp"], "env": {"GITHUB_TOKEN": SECRET}}
# Each host's files as a user has them before installing (relative to the home folder).
USERS_FILES: dict[str, dict[str, Any]] = {
    "cursor": {
        ".cursor/hooks.json": {"version": 1, "hooks": {"afterFileEdit": [{"command": "./format.sh"}]}},
        ".cursor/mcp.json": {"mcpServers": {"acme": OTHER_SERVER}},
    },
    "windsurf": {
        ".codeium/windsurf/hooks.json": {"hooks": {"post_cascade_response": [{"command": "notify-send done"}]}},
        ".codeium/windsurf/mcp_config.json": {"mcpServers": {"acme": OTHER_SERVER}},
    },
    "copilot": {
        ".copilot/hooks/audit.json": {"version": 1, "hooks": {"preToolUse": [{"type": "command", "bash": "audit"}]}},
        ".copilot/mcp-config.json": {"mcpServers": {"acme": {"type": "local", **OTHER_SERVER, "tools": ["*"]}}},
    },
    "vscode": {".copilot/hooks/audit.json": {"hooks": {"PreToolUse": [{"type": "command", "command": "audit"}]}}},
    "cline": {"Documents/Cline/Hooks/PreToolUse": "#!/bin/sh\necho '{\"cancel\": false}'\n"},
}
# Where each host's stop hook is written: (file, how to find the command in it).
STOP_HOOK = {
    "cursor": (".cursor/hooks.json", ("hooks", "afterAgentResponse")),
    "windsurf": (".codeium/windsurf/hooks.json", ("hooks", "post_cascade_response")),
    "copilot": (".copilot/hooks/memory-mcp.json", ("hooks", "Stop")),
    "vscode": (".copilot/hooks/memory-mcp.json", ("hooks", "Stop")),
    "cline": ("Documents/Cline/Hooks/TaskComplete", ()),
}
HOSTS = sorted(USERS_FILES)


def write(path: Path, content: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    if isinstance(content, str):
        path.chmod(0o755)


def read(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    return json.loads(text) if path.suffix == ".json" else text


def snapshot(folder: Path) -> dict[Path, Any]:
    return {path: read(path) for path in folder.rglob("*") if path.is_file() and ".bak" not in path.name}


def read_backup(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    return json.loads(text) if ".json." in path.name else text


def contained(mine: Any, theirs: Any) -> bool:
    """Whether everything in `mine` is still in `theirs` (lists may have gained items)."""
    if isinstance(mine, dict):
        return isinstance(theirs, dict) and all(key in theirs and contained(mine[key], theirs[key]) for key in mine)
    if isinstance(mine, list):
        return isinstance(theirs, list) and all(item in theirs for item in mine)
    return bool(mine == theirs)


def run(home: Path, user_home: Path, *args: str) -> Outcome:
    return cli(home, *args, env={"HOME": str(user_home)})


@pytest.fixture
def user_home(tmp_path: Path) -> Path:
    return tmp_path / "user"


def users_files(user_home: Path, host: str) -> dict[Path, Any]:
    for relative, content in USERS_FILES[host].items():
        write(user_home / relative, content)
    return snapshot(user_home)


def ours(user_home: Path, host: str) -> list[str]:
    """The stop hook's command lines as written for `host`."""
    relative, keys = STOP_HOOK[host]
    content = read(user_home / relative)
    if not keys:
        return [line for line in content.splitlines() if line.startswith("exec ")]
    for key in keys:
        content = content[key]
    return [entry["command"] for entry in content if "memory-mcp" in entry["command"]]


@pytest.mark.parametrize("host", HOSTS)
def test_install_keeps_the_users_entries_is_idempotent_and_uninstall_restores_them(
    host: str, home: Path, user_home: Path
) -> None:
    before = users_files(user_home, host)
    installed = run(home, user_home, "install", host)
    assert installed.code == 0, installed.stderr
    after = snapshot(user_home)
    for path, content in before.items():
        assert contained(content, after[path]), f"{path}: the user's entries kept"
        backups = list(path.parent.glob(f"{path.name}.*.bak"))
        assert [read_backup(b) for b in backups] == ([content] if after[path] != content else []), path
    assert len(ours(user_home, host)) == 1, "one stop hook of ours"

    again = run(home, user_home, "install", host)
    assert again.code == 0 and "updated" not in again.stdout and snapshot(user_home) == after

    removed = run(home, user_home, "uninstall", host)
    assert removed.code == 0, removed.stderr
    assert snapshot(user_home) == before, "exactly what install added is gone"
    assert "updated" not in run(home, user_home, "uninstall", host).stdout


@pytest.mark.parametrize("host", HOSTS)
def test_a_dry_run_prints_the_lines_it_would_add_and_writes_nothing(host: str, home: Path, user_home: Path) -> None:
    before = users_files(user_home, host)
    preview = run(home, user_home, "install", host, "--dry-run")
    assert preview.code == 0, preview.stderr
    assert "would change" in preview.stdout and SECRET not in preview.stdout
    added = [line for line in preview.stdout.splitlines() if line.startswith("+") and " hook stop" in line]
    assert len(added) == 1, preview.stdout
    assert snapshot(user_home) == before and not list(user_home.rglob("*.bak"))

    run(home, user_home, "install", host)
    unchanged = run(home, user_home, "install", host, "--dry-run")
    assert "would change" not in unchanged.stdout and "unchanged" in unchanged.stdout
    assert "would" in run(home, user_home, "uninstall", host, "--dry-run").stdout


@pytest.mark.parametrize("host", HOSTS)
def test_the_installed_stop_hook_runs_and_stores_nothing_without_a_turn(host: str, home: Path, user_home: Path) -> None:
    """The command as written runs (a payload with no finished turn: it stores nothing, says nothing)."""
    run(home, user_home, "install", host)
    [command] = ours(user_home, host)
    argv = shlex.split(command.removeprefix("exec "))
    if host == "cline":
        argv = [str(user_home / STOP_HOOK[host][0])]
    ran = subprocess.run(argv, input="{}", capture_output=True, text=True, env={**cli_env(home)}, timeout=60)
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    assert stored(home) == []


def test_copilot_and_vscode_share_one_hooks_file_and_never_run_twice(home: Path, user_home: Path) -> None:
    for host in ("copilot", "vscode"):
        assert run(home, user_home, "install", host).code == 0
    hooks = read(user_home / ".copilot" / "hooks" / "memory-mcp.json")["hooks"]
    assert {event: len(entries) for event, entries in hooks.items()} == {"SessionStart": 1, "Stop": 1}
    assert run(home, user_home, "uninstall", "vscode").code == 0
    assert not (user_home / ".copilot" / "hooks" / "memory-mcp.json").exists(), "a file that was ours alone goes"
    assert (user_home / ".copilot" / "mcp-config.json").exists(), "Copilot CLI's server entry stays until its uninstall"


def test_cline_never_replaces_a_hook_script_of_the_users(home: Path, user_home: Path) -> None:
    mine = user_home / "Documents" / "Cline" / "Hooks" / "TaskComplete"
    write(mine, "#!/bin/sh\n./my-own-summary.sh\n")
    refused = run(home, user_home, "install", "cline")
    assert refused.code != 0 and str(mine) in refused.stderr and "your own" in refused.stderr
    assert read(mine) == "#!/bin/sh\n./my-own-summary.sh\n"
    assert not (mine.parent / "UserPromptSubmit").exists(), "nothing written when one file cannot be"
    assert "unchanged" in run(home, user_home, "uninstall", "cline").stdout and mine.exists()


@pytest.mark.parametrize("host", ["cursor", "windsurf", "cline", "copilot", "vscode"])
def test_project_installs_go_to_the_projects_own_files(host: str, home: Path, user_home: Path, tmp_path: Path) -> None:
    project = tmp_path / "code" / "shop"
    project.mkdir(parents=True)
    installed = cli(home, "install", host, "--project", env={"HOME": str(user_home)}, cwd=project)
    assert installed.code == 0, installed.stderr
    written = {path.relative_to(project).parts[0] for path in project.rglob("*") if path.is_file()}
    expected = {"cursor": {".cursor"}, "windsurf": {".windsurf"}, "cline": {".clinerules"}}
    assert written == expected.get(host, {".github", ".vscode"} if host == "vscode" else {".github"})
    assert cli(home, "uninstall", host, "--project", env={"HOME": str(user_home)}, cwd=project).code == 0
    left = [path for path in project.rglob("*") if path.is_file() and ".bak" not in path.name]
    assert not [path for path in left if "memory-mcp" in path.read_text(encoding="utf-8")], "nothing of ours left"
    assert not (user_home.exists() and snapshot(user_home)), "the user's own files untouched"


# Every installable host's files as a user keeps them, without secrets (a dry run hides those), so
# that what the dry run prints can be checked line for line against what is then written.
PLAIN_FILES: dict[str, dict[str, Any]] = {
    "claude-code": {
        ".claude/settings.json": {"permissions": {"allow": ["Bash(ls)"]}},
        ".claude.json": {"numStartups": 3},
    },
    "codex": {
        ".codex/hooks.json": {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}},
        ".codex/config.toml": 'model = "gpt-5.5"  # mine\n',
    },
    "gemini": {".gemini/settings.json": {"ui": {"theme": "Dracula"}}},
    **json.loads(json.dumps(USERS_FILES).replace(SECRET, "plain-value")),
}
LAYOUTS = {
    "compact": lambda content: json.dumps(content, separators=(",", ":")),
    "spaced on one line": lambda content: json.dumps(content) + "\n",
    "tabs": lambda content: json.dumps(content, indent="\t") + "\n",
}


def patched(text: str, diff: list[str]) -> list[str]:
    """`text`'s lines with a context-free unified diff applied (as `patch` would)."""
    lines, hunks = text.splitlines(), []
    for line in diff:
        if hunk := re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", line):
            start, count = int(hunk[1]), int(hunk[2] or 1)
            hunks.append((start - 1 if count else start, count, []))
        elif line.startswith("+") and not line.startswith("+++"):
            hunks[-1][2].append(line[1:])
    for start, count, added in reversed(hunks):
        lines[start : start + count] = added
    return lines


def previewed(output: str) -> dict[Path, list[str]]:
    """Each file a dry run says it would change or remove, with its diff lines."""
    files: dict[Path, list[str]] = {}
    for line in output.splitlines():
        if heading := re.match(r"# (/.*): would (change|be removed)$", line):
            files[Path(heading[1])] = diff = []
        elif not line.startswith("#") and files:
            diff.append(line)
    return files


def texts(folder: Path) -> dict[Path, str]:
    return {
        path: path.read_text(encoding="utf-8")
        for path in folder.rglob("*")
        if path.is_file() and ".bak" not in path.name
    }


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("host", sorted(PLAIN_FILES))
def test_a_dry_run_shows_exactly_what_is_written_and_uninstall_gives_back_the_bytes(
    host: str, layout: str, home: Path, user_home: Path
) -> None:
    for relative, content in PLAIN_FILES[host].items():
        write(user_home / relative, content if isinstance(content, str) else LAYOUTS[layout](content))
    before = texts(user_home)

    for action in ("install", "uninstall"):
        current = texts(user_home)
        preview = run(home, user_home, action, host, "--dry-run")
        assert preview.code == 0 and texts(user_home) == current, preview.stderr
        diffs = previewed(preview.stdout)
        done = run(home, user_home, action, host)
        assert done.code == 0, done.stderr
        written = texts(user_home)
        assert set(diffs) == {
            path for path in current.keys() | written.keys() if current.get(path) != written.get(path)
        }
        for path, diff in diffs.items():
            assert patched(current.get(path, ""), diff) == written.get(path, "").splitlines(), f"{action}: {path}"
        if action == "install":
            assert all(written[path] == text for path, text in before.items() if path not in diffs)
            assert "then:" in preview.stdout or "trust" not in done.stdout, "the dry run says what to do after"

    assert texts(user_home) == before, "uninstall leaves every file as it was, to the byte; files it made are gone"
