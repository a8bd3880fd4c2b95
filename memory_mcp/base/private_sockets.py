"""What a process listening on a Unix socket in the data folder (the hook helper, the shared memory
process) and its clients check, on the standard library alone: the command's first step uses it
before anything heavy is imported.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PACKAGE_FOLDER = Path(__file__).resolve().parents[1]


def is_private_folder(folder: Path) -> bool:
    """A real folder owned by this user that nobody else may enter: only then is what listens
    inside it this user's own process."""
    try:
        info = folder.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and info.st_mode & 0o077 == 0


def inode_of(path: Path) -> int | None:
    """The inode `path` names now (None when nothing is there): a listener whose socket file was
    removed or replaced sees that it no longer names its own."""
    try:
        return path.stat().st_ino
    except OSError:
        return None


def code_stamp(folder: Path = PACKAGE_FOLDER) -> int:
    """The newest modification time of the Python files under `folder` (the package's, by default;
    about a millisecond): code upgraded or edited in place is served by a new process, never by
    one still running the old code."""
    newest = 0
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False) and entry.name != "__pycache__":
            newest = max(newest, code_stamp(Path(entry.path)))
        elif entry.name.endswith(".py"):
            newest = max(newest, entry.stat().st_mtime_ns)
    return newest
