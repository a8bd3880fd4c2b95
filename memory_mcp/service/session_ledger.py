"""What a host's session has been given from memory already, so that nothing is given twice.

A host keeps every block its hooks inject in the conversation: giving the same exchange or fact
again costs tokens and tells the model nothing. So each session's ledger records the ids of what
it was given (never their text), whether it had the profile, and the projects whose digest it
had, in a small JSON file under `run/sessions/` of the data folder, one folder per user (forget
removes it). A compaction or a
/clear starts a session's ledger over, since the model no longer holds what was given. Ledgers
untouched for LEDGER_DAYS are removed whenever one of the same user's is written.

A host that runs two copies of one hook for an event (VS Code runs Claude Code's hooks and its own)
would give a session its digest twice: the first copy to claim the event's stamp answers it.

Beside a session's ledger, for hosts whose finished-turn event carries the reply but not the
prompt (Cursor, Windsurf, Cline), the prompt waiting for its reply: kept by the prompt hook
(secrets already redacted), taken, and so removed, by the stop hook that stores the exchange.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from memory_mcp.store import Scope
from memory_mcp.store.durable import atomic_write, created_first, ensure_directory

LEDGER_FOLDER = ("run", "sessions")
LEDGER_DAYS = 7
WAITING_SUFFIX = ".prompt.json"  # a session's waiting prompt, beside its ledger


@dataclass
class SessionLedger:
    pages: set[str] = field(default_factory=set)
    facts: set[str] = field(default_factory=set)
    profile: bool = False  # whether it was given the profile since it began (or was compacted)
    projects: set[str] = field(default_factory=set)  # those whose latest exchanges it was given ("": none)

    def record(self, pages: tuple[str, ...], facts: tuple[str, ...]) -> None:
        self.pages.update(pages)
        self.facts.update(facts)


def read_ledger(root: Path, scope: Scope, session_id: str) -> SessionLedger:
    """The session's ledger; an empty one when there is none or it cannot be read (giving
    something twice is the lesser harm)."""
    try:
        data = json.loads(_path(root, scope, session_id).read_text(encoding="utf-8"))
        return SessionLedger(set(data["pages"]), set(data["facts"]), bool(data["profile"]), set(data["projects"]))
    except (OSError, ValueError, KeyError, TypeError):
        return SessionLedger()


def write_ledger(root: Path, scope: Scope, session_id: str, ledger: SessionLedger) -> None:
    path = _path(root, scope, session_id)
    ensure_directory(path.parent)
    record = {
        "pages": sorted(ledger.pages),
        "facts": sorted(ledger.facts),
        "profile": ledger.profile,
        "projects": sorted(ledger.projects),
    }
    atomic_write(path, json.dumps(record).encode())
    _remove_stale(path.parent)


def claim_start(root: Path, scope: Scope, session_id: str, stamp: str) -> bool:
    """Whether this hook is the first to answer the session start the host stamped `stamp` (a
    file made exclusively beside the ledger; one that cannot be made claims nothing)."""
    path = _path(root, scope, session_id, f".start-{_digest(stamp)}.json")
    ensure_directory(path.parent)
    try:
        if not created_first(path):
            return False
    except OSError:
        return True  # no claim to be had: answering twice is the lesser harm than not at all
    _remove_stale(path.parent)
    return True


@dataclass(frozen=True)
class WaitingPrompt:
    """A prompt a session's host sent, whose reply has not come yet."""

    prompt: str
    turn_id: str | None


def keep_waiting_prompt(root: Path, scope: Scope, session_id: str, waiting: WaitingPrompt) -> None:
    """Keep the session's newest prompt until its stop (a newer one replaces it)."""
    path = _path(root, scope, session_id, WAITING_SUFFIX)
    ensure_directory(path.parent)
    atomic_write(path, json.dumps({"prompt": waiting.prompt, "turn_id": waiting.turn_id}).encode())
    _remove_stale(path.parent)


def take_waiting_prompt(root: Path, scope: Scope, session_id: str) -> WaitingPrompt | None:
    """The session's waiting prompt, removed as it is taken; None when there is none (or it
    cannot be read: the turn is then not stored, rather than stored with the wrong prompt)."""
    path = _path(root, scope, session_id, WAITING_SUFFIX)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        waiting = WaitingPrompt(str(data["prompt"]), None if data["turn_id"] is None else str(data["turn_id"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        path.unlink(missing_ok=True)
    return waiting


def erase_ledgers(root: Path, scope: Scope) -> None:
    """Remove the ledgers of a scope: for a user's own scope, those of their agents too."""
    folder = _user_folder(root, scope.user_id)
    if scope.agent_name is None:
        shutil.rmtree(folder, ignore_errors=True)
        return
    for path in folder.glob(f"{_digest(scope.agent_name)}-*.json"):
        path.unlink(missing_ok=True)


def _path(root: Path, scope: Scope, session_id: str, suffix: str = ".json") -> Path:
    folder, agent = _user_folder(root, scope.user_id), _digest(scope.agent_name or "")
    return folder / f"{agent}-{_digest(session_id)}{suffix}"


def _user_folder(root: Path, user_id: str) -> Path:
    return root.joinpath(*LEDGER_FOLDER) / _digest(user_id)


def _digest(text: str) -> str:
    """A file name for an id that names no one on the disk."""
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _remove_stale(folder: Path) -> None:
    oldest = time.time() - LEDGER_DAYS * 86_400
    for path in folder.glob("*.json"):
        try:
            if path.stat().st_mtime < oldest:
                path.unlink()
        except OSError:
            continue
