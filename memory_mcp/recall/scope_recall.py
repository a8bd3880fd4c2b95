"""Recall of exchanges, per scope: the search index, MemoryOS's session tier, and their upkeep.

The index and session table live in memory, are built on first use and then follow the page
log; visits are saved in the background, with eviction and hot-session analysis in the same write.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from memory_mcp.base.clock import now, utc_now
from memory_mcp.base.errors import MemoryGone, StorageError
from memory_mcp.base.settings import Settings
from memory_mcp.memory.progress import pending_by_thread, thread_key
from memory_mcp.memory.sessions import SessionTable, archived_sessions, sessions_to_archive, thread_of_session
from memory_mcp.models import MemoryDocument, Page, RetrieveMemoryRequest, SessionState
from memory_mcp.recall.bm25 import LexicalIndex
from memory_mcp.recall.fusion import best_of, fused, lexical_share
from memory_mcp.recall.periods import pages_within, periods_in, without_relative_times
from memory_mcp.recall.saved_index import Opened, SnapshotKeeper
from memory_mcp.recall.spelling import respelled
from memory_mcp.recall.vectors import VectorTable, fact_relevance
from memory_mcp.store import MemoryStore, PageLog, Scope

log = logging.getLogger(__name__)


class Hit(NamedTuple):
    """A page a search found: its position in the log, its rank score, and how relevant it is on
    scales that do not depend on the other pages: `words`, the share of the query's weight its
    own words answer (LexicalIndex.own_scores over query_weight: ~1 when it holds every term of
    the query once), and `meaning`, its vector similarity to the query (None without vectors).
    relevance.py decides from these what is worth a model's tokens."""

    position: int
    score: float
    words: float
    meaning: float | None


@dataclass
class _RecentWindow:
    """The newest pages by timestamp (ties: the later added), kept as the log grows: pages
    imported from long ago land at the end of the log but not in the window."""

    generation: int = -1
    seen: int = 0
    newest: list[tuple[str, int]] = field(default_factory=list)  # (timestamp, position), ascending

    def catch_up(self, page_log: PageLog, end: int, capacity: int) -> list[int]:
        """The window over the first `end` pages of the log, as positions, oldest first."""
        if self.generation != page_log.generation or end < self.seen:
            self.generation, self.seen, self.newest = page_log.generation, 0, []
        stamps = page_log.pages.timestamps
        if self.seen == 0 and end > capacity:
            # A stable sort of a log mostly in time order is nearly linear: ties stay in log order.
            newest = sorted(range(end), key=stamps.__getitem__)[-capacity:]
            self.newest = [(stamps[n], n) for n in newest]
        else:
            for position in range(self.seen, end):
                key = (stamps[position], position)
                if len(self.newest) < capacity:
                    bisect.insort(self.newest, key)
                elif key > self.newest[0]:
                    bisect.insort(self.newest, key)
                    del self.newest[0]
        self.seen = end
        return [position for _, position in self.newest]


@dataclass
class _ScopeCache:
    """What is kept in memory per scope: the search index, the session table, and the mask of
    searchable pages, with the page log generation they reflect."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    generation: int = -1
    index: LexicalIndex = field(default_factory=LexicalIndex)
    sessions: SessionTable = field(default_factory=SessionTable)
    mask_key: tuple[int, frozenset[str]] | None = None
    mask: Any = None
    maintenance: threading.Thread | None = None  # saving visits in the background, if it is
    let_go: bool = False  # no longer kept: a search that still holds it saves the visits it counts
    recent: _RecentWindow = field(default_factory=_RecentWindow)
    vectors: VectorTable | None = None  # with embeddings on, once a query vector came along
    saved_pages: int = 0  # how many pages the index's saved snapshot covers
    snapshot_ahead: Future[Opened | None] | None = None  # the saved index, being read before first use


class PageRecall:
    """Ranks a scope's exchanges and keeps its session tier; `on_hot(scope, thread)` is told when
    a session with unanalysed exchanges turns hot (None: nobody analyses, so nothing is hot), and
    `on_unembedded(scope)` when a search with a query vector meets pages that have none."""

    def __init__(
        self,
        settings: Settings,
        store: MemoryStore,
        on_hot: Callable[[Scope, str], None] | None = None,
        on_unembedded: Callable[[Scope], None] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self._on_hot = on_hot
        self._on_unembedded = on_unembedded
        self._caches: OrderedDict[Scope, _ScopeCache] = OrderedDict()  # least recently used first
        self._guard = threading.Lock()
        self._snapshots = SnapshotKeeper(store)
        self._leaving: list[threading.Thread] = []  # saving the visits of caches let go

    def drop(self, scopes: list[Scope]) -> None:
        """Forget what is cached for erased scopes."""
        with self._guard:
            for scope in scopes:
                self._caches.pop(scope, None)

    def cached(self) -> int:
        """How many scopes' indexes and session tables are in memory now."""
        with self._guard:
            return len(self._caches)

    def close(self) -> None:
        """Save the word indexes grown since their last save, and whatever visits are still
        unsaved, so that the next start finds both."""
        self._snapshots.wait()
        with self._guard:
            caches = list(self._caches.items())
        for scope, cache in caches:
            self._save_grown_index(scope, cache)
        while True:  # a save of a cache let go may start another, for visits counted meanwhile
            with self._guard:
                leaving, self._leaving = self._leaving, []
            if not leaving:
                break
            for worker in leaving:
                worker.join()
        for scope, cache in caches:
            running = cache.maintenance
            if running is not None:
                running.join()
            if cache.sessions.unsaved_visits:
                self._maintain_sessions(scope, cache)

    def recent(self, scope: Scope, page_log: PageLog, among_first: int, within: Any = None) -> list[int]:
        """Positions of the `short_term_capacity` newest pages by timestamp, oldest first,
        among the first `among_first` of the log (and those `within` marks, if given)."""
        if within is not None:  # a window asked for once: no state worth keeping
            stamps = page_log.pages.timestamps
            newest = heapq.nlargest(
                self.settings.short_term_capacity, ((stamps[n], int(n)) for n in within.nonzero()[0])
            )
            return [position for _, position in sorted(newest)]
        cache = self._entry(scope)
        with cache.lock:
            return cache.recent.catch_up(page_log, among_first, self.settings.short_term_capacity)

    def search(
        self,
        scope: Scope,
        page_log: PageLog,
        document: MemoryDocument,
        request: RetrieveMemoryRequest,
        among_first: int,
        exclude: list[int],
        within: Any = None,
        query_vector: Any = None,
        vector_model: str = "",
    ) -> list[Hit]:
        """Rank the scope's pages but those in `exclude` (the recent ones) and those `within`
        leaves out: archived sessions left out unless asked for, hot sessions lifted by
        `heat_ranking_weight`; by words, and by similarity to `query_vector` too when one is
        given (pages with vectors of `vector_model`). Each session returned counts a visit."""
        if among_first <= len(exclude) or not request.query.strip():
            return []
        weight = self.settings.heat_ranking_weight
        with self._current(scope, page_log) as cache:
            archive = None if request.include_archived else self._searchable(cache, document)
            eligible = _eligible(among_first, [within, archive], exclude)
            wanted = request.max_results * (3 if weight else 1)
            periods = periods_in(request.query, now())
            period = pages_within(page_log.pages.between(0, among_first).timestamps, periods) if periods else None
            # When the time named holds memory this search may return, the period says when and the
            # words need not; when it holds none, its words are all there is (the asker may be quoting).
            named_held = period is not None and bool((period[: len(eligible)] & eligible[: len(period)]).any())
            words = without_relative_times(request.query) if named_held else request.query
            lexical = cache.index.scores(words, among_first, allowed=eligible, period=period)
            pages = page_log.pages
            lexical = cache.index.with_phrases(
                lexical, words, lambda numbers: [_page_text(page) for page in pages.pick(numbers)]
            )
            query_weight = cache.index.query_weight(words)
            scores, similarities = lexical, None
            if query_vector is not None:
                scores, similarities = self._with_vectors(
                    cache,
                    scope,
                    pages[:among_first],
                    lexical,
                    request.query,
                    query_vector,
                    vector_model,
                    eligible,
                    period,
                )
            ranked = best_of(scores, wanted)
            if weight and ranked:
                page_sessions = cache.sessions.page_sessions
                hit_sessions = {page_sessions[i] for i, _ in ranked}
                heats = cache.sessions.heats(document, now(), self.settings, only=hit_sessions)
                lifted = ((i, score * (1 + weight * math.log1p(heats[page_sessions[i]]))) for i, score in ranked)
                ranked = sorted(lifted, key=lambda hit: (-hit[1], -hit[0]))
            ranked = ranked[: request.max_results]
            own = cache.index.own_scores(words, [position for position, _ in ranked])
            cache.sessions.visit((cache.sessions.page_sessions[i] for i, _ in ranked), utc_now())
            # A document write and a scan of every session: not on the caller's time.
            saving = self._visits_saver(scope, cache) if cache.sessions.should_save() or cache.let_go else None
        self._start(saving, cache)
        return [
            Hit(
                position,
                score,
                own_score / query_weight if query_weight > 0 else 0.0,
                None if similarities is None else float(similarities[position]),
            )
            for (position, score), own_score in zip(ranked, own, strict=True)
        ]

    def _with_vectors(
        self,
        cache: _ScopeCache,
        scope: Scope,
        pages: Sequence[Page],
        lexical: Any,
        query: str,
        query_vector: Any,
        model: str,
        eligible: Any,
        period: Any,
    ) -> tuple[Any, Any]:
        """The word scores fused with the pages' similarity to the query, and those similarities
        (0 where a page has no vector yet); `period`: the pages of the time the query names, if
        it names one (held: cache.lock)."""
        table = self._vectors(cache, scope, pages, model)
        similarities, has_vector = table.similarities(query_vector, len(lexical))
        if not has_vector.all() and self._on_unembedded is not None:
            self._on_unembedded(scope)
        weight = lexical_share(self.settings.embeddings.lexical_weight, query)
        ranked_by = table.with_neighbours(similarities, has_vector)
        lift = 0.0 if period is None else cache.index.period_lift(int(period[: len(cache.index)].sum()))
        within = None if period is None else period[: len(lexical)]  # as long as `eligible`, as fused wants
        scores = fused(lexical, ranked_by, has_vector, eligible[: len(lexical)], weight, within, lift)
        return scores, similarities * has_vector

    def respelled(self, scope: Scope, page_log: PageLog, query: str) -> str:
        """`query` as its vector is computed from: its misspelt words written as pages hold them."""
        with self._current(scope, page_log) as cache:
            return respelled(query, cache.index.typos(query))

    def fact_relevance(
        self, scope: Scope, page_log: PageLog, contents: Sequence[str], query_vector: Any, model: str
    ) -> Any:
        """How much each fact stands out from the others by meaning for the query (0-1, see
        `embeddings.fact_relevance`); facts without a vector yet score 0 and are asked for."""
        cache = self._entry(scope)
        with cache.lock:
            # Facts need no page index: none is built for them, and pages not indexed yet wait.
            indexed = page_log.pages[: len(cache.index)] if cache.generation == page_log.generation else []
            table = self._vectors(cache, scope, indexed, model)
            similarities, has_vector = table.fact_similarities(query_vector, contents)
        if not has_vector.all() and self._on_unembedded is not None:
            self._on_unembedded(scope)
        return fact_relevance(similarities, has_vector)

    def _vectors(self, cache: _ScopeCache, scope: Scope, pages: Sequence[Page], model: str) -> VectorTable:
        """The scope's vectors of `model`, read on from the store (held: cache.lock)."""
        if cache.vectors is None or cache.vectors.model != model:
            cache.vectors = VectorTable(model)
        cache.vectors.catch_up(self.store, scope, pages)
        return cache.vectors

    def search_all(
        self, scope: Scope, page_log: PageLog, query: str, limit: int, among_first: int
    ) -> list[tuple[int, float]]:
        """Rank every page (recent and archived ones too) without counting a visit: for a person
        looking through their own memory."""
        with self._current(scope, page_log) as cache:
            return cache.index.search(query, limit, among_first=among_first)

    def _entry(self, scope: Scope) -> _ScopeCache:
        """The scope's cache as it is (made empty on first use); the least recently used beyond
        `memory.cached_scopes` are let go."""
        with self._guard:
            cache = self._caches.get(scope)
            if cache is None:
                cache = self._caches[scope] = _ScopeCache()
            self._caches.move_to_end(scope)
            let_go = [
                self._caches.popitem(last=False) for _ in range(len(self._caches) - self.settings.memory.cached_scopes)
            ]
        for old_scope, old in let_go:
            self._let_go(old_scope, old)
        return cache

    def _let_go(self, scope: Scope, cache: _ScopeCache) -> None:
        """A cache no longer kept: its unsaved visits are saved first, in the background, and so
        are those a search still holding it counts afterwards."""
        with cache.lock:
            cache.let_go = True
            saving = self._visits_saver(scope, cache) if cache.sessions.unsaved_visits else None
        self._start(saving, cache)

    def _visits_saver(self, scope: Scope, cache: _ScopeCache) -> threading.Thread | None:
        """A thread to save the cache's visits, unless one is at it (held: cache.lock)."""
        if cache.maintenance is not None:
            return None  # it saves again when done if visits came meanwhile to a cache let go
        cache.maintenance = threading.Thread(target=self._maintain_sessions, args=(scope, cache), daemon=True)
        return cache.maintenance

    def _start(self, saving: threading.Thread | None, cache: _ScopeCache) -> None:
        """Start a save of visits; one of a cache let go is waited for at close."""
        if saving is None:
            return
        if cache.let_go:
            with self._guard:
                self._leaving = [each for each in self._leaving if each.is_alive()] + [saving]
        saving.start()

    def read_index_ahead(self, scope: Scope) -> None:
        """Start reading the scope's saved index if its cache has none yet and there is one (call
        before reading the log: the two then arrive together). Where there is none (most users of
        a many-user instance), no thread is started: under 4 clients, one per first call cost
        ~25% of a cold retrieve."""
        cache = self._entry(scope)
        with cache.lock:
            if cache.generation == -1 and cache.snapshot_ahead is None and self.store.has_index_snapshot(scope):
                cache.snapshot_ahead = self._snapshots.read_ahead(scope)

    def cache(self, scope: Scope, page_log: PageLog) -> _ScopeCache:
        """The scope's cache, brought up to date with the page log."""
        with self._current(scope, page_log) as cache:
            return cache

    @contextmanager
    def _current(self, scope: Scope, page_log: PageLog) -> Iterator[_ScopeCache]:
        """The scope's cache brought up to date with `page_log`, its lock held until the caller is
        done: a log read by another caller meanwhile cannot swap the index between the two (its
        positions would be read as this log's pages)."""
        cache = self._entry(scope)
        with cache.lock:
            if cache.generation != page_log.generation:
                ahead, cache.snapshot_ahead = cache.snapshot_ahead, None
                cache.index = self._snapshots.saved_index(scope, page_log, ahead)
                cache.generation, cache.mask_key, cache.vectors = page_log.generation, None, None
                cache.saved_pages = len(cache.index)
            pages = page_log.pages
            cache.index.extend([(_page_text(page), thread_key(page)) for page in pages[len(cache.index) : len(pages)]])
            cache.sessions.catch_up(page_log.generation, pages[: len(cache.index)])
            # Counted as saved once a save is started: one under way leaves it to the next chance.
            if self._snapshots.worth_saving(cache.saved_pages, len(cache.index)) and self._snapshots.save_soon(
                scope, cache.lock, cache.index, page_log
            ):
                cache.saved_pages = len(cache.index)
            yield cache

    def keep_index(self, scope: Scope, added: int) -> None:
        """After `added` pages were written to the scope: bring its index up to date and save it
        when worth it (see SnapshotKeeper), so that the next start finds it whoever wrote. An index
        not in memory is loaded for it only when `index_due`."""
        with self._guard:
            cache = self._caches.get(scope)
        if (cache is None or cache.generation == -1) and not self.index_due(scope, added):
            return  # the log is not even read: most writes of a many-user server end here
        self.cache(scope, self.store.read_pages(scope))

    def index_due(self, scope: Scope, added: int) -> bool:
        """Whether a process that added `added` pages to the scope and holds no index of it
        should have one built and saved (a hook's process leaves that to another)."""
        return self._snapshots.due(scope, self.store.page_count(scope), added)

    def _save_grown_index(self, scope: Scope, cache: _ScopeCache) -> None:
        """At close, one scope after another (each encoding holds a copy of its index)."""
        with cache.lock:
            if not self._snapshots.worth_saving(cache.saved_pages, len(cache.index), closing=True):
                return
            try:
                page_log = self.store.read_pages(scope)
            except StorageError:
                return  # the next start builds what it cannot read from a snapshot
            if page_log.generation != cache.generation:
                return
            cache.saved_pages = len(cache.index)
        self._snapshots.save(scope, cache.lock, cache.index, page_log)

    @staticmethod
    def _searchable(cache: _ScopeCache, document: MemoryDocument) -> Any:
        """Which pages normal retrieval may return (None: all); rebuilt only when it changes."""
        archived = archived_sessions(document)
        if not archived:
            return None
        key = (len(cache.sessions.page_sessions), archived)
        if cache.mask_key != key:
            import numpy as np

            cache.mask = np.fromiter((name not in archived for name in cache.sessions.page_sessions), dtype=bool)
            cache.mask_key = key
        return cache.mask

    def _maintain_sessions(self, scope: Scope, cache: _ScopeCache) -> None:
        """Save unsaved visits in one document write, and in the same write: ask the updater to
        analyse hot sessions now (resetting their heat, as MemoryOS does), and archive the coldest
        analysed sessions beyond `mid_term_capacity`."""
        pages = self.store.read_pages(scope).pages
        hot_threads: list[str] = []

        def change(document: MemoryDocument) -> MemoryDocument:
            with cache.lock:
                document = cache.sessions.apply_unsaved(document)
                heats = cache.sessions.heats(document, now(), self.settings)
                page_sessions = cache.sessions.page_sessions[: len(pages)]
                sizes = dict(cache.sessions.sizes)
            pending = pending_by_thread(pages, document.analysis).values()
            unanalysed = {page_sessions[n] for numbers in pending for n in numbers if n < len(page_sessions)}
            sessions = document.sessions
            for name in unanalysed:
                if self._on_hot is not None and heats.get(name, 0.0) >= self.settings.mid_term_heat_threshold:
                    state = sessions.setdefault(name, SessionState())
                    state.visits, state.counted = 0, sizes.get(name, 0)
                    hot_threads.append(thread_of_session(name))
            visits = {name: state.visits for name, state in sessions.items()}
            for name in sessions_to_archive(
                heats, visits, archived_sessions(document), unanalysed, self.settings.mid_term_capacity
            ):
                sessions.setdefault(name, SessionState()).archived = True
            return document

        saved = False
        try:
            # Visits count for the log the index was built from: never for memory erased since.
            self.store.update_document(scope, change, create=False, log_generation=cache.generation)
            saved = True
        except MemoryGone:
            return
        except StorageError as exc:
            log.warning("session visits of %s not saved: %s", scope.describe(), exc)
            return
        finally:
            with cache.lock:
                if cache.maintenance is threading.current_thread():
                    cache.maintenance = None
                counted_meanwhile = saved and cache.let_go and cache.sessions.unsaved_visits
                again = self._visits_saver(scope, cache) if counted_meanwhile else None
            self._start(again, cache)
        for thread in hot_threads:
            assert self._on_hot is not None
            self._on_hot(scope, thread)


def _eligible(count: int, masks: Sequence[Any], exclude: Sequence[int]) -> Any:
    """Which of the first `count` pages a search may return: those every mask allows (a mask
    covers the first pages; None allows all), but the `exclude`d ones."""
    import numpy as np

    eligible = np.ones(count, dtype=bool)
    for mask in masks:
        if mask is not None:
            covered = min(len(mask), count)
            eligible[:covered] &= mask[:covered]
    eligible[[number for number in exclude if number < count]] = False
    return eligible


def _page_text(page: Page) -> str:
    """What a page is found by: both sides of the exchange, and its date in words, so that
    "what did I do in May 2023" matches pages from then."""
    text = f"{page.user_input}\n{page.agent_response}"
    try:
        moment = datetime.fromisoformat(page.timestamp)
    except ValueError:
        return text
    return f"{text}\n{moment:%B} {moment.day} {moment.year}"
