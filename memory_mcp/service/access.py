"""Bearer tokens for the HTTP server: issued once, stored hashed, each mapped to one user id.

Tokens are 256 random bits, so a single SHA-256 is enough to make the stored file useless to
whoever reads it (a slow password hash protects guessable secrets; these are not guessable), and
it lets a request be checked with one dictionary lookup. The file is re-read when it changes, so
`memory-mcp token add` and `revoke` take effect on a running server without a restart.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import ConfigDict, Field, ValidationError

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import InvalidInput, NotFound, StorageError
from memory_mcp.base.ids import validate_identifier
from memory_mcp.base.model import Model
from memory_mcp.store.durable import FileLock, atomic_write, ensure_directory, read_bytes

log = logging.getLogger(__name__)

TOKEN_PREFIX = "mm_"


class TokenRecord(Model):
    """One issued token as stored: never the token itself, only its hash."""

    model_config = ConfigDict(extra="forbid")

    token_id: str = Field(description="Public handle for listing and revoking; not a secret.")
    user_id: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    label: str = Field("", max_length=200, pattern=r"^[^\x00-\x1f]*$")
    created: str


class TokenFile(Model):
    model_config = ConfigDict(extra="forbid")

    format: str = "memory-mcp/tokens"
    version: int = 1
    tokens: list[TokenRecord] = Field(default_factory=list)


class IssuedToken(Model):
    """What `issue` hands back: the only time the token itself is ever shown."""

    token: str
    record: TokenRecord


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class TokenRegistry:
    """The token file: issue, list, revoke, and look up the user a presented token belongs to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file_lock = FileLock(path.with_name(path.name + ".lock"))  # two `token` commands at once
        self._seen: tuple[int, int, int] | None = None
        self._by_hash: dict[str, TokenRecord] = {}

    def records(self) -> list[TokenRecord]:
        return self._read().tokens

    def issue(self, user_id: str, label: str = "") -> IssuedToken:
        try:
            validate_identifier("user_id", user_id)
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        try:
            record = TokenRecord(
                token_id="tok_" + secrets.token_hex(4),
                user_id=user_id,
                sha256=hash_token(token),
                label=label,
                created=utc_now(),
            )
        except ValidationError as exc:
            raise InvalidInput(f"label: {exc.errors()[0]['msg']}") from None
        self._change(lambda tokens: [*tokens, record])
        return IssuedToken(token=token, record=record)

    def revoke(self, token_id: str) -> TokenRecord:
        revoked: list[TokenRecord] = []

        def without(tokens: list[TokenRecord]) -> list[TokenRecord]:
            revoked.extend(record for record in tokens if record.token_id == token_id)
            if not revoked:
                raise NotFound(f"no token {token_id!r} in {self.path} (memory-mcp token list shows them)")
            return [record for record in tokens if record.token_id != token_id]

        without(self.records())  # an unknown id is refused before anything, even a lock file, is created
        revoked.clear()
        self._change(without)
        return revoked[0]

    def user_for(self, token: str) -> str | None:
        """The user id the token was issued for, or None for an unknown or revoked token."""
        with self._lock:
            self._refresh()
            record = self._by_hash.get(hash_token(token))
        return record.user_id if record else None

    def issued(self) -> bool:
        """Whether any token is issued: asked per request by a server started without tokens, so it
        costs a stat while the file is unchanged."""
        with self._lock:
            self._refresh()
            return bool(self._by_hash)

    def _refresh(self) -> None:
        """Re-read the file only when it changed (inode, size or mtime), so a lookup costs a stat."""
        try:
            status = os.stat(self.path)
        except FileNotFoundError:
            self._seen, self._by_hash = None, {}
            return
        seen = (status.st_ino, status.st_size, status.st_mtime_ns)
        if seen != self._seen:
            self._by_hash = {record.sha256: record for record in self._read().tokens}
            self._seen = seen

    def _read(self) -> TokenFile:
        try:
            raw = read_bytes(self.path)
        except FileNotFoundError:
            return TokenFile()
        except OSError as exc:
            raise StorageError(f"token file {self.path} cannot be read ({exc.strerror or exc})") from None
        try:
            return TokenFile.model_validate(json.loads(raw))
        except (ValueError, ValidationError) as exc:
            raise StorageError(f"token file {self.path} is damaged; fix or remove it ({exc})") from None

    def _change(self, edit: Callable[[list[TokenRecord]], list[TokenRecord]]) -> None:
        """Read, edit and replace the file atomically, under a lock other processes respect too."""
        ensure_directory(self.path.parent)
        with self._lock, self._file_lock:
            stored = self._read()
            changed = stored.model_copy(update={"tokens": edit(stored.tokens)})
            atomic_write(self.path, changed.model_dump_json(indent=2).encode("utf-8"))


def token_user(registry: TokenRegistry, token: str) -> str | None:
    """The user `token` acts for; None for an unknown token, and for every token while the token
    file cannot be read (fail closed: a broken file never lets anyone in)."""
    try:
        return registry.user_for(token)
    except StorageError as exc:
        log.error("refusing every token until this is fixed: %s", exc)
        return None


def bearer_user(registry: TokenRegistry, authorization: str | None) -> str | None:
    """The user the bearer token of an Authorization header acts for; None without one, for another
    scheme, or for a token `token_user` refuses."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token_user(registry, token.strip())
