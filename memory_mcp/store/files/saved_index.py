"""The JSON store's saved word index (`index.snapshot`, one per scope): derived from the log, and
saved only while the log is still the one it was made from."""

from __future__ import annotations

import logging

from memory_mcp.store.durable import put_in_place, read_bytes, remove_stale_temps, written_aside
from memory_mcp.store.files.page_log import PageLogFiles
from memory_mcp.store.files.scopes import FileScopes, os_errors
from memory_mcp.store.interfaces import Scope

log = logging.getLogger(__name__)


class SavedIndexFiles:
    """The saved word indexes of the scopes under one root."""

    def __init__(self, scopes: FileScopes, page_log: PageLogFiles) -> None:
        self._scopes = scopes
        self._log = page_log

    def has_index_snapshot(self, scope: Scope) -> bool:
        return self._scopes.layout.files(scope).index.exists()

    def read_index_snapshot(self, scope: Scope) -> bytes | None:
        try:
            return read_bytes(self._scopes.layout.files(scope).index)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("the saved word index of %s cannot be read (%s); it is built again", scope.describe(), exc)
            return None

    def write_index_snapshot(self, scope: Scope, data: bytes, generation: int) -> bool:
        """Written aside first, then checked against the log and put in place under the log's
        locks, which an erase holds too: it lands before an erase (which removes it) or not at all."""
        state = self._scopes.get(scope)
        files = self._scopes.layout.files(scope)
        path = files.index
        with os_errors(f"save the word index of {scope.describe()}"):
            try:
                aside = written_aside(path, data)
            except FileNotFoundError:  # erased meanwhile
                return False
            try:
                with self._scopes.holding_log(state, scope):
                    self._log.ids_held(state, scope, files.pages)
                    if state.log is None or state.log.generation != generation:
                        return False
                    put_in_place(aside, path)
                    remove_stale_temps(path)
                    return True
            finally:
                aside.unlink(missing_ok=True)
