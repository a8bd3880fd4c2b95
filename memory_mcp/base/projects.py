"""Which project an exchange belongs to: the git repository it was said in, else its folder.

All worktrees of one repository are one project (a worktree's `.git` file names the repository's
own git folder), so a branch checked out beside the main one shares its memory. Read from the
files git keeps, without running git: a prompt hook has milliseconds to spare. Standard library
only, so the hook's first step may use it.
"""

from __future__ import annotations

import os
from pathlib import Path

GITDIR_PREFIX = "gitdir:"
# A folder that is nobody's project: a host started in it says nothing about what is worked on.
_NO_PROJECT = {Path("/")}


def project_of(folder: str | os.PathLike[str] | None) -> str | None:
    """The project `folder` belongs to, as an absolute path: the root of the git repository it
    is in (the main checkout's, for a worktree), else the folder itself; None for no folder, the
    file system's root or the home folder."""
    if not folder:
        return None
    try:
        start = Path(folder).expanduser().resolve()
    except (OSError, RuntimeError):
        return None
    home = _home()
    if start in _NO_PROJECT or start == home:
        return None
    for candidate in (start, *start.parents):
        if candidate == home:
            break  # a repository at or above the home folder (dotfiles) is not this folder's project
        marker = candidate / ".git"
        if marker.is_dir():
            return str(candidate)
        if marker.is_file():
            return str(_main_checkout(candidate, marker) or candidate)
    return str(start)


def project_name(project: str | None) -> str:
    """How a project is named to a person and a model: its folder's name ("" for none)."""
    return Path(project).name if project else ""


def _main_checkout(worktree: Path, marker: Path) -> Path | None:
    """The main checkout of the repository whose worktree (or submodule) `worktree` is, from its
    `.git` file: `gitdir: <repo>/.git/worktrees/<name>`, whose `commondir` names `<repo>/.git`."""
    try:
        line = marker.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    if not line.startswith(GITDIR_PREFIX):
        return None
    gitdir = (worktree / line[len(GITDIR_PREFIX) :].strip()).resolve()
    try:
        common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
    except OSError:
        return None  # a submodule: its own repository, the project of its own
    return common.parent if common.name == ".git" else common


def _home() -> Path | None:
    try:
        return Path.home().resolve()
    except (OSError, RuntimeError, KeyError):
        return None
