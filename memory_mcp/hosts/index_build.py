"""`python -m memory_mcp.hosts.index_build`: what a Stop hook leaves behind when the word index of
the memory it stored to is due (none saved yet, or the log passed another few hundred exchanges):
told the settings and whose memory on stdin, it brings the index up to date and saves it, so that
the next first recall reads it instead of tokenising every exchange (seconds at 30,000). The hook
itself has no time for that: its host waits for it.
"""

from __future__ import annotations

from memory_mcp.base.settings import Settings
from memory_mcp.hosts.helper import told_on_stdin
from memory_mcp.hosts.relay import run_folder
from memory_mcp.service.memory_service import save_word_indexes
from memory_mcp.store.durable import FileLock, LockTimeout

BUILD_LOCK = "index-build.lock"


def main() -> int:
    told = told_on_stdin()
    settings = Settings.model_validate(told["settings"])
    # One build at a time per data home: hooks of quick turns must not pile up builds of 100,000
    # exchanges (~10 s and ~400 MB each). One left out is started by a later hook.
    lock = FileLock(run_folder(settings.data_storage_path) / BUILD_LOCK)
    try:
        lock.acquire(timeout=0)
    except LockTimeout:
        return 0
    try:
        save_word_indexes(settings, [(told["user_id"], told["agent_name"])])
    finally:
        lock.release()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
