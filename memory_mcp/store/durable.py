"""File primitives that survive a crash at any instant: durable append, atomic replace, and the
lock that writers in several processes take around them.

Nothing here knows about memory; the JSON store composes these with its layout and locks.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import shutil
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600
_TAIL_SCAN_CHUNK = 64 * 1024


class NotDurable(OSError):
    """The change is made (a file renamed into place, a new file appended), but syncing its
    directory failed: it may not survive a power loss. Unlike other OSErrors here, this one
    does not mean that nothing changed."""


class LockTimeout(Exception):
    """Another process has held a FileLock for longer than the caller would wait."""


class FileLock:
    """An exclusive lock across processes (flock on a file of its own, created owner-only as
    needed), taken again by whoever holds it without waiting: the caller serialises its threads.
    Its holder may delete the file (`delete`), so that an erased memory leaves no lock named
    after it: whoever then gets the lock of the deleted file sees that the path no longer names
    it and locks the path's new file instead.

    Rather than the `filelock` package: an add takes this lock once, and that package's acquire
    and release cost ~140 µs (fork checks, path resolution) where open, flock and close cost
    ~10. Both are flock, so processes using either exclude each other. A child process forked
    while a lock is held does not hold it (its copy of the descriptor is closed at the fork).
    """

    POLL_SECONDS = (0.001, 0.05)  # first and longest wait between tries

    def __init__(self, path: Path) -> None:
        self.path = path
        self._guard = threading.Lock()
        self._fd: int | None = None
        self._depth = 0

    def acquire(self, timeout: float) -> None:
        """Hold the lock, waiting at most `timeout` seconds (0: not at all) for another process."""
        with self._guard:
            if self._depth:
                self._depth += 1
                return
            deadline = time.monotonic() + timeout
            while True:
                fd = self._opened()
                try:
                    self._lock(fd, deadline)
                    if self._names(fd):
                        break
                except BaseException:
                    os.close(fd)
                    raise
                os.close(fd)  # deleted by its holder meanwhile: lock the file the path names now
            self._fd, self._depth = fd, 1
            _HELD.add(self)

    def delete(self) -> None:
        """Delete the lock's file (held: this lock), leaving the lock held until released."""
        if self._fd is None:
            raise RuntimeError(f"{self.path} is deleted by whoever holds it only")
        self.path.unlink(missing_ok=True)

    def _names(self, fd: int) -> bool:
        """Whether the path still names the file `fd` is open on."""
        try:
            named = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def release(self) -> None:
        with self._guard:
            if self._depth == 0:
                raise RuntimeError(f"{self.path} is released more often than it was acquired")
            self._depth -= 1
            if self._depth == 0 and self._fd is not None:
                fd, self._fd = self._fd, None
                _HELD.discard(self)
                os.close(fd)  # closing the only descriptor releases the flock

    def _forget_in_child(self) -> None:
        """In a forked child: close its copy of the descriptor, which leaves the parent's lock be
        (and would otherwise keep it held after the parent releases it)."""
        self._guard = threading.Lock()  # the fork may have copied it held
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._depth = None, 0

    def __enter__(self) -> FileLock:
        self.acquire(timeout=float("inf"))
        return self

    def __exit__(self, *_: object) -> None:
        self.release()

    def _opened(self) -> int:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(self.path, flags, FILE_MODE)
        except FileNotFoundError:
            ensure_directory(self.path.parent)
            return os.open(self.path, flags, FILE_MODE)

    def _lock(self, fd: int, deadline: float) -> None:
        wait, longest = self.POLL_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"{self.path} is held by another process") from None
                time.sleep(wait)
                wait = min(wait * 2, longest)


_HELD: weakref.WeakSet[FileLock] = weakref.WeakSet()


def _forget_held_locks() -> None:
    for lock in list(_HELD):
        lock._forget_in_child()
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_held_locks)


def ensure_directory(path: Path) -> None:
    """Create `path` and any missing parents, each readable by its owner only, durably: each new
    directory's entry in its parent is fsync'd, or a power loss could lose the directory and all
    that was fsync'd inside it.

    (`mkdir(parents=True)` would give the parents default permissions, exposing the data root.)
    """
    missing = []
    while not path.is_dir():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIRECTORY_MODE)
        except FileExistsError:
            continue  # another process made it, and synced it
        fsync_directory(directory.parent)


def fsync_directory(path: Path) -> None:
    """fsync a directory: a created or renamed file is not durable until its parent entry is."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_records(path: Path, records: bytes) -> int:
    """Append whole newline-terminated records with one write and one fsync; return the file
    size before the append.

    The caller must hold the file's lock. An unfinished record left by a writer that crashed
    mid-append is cut off first, so it can never fuse with these into a corrupt line.
    """
    if not records.endswith(b"\n"):
        raise ValueError("records must be whole lines, each ending in a newline")
    created = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
    try:
        size = _cut_unfinished_tail(fd, path)
        try:
            _write_all(fd, records)
            os.fsync(fd)
        except OSError:
            # Disk full part-way: take back what was written, so no half record stays behind.
            os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)
    if created:
        _sync_after_change(path.parent)
    return size


STALE_TEMP_SECONDS = 600


def remove_stale_temps(path: Path, older_than: float = STALE_TEMP_SECONDS) -> None:
    """Delete temp files of `path` that a crashed writer left behind. Only old ones: a temp file
    of a few seconds may be another process's write under way (unless the caller holds the lock
    every writer of `path` holds: then `older_than` 0)."""
    cutoff = time.time() - older_than
    for temp in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            if temp.lstat().st_mtime < cutoff:
                temp.unlink()
        except FileNotFoundError:
            pass


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that readers see the old file or the new one, never a mix.

    Temp file in the same directory (rename is atomic only within a filesystem), fsync it,
    rename over the target, then fsync the directory so the rename itself is durable.
    """
    put_in_place(written_aside(path, data), path)


def created_first(path: Path) -> bool:
    """Create `path` empty and private unless something is there already (a symbolic link too):
    whether this call made it, so that of processes racing for one claim exactly one has it."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    except FileExistsError:
        return False
    return True


def written_aside(path: Path, data: bytes) -> Path:
    """`data` in a synced temp file beside `path`, for `put_in_place`: what can fail (a full
    disk) fails here, before anything the temp file stands for is changed."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp


def put_in_place(temp: Path, path: Path) -> None:
    """Rename a `written_aside` temp file over `path`, durably."""
    try:
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _sync_after_change(path.parent)


@contextmanager
def opened_for_reading(path: Path) -> Iterator[int]:
    """A descriptor for reading `path`, refusing to follow a symbolic link planted in its place."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        yield fd
    finally:
        os.close(fd)


def read_bytes(path: Path) -> bytes:
    """A file's content, refusing to follow a symbolic link planted in its place."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as stream:
        return stream.read()


def remove_tree(path: Path) -> None:
    """Delete a directory and everything in it, durably (the parent's entry is fsync'd). Another
    process deleting the same tree at the same time is no error."""
    if not path.exists():
        return
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():  # not a concurrent deletion: something kept it; say what
        shutil.rmtree(path)
    fsync_directory(path.parent)


def rename_durably(source: Path, target: Path) -> None:
    """Rename `source` to `target` in the same directory and make the rename durable."""
    os.rename(source, target)
    _sync_after_change(target.parent)


def _sync_after_change(directory: Path) -> None:
    try:
        fsync_directory(directory)
    except OSError as exc:
        raise NotDurable(exc.errno, f"the change was made but syncing {directory} failed: {exc.strerror}") from exc


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _cut_unfinished_tail(fd: int, path: Path) -> int:
    """Truncate bytes after the last newline (an interrupted, never-acknowledged append)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    keep = _end_of_last_line(fd, size)
    log.warning("%s: dropping %d bytes of an interrupted write at its end", path, size - keep)
    os.ftruncate(fd, keep)
    return keep


def _end_of_last_line(fd: int, size: int) -> int:
    """Offset just past the last newline in the file, or 0 when there is none."""
    end = size
    while end > 0:
        start = max(0, end - _TAIL_SCAN_CHUNK)
        chunk = os.pread(fd, end - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0
