"""The PostgreSQL store's page log: rows of `pages` at consecutive positions, appended in one
statement, read back by what was added since (see `backend` for how that keeps the JSON store's
guarantees)."""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from memory_mcp.base.errors import LogReplaced, StorageError
from memory_mcp.models import Page
from memory_mcp.store.interfaces import PageLog, Scope, already_stored
from memory_mcp.store.page_sequence import DIRECTORY_MIN_PAGES
from memory_mcp.store.postgres.connection import (
    UNIQUE_VIOLATION,
    Attempt,
    Connection,
    Database,
    constraint_of,
    only_row,
    scope_key,
    scope_row,
    sqlstate,
    streamed,
)
from memory_mcp.store.postgres.directory import decode_directory, encode_directory
from memory_mcp.store.postgres.state import RowLog, RowPages, ScopeState
from memory_mcp.store.records import page_from_record, page_record
from memory_mcp.store.scope_state import ScopeStates

log = logging.getLogger(__name__)

# A read of fewer new rows than this fetches them whole and checks each; a longer one (a start
# over a long log) reads their columns only: those rows were checked when they were appended.
WHOLE_PAGES_BELOW = 1000

# What a read of the log brings: its generation (None: no such scope), the id, thread and
# timestamp of its pages from the position asked for on, and the last one's position.
_LogRead = tuple[int | None, list[tuple[str, str | None, str]], int]


class PostgresPages:
    """The page logs of the scopes in one schema, as this process has read them."""

    def __init__(self, database: Database, states: ScopeStates[ScopeState]) -> None:
        self._db = database
        self._states = states

    def append_page(self, scope: Scope, page: Page) -> None:
        self.append_pages(scope, [page])

    def append_pages(self, scope: Scope, pages: Sequence[Page]) -> None:
        user_id, agent = scope_key(scope)
        if not pages:
            return
        page_ids = [page.page_id for page in pages]
        params = append_parameters(scope, pages)

        def work(conn: Connection, attempt: Attempt) -> tuple[int, int] | None:
            if attempt.number > 1:
                # The first try lost its connection: it may have committed before that.
                found = only_row(conn.execute(self._db.sql["count_page_ids"], [user_id, agent, page_ids]))[0]
                if found == len(set(page_ids)):
                    return None
                if found:
                    raise StorageError(
                        f"could not store pages for {scope.describe()}: {found} of {len(pages)} are already "
                        "stored after a lost connection; read the pages back before adding them again"
                    )
            generation, page_count, added = only_row(conn.execute(self._db.sql["append"], params))
            if added != len(pages):  # cannot happen: the statement inserts every row or fails
                raise StorageError(f"could not store pages for {scope.describe()}: {added} of {len(pages)} went in")
            return generation, page_count

        try:
            result = self._db.run(f"store pages for {scope.describe()}", work)
        except StorageError as exc:
            cause = exc.__cause__
            if sqlstate(cause) == UNIQUE_VIOLATION and constraint_of(cause) == "pages_page_id_key":
                raise already_stored(scope, page_ids) from None
            raise
        if result is not None:
            self._take_in_appended(scope, pages, *result)

    def _take_in_appended(self, scope: Scope, pages: Sequence[Page], generation: int, page_count: int) -> None:
        """The pages just appended, now at the end of a log of `page_count` at `generation`, taken
        into the cached log if it had read up to where they begin."""
        state = self._states.get(scope)
        with state.log_lock:
            cache = state.log
            if (
                cache is not None
                and cache.generation == generation
                and cache.extend_if_at(page_count - len(pages), page_count)
            ):
                for page in pages:
                    cache.pages.add(page.page_id, page.thread_id, page.timestamp)

    def read_pages(self, scope: Scope) -> PageLog:
        scope_key(scope)
        state = self._states.get(scope)
        with state.log_lock:
            if state.log is None:
                state.log = self._log_from_directory(scope)
            cache = state.log
            after = cache.end if cache is not None else 0
            read = f"read the pages of {scope.describe()}"
            generation, new_fields, last = self._db.run(read, lambda conn, _: self._read_log(conn, scope, after))
            if generation is None:  # nothing stored
                if cache is None or cache.generation != 0:
                    cache = state.log = self._new_log(scope, 0)
                return PageLog(cache.generation, cache.pages)
            if cache is None or cache.generation != generation:
                if after > 0:  # read against a log that has been replaced since: start again
                    generation, new_fields, last = self._db.run(read, lambda conn, _: self._read_log(conn, scope, 0))
                    if generation is None:
                        cache = state.log = self._new_log(scope, 0)
                        return PageLog(cache.generation, cache.pages)
                cache = state.log = self._new_log(scope, generation)
            for fields in new_fields:
                cache.pages.add(*fields)
            cache.end = last + 1
            self._save_directory(scope, cache, new_pages=DIRECTORY_MIN_PAGES)
            return PageLog(cache.generation, cache.pages)

    def save_directories(self) -> None:
        """Save the directory of every log in memory that grew since its directory was saved, so
        that the next start reads none of its rows."""
        for scope, state in self._states.known():
            with state.log_lock:
                if state.log is not None:
                    self._save_directory(scope, state.log, new_pages=1)

    def page_count(self, scope: Scope) -> int:
        row = scope_row(self._db, f"count the pages of {scope.describe()}", "page_count", scope)
        return 0 if row is None else int(row[0])

    def host_memory_from(self, scope: Scope, start: int) -> bool:
        action = f"look for host memory in the pages of {scope.describe()}"
        row = scope_row(self._db, action, "host_memory_from", scope, start=start)
        return row is not None and bool(row[0])

    def _log_from_directory(self, scope: Scope) -> RowLog | None:
        """The log as its saved directory lists it, if there is one it may be used with: a start
        then reads only the rows after it."""
        user_id, agent = scope_key(scope)
        query, params = self._db.sql["read_page_directory"], {"u": user_id, "a": agent}
        row = self._db.run(
            f"read the page directory of {scope.describe()}",
            lambda conn, _: conn.execute(query, params, binary=True).fetchone(),
        )
        if row is None:
            return None
        generation, count, data = row
        try:
            ids, threads, timestamps = decode_directory(bytes(data), generation, count)
        except (ValueError, KeyError, TypeError, struct.error) as exc:
            log.info("the page directory of %s is not used: %s; its rows are read", scope.describe(), exc)
            return None
        pages = RowPages.from_columns(
            lambda positions: self._pages_at(scope, generation, positions), ids, threads, timestamps
        )
        return RowLog(generation=generation, pages=pages, end=count, directory_pages=count)

    def _save_directory(self, scope: Scope, cache: RowLog, new_pages: int) -> None:
        """Save the cached log's directory when `new_pages` or more pages (DIRECTORY_MIN_PAGES in
        all) came since it was last saved (held: the log lock). They count as saved from then on:
        a save that fails is not tried again at every read."""
        count = len(cache.pages)
        if count < DIRECTORY_MIN_PAGES or count - cache.directory_pages < new_pages:
            return
        cache.directory_pages = count
        user_id, agent = scope_key(scope)
        params = {"u": user_id, "a": agent, "g": cache.generation, "n": count}
        params["data"] = encode_directory(cache.pages, count, cache.generation)
        try:
            self._db.run(
                f"save the page directory of {scope.describe()}",
                lambda conn, _: conn.execute(self._db.sql["write_page_directory"], params),
            )
        except StorageError as exc:  # the next start reads the rows, as without a directory
            log.warning("the page directory of %s was not saved (%s); its rows are read instead", scope.describe(), exc)

    def _new_log(self, scope: Scope, generation: int) -> RowLog:
        return RowLog(
            generation=generation, pages=RowPages(lambda positions: self._pages_at(scope, generation, positions))
        )

    def _read_log(self, conn: Connection, scope: Scope, after: int) -> _LogRead:
        """The log's generation (None: no such scope), the id, thread and timestamp of its pages
        from position `after` on, and the last one's position. A few rows (fewer than
        WHOLE_PAGES_BELOW, as after a start of a small log or since the last read) come whole and
        are checked as they arrive; a long log is read by its columns (100,000 rows: ~0.2 s,
        against ~1.2 s whole)."""
        user_id, agent = scope_key(scope)
        generation: int | None = None
        fields: list[tuple[str, str | None, str]] = []
        last = after - 1
        params = {"u": user_id, "a": agent, "after": after, "whole_below": WHOLE_PAGES_BELOW}
        with streamed(conn, self._db.sql["read_pages"], params, self._db.stream_rows) as rows:
            for row_generation, position, page_id, thread_id, said_at, text in rows:
                generation = row_generation
                if position is None:
                    continue
                if text is None:
                    fields.append((page_id, thread_id, said_at))
                else:
                    page = self._page_of_row(scope, position, text)
                    fields.append((page.page_id, page.thread_id, page.timestamp))
                last = position
        return generation, fields, last

    def _page_of_row(self, scope: Scope, position: int, text: str) -> Page:
        try:
            return page_from_record(text)
        except ValidationError as exc:
            reason = str(exc).splitlines()[0]
            raise StorageError(
                f"{self._db.schema}.pages of {scope.describe()} at position {position} is not a valid page "
                f"record ({reason}); it was left untouched (fix or delete that row)"
            ) from None

    def _pages_at(self, scope: Scope, generation: int, positions: Sequence[int]) -> list[Page]:
        """The pages at these positions of the log at `generation`, in one query; LogReplaced
        when the log is no longer that one (pages erased: positions now name other pages)."""
        user_id, agent = scope_key(scope)
        params = {"u": user_id, "a": agent, "g": generation, "positions": list(positions)}
        rows = self._db.run(
            f"read the pages of {scope.describe()}",
            lambda conn, _: conn.execute(self._db.sql["read_pages_at"], params).fetchall(),
        )
        texts: dict[int, str] = {position: text for position, text in rows}
        if len(texts) != len(set(positions)):
            raise LogReplaced(f"exchanges of {scope.describe()} were erased while they were read; ask again")
        return [self._page_of_row(scope, position, texts[position]) for position in positions]


def append_parameters(scope: Scope, pages: Sequence[Page]) -> dict[str, Any]:
    """The `append` statement's parameters for these pages of `scope`."""
    user_id, agent = scope_key(scope)
    return {
        "u": user_id,
        "a": agent,
        "n": len(pages),
        "ids": [page.page_id for page in pages],
        "pages": [page_record(page) for page in pages],
        "threads": [_as_text(page.thread_id) for page in pages],
        "said_at": [_as_text(page.timestamp) if _as_text(page.thread_id) == page.thread_id else None for page in pages],
    }


def _as_text(value: str | None) -> str | None:
    """`value` as a text column holds it (None when it holds U+0000, which text cannot: said_at is
    then NULL too, and readers fetch that page whole)."""
    return value if value is None or "\x00" not in value else None
