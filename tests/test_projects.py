"""Which project a folder belongs to: a real git repository and its worktrees are one project;
a folder outside any repository is its own; the home folder and the root are nobody's."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from memory_mcp.base.projects import project_name, project_of


def git(*arguments: str, cwd: Path) -> None:
    subprocess.run(["git", *arguments], cwd=cwd, check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_repository_its_subfolders_and_its_worktrees_are_one_project(tmp_path: Path) -> None:
    repository = tmp_path / "code" / "webshop"
    (repository / "src" / "cart").mkdir(parents=True)
    git("init", "-q", cwd=repository)
    git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "--allow-empty", "-m", "start", cwd=repository)
    git("worktree", "add", "-q", str(tmp_path / "webshop-feature"), cwd=repository)

    assert project_of(repository) == str(repository.resolve())
    assert project_of(repository / "src" / "cart") == str(repository.resolve())
    assert project_of(tmp_path / "webshop-feature") == str(repository.resolve()), "a worktree is its repository"
    assert project_name(project_of(tmp_path / "webshop-feature")) == "webshop"


def test_a_folder_outside_any_repository_is_its_own_project_and_home_or_root_are_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(tmp_path))
    assert project_of(folder) == str(folder.resolve())
    assert project_of(tmp_path) is None, "the home folder says nothing about what is worked on"
    assert project_of("/") is None and project_of(None) is None and project_of("") is None
    (tmp_path / ".git").mkdir()  # dotfiles kept in git at home
    assert project_of(folder) == str(folder.resolve()), "a repository above home is not this folder's project"
    assert project_name(None) == ""
