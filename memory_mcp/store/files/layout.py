"""Where the JSON store keeps each scope's files under its root, and the checks that keep every
path inside it.

    {root}/users/{user}/memory.json                     structured memory (DeerFlow schema)
    {root}/users/{user}/pages.jsonl                     verbatim exchanges, one JSON per line
    {root}/users/{user}/vectors.jsonl                   embeddings of the pages (derived)
    {root}/users/{user}/pages.directory, index.snapshot where each record lies, and the word index:
                                                        derived, saved so that a start need not parse
    {root}/users/{user}/agents/{agent}/...              the same, for one agent of that user
    {root}/locks/{user}[@{agent}].{log,doc,update}.lock cross-process locks, deleted with their memory
    {root}/locks/.replacing-{name}.lock                 held while that replacement is written

A directory is named after its id, except that an id with capital letters gets them marked
(`Alice` -> `alice~1`, a bit per letter): ids that differ only in case are different users, and
must not share a directory on a case-insensitive file system (macOS, Windows). The `.`, `@` and
`+` of an e-mail address are written as `%2e`, `%40` and `%2b` (`bo@x.org` -> `bo%40x%2eorg`), so
that no name is hidden or `..`, and a lock file's name (`{user}@{agent}.{kind}.lock`) reads back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from memory_mcp.base.errors import StorageError
from memory_mcp.base.ids import validate_identifier
from memory_mcp.store.interfaces import Scope

MEMORY_FILE = "memory.json"
PAGES_FILE = "pages.jsonl"
VECTORS_FILE = "vectors.jsonl"  # embeddings of the pages: derived, so a damaged line is recomputed
INDEX_FILE = "index.snapshot"  # the word index of the pages: derived, so a damaged one is rebuilt
DIRECTORY_FILE = "pages.directory"  # where each page's record lies: derived, so a damaged one is rebuilt
USERS_DIR = "users"
AGENTS_DIR = "agents"
LOCKS_DIR = "locks"
TOMBSTONE_PREFIX = ".erased-"
# A memory being replaced is written whole beside its directory first, marked complete last.
STAGING_PREFIX = ".replacing-"
COMPLETE_MARK = ".complete"


@dataclass(frozen=True)
class ScopeFiles:
    """The files in one scope's directory (or in a directory staged to become one)."""

    directory: Path

    @property
    def memory(self) -> Path:
        return self.directory / MEMORY_FILE

    @property
    def pages(self) -> Path:
        return self.directory / PAGES_FILE

    @property
    def vectors(self) -> Path:
        return self.directory / VECTORS_FILE

    @property
    def index(self) -> Path:
        return self.directory / INDEX_FILE

    @property
    def page_directory(self) -> Path:
        return self.directory / DIRECTORY_FILE

    @property
    def complete_mark(self) -> Path:
        """The mark of a staged memory written whole."""
        return self.directory / COMPLETE_MARK

    @property
    def agents(self) -> Path:
        """Where a user's agents have their directories."""
        return self.directory / AGENTS_DIR


class Layout:
    """The directories and lock files of the scopes kept under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.users_dir = root / USERS_DIR

    def files(self, scope: Scope) -> ScopeFiles:
        """The scope's files, in its directory (`scope_dir`)."""
        return ScopeFiles(self.scope_dir(scope))

    def scope_dir(self, scope: Scope) -> Path:
        """The scope's directory. A symbolic link anywhere on the way is refused: it would let
        whoever planted it send one user's memory out of the data directory."""
        users = self.root / USERS_DIR
        user_dir = users / directory_name(validate_identifier("user_id", scope.user_id))
        steps = [users, user_dir]
        if scope.agent_name is not None:
            agents = user_dir / AGENTS_DIR
            steps += [agents, agents / directory_name(validate_identifier("agent_name", scope.agent_name))]
        for step in steps:
            if step.is_symlink():
                raise StorageError(f"{step} is a symbolic link; memory is never read or written through one")
        return steps[-1]

    def lock_file(self, scope: Scope, kind: str) -> Path:
        """The file of one of the scope's cross-process locks (`kind`: log, doc or update)."""
        name = directory_name(validate_identifier("user_id", scope.user_id))
        if scope.agent_name is not None:
            name += "@" + directory_name(validate_identifier("agent_name", scope.agent_name))
        locks = self.root / LOCKS_DIR
        return locks / f"{name}.{kind}.lock"

    def staging_lock_file(self, staged: Path) -> Path:
        """The lock a replacement holds from before its staging directory exists until it is in
        place, so that no other process opening the store takes it for one a crash cut short."""
        return self.root / LOCKS_DIR / f"{staged.name}.lock"

    def lock_files(self) -> list[Path]:
        """Every lock file under the root, sorted."""
        return sorted((self.root / LOCKS_DIR).glob("*.lock"))

    def list_users(self) -> list[str]:
        return identifier_dirs(self.root / USERS_DIR)

    def list_agents(self, user_id: str) -> list[str]:
        return identifier_dirs(self.scope_dir(Scope(user_id)) / AGENTS_DIR)

    def list_scopes(self) -> list[Scope]:
        scopes = []
        for user_id in self.list_users():
            scopes.append(Scope(user_id))
            scopes.extend(Scope(user_id, agent) for agent in self.list_agents(user_id))
        return scopes


ESCAPED = {".": "%2e", "@": "%40", "+": "%2b"}
UNESCAPED = {escaped: char for char, escaped in ESCAPED.items()}


def directory_name(identifier: str) -> str:
    """The directory of an id: lower case, `.@+` escaped, with a mask of its capitals after `~`
    when it has any (counted in the id's own characters)."""
    mask = sum(1 << position for position, char in enumerate(identifier) if char.isupper())
    name = "".join(ESCAPED.get(char, char) for char in identifier.lower())
    return name if not mask else f"{name}~{mask:x}"


def identifier_of(name: str) -> str | None:
    """The id whose directory `name` is, or None when it is nobody's."""
    base, _, mask_text = name.partition("~")
    plain = re.sub("%2e|%40|%2b", lambda escaped: UNESCAPED[escaped.group()], base)
    try:
        mask = int(mask_text, 16) if mask_text else 0
        identifier = "".join(char.upper() if mask >> n & 1 else char for n, char in enumerate(plain))
        validate_identifier("id", identifier)
    except ValueError:
        return None
    return identifier if directory_name(identifier) == name else None


def scope_of_lock(name: str) -> Scope | None:
    """The scope a lock file is named after (`{user}[@{agent}].{kind}.lock`), or None."""
    owner = name.split(".", 1)[0]
    user_name, _, agent_name = owner.partition("@")
    user_id = identifier_of(user_name)
    agent = identifier_of(agent_name) if agent_name else None
    if user_id is None or (agent_name and agent is None):
        return None
    return Scope(user_id, agent)


def identifier_dirs(parent: Path) -> list[str]:
    """The ids of the subdirectories that are someone's, sorted (anything else, links included,
    is not ours)."""
    found = (identifier_of(entry.name) for entry in subdirectories(parent))
    return sorted(identifier for identifier in found if identifier is not None)


def subdirectories(parent: Path) -> list[Path]:
    if not parent.is_dir() or parent.is_symlink():
        return []
    return [entry for entry in parent.iterdir() if entry.is_dir() and not entry.is_symlink()]


def is_identifier(name: str) -> bool:
    try:
        validate_identifier("id", name)
    except ValueError:
        return False
    return True
