"""Turning conversation into structured memory: one LLM call per batch, parsed and applied by rules.

An update is applied in the same atomic write that marks its pages analysed. A reply cut off at
the output cap applies nothing and its batch is split in two. A batch whose replies keep being
unusable (unparseable, the wrong shape, or rejected by the rules) is set aside after
`memory.max_batch_attempts` tries: its exchanges stay stored and searchable, and are analysed
again only on request, never in a loop. An LLM that fails (down, slow, rate limiting) changes
nothing and leaves the pages pending for a later try.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import LLMError
from memory_mcp.base.settings import Settings
from memory_mcp.extraction.llm_client import ChatClient
from memory_mcp.extraction.prompt import build_messages, facts_to_show
from memory_mcp.extraction.reply_parsing import ReplyError, TruncatedReply, parse_reply, reply_schema
from memory_mcp.memory.progress import mark_analysed, pending_by_thread
from memory_mcp.memory.rules import SessionTopic, UpdateRejected, UpdateReport, apply_proposal, strip_upload_mentions
from memory_mcp.memory.sessions import session_of
from memory_mcp.memory.signals import detect_signals
from memory_mcp.models import Fact, FailingBatch, MemoryDocument, Page, SessionState, SetAsideBatch
from memory_mcp.models.stored import carries_host_memory
from memory_mcp.store import MemoryStore, Scope

MAX_BATCH_PAGES = 20

# What to record once a batch's update is applied: the document, given the batch's page numbers.
Settle = Callable[[MemoryDocument, list[int]], MemoryDocument]


@dataclass(frozen=True)
class _Target:
    """The memory an update was read from: its writes go there or nowhere (MemoryGone), never to
    memory erased meanwhile, nor to memory begun anew after an erase."""

    store: MemoryStore
    scope: Scope
    generation: int

    def write(self, change: Callable[[MemoryDocument], MemoryDocument]) -> None:
        self.store.update_document(self.scope, change, create=False, log_generation=self.generation)


class Updater:
    """Runs updates for one thread of one scope: batches its pending pages through the LLM."""

    def __init__(self, settings: Settings, store: MemoryStore, chat: ChatClient) -> None:
        self.settings = settings
        self.store = store
        self.chat = chat
        self._schema = reply_schema(settings.memory.max_fact_removals)

    def update_thread(self, scope: Scope, thread: str, cancel: threading.Event | None = None) -> UpdateReport:
        """Analyse the pending pages of `thread`, batch by batch. The caller holds the scope's
        exclusive update right. Stops at the first failure, leaving the rest pending."""
        report = UpdateReport()
        # Only pages that exist now: later ones have restarted their debounce timer, and taking
        # them here would send a call per add to a thread that is being written to.
        page_log = self.store.read_pages(scope)
        target = _Target(self.store, scope, page_log.generation)
        until = len(page_log.pages)
        while True:
            pages = self.store.read_pages(scope).pages
            document = self.store.read_document(scope)
            pending = pending_by_thread(pages, document.analysis).get(thread, [])
            batch = [number for number in pending if number < until][:MAX_BATCH_PAGES]
            if not batch or (cancel is not None and cancel.is_set()):
                return report
            try:
                report.merge(self._analyse(target, thread, batch, _marking_analysed(pages, thread), cancel))
            except ReplyError as exc:
                # Counted against the part whose reply failed (a split batch's other half may
                # have been applied already).
                pages = self.store.read_pages(scope).pages
                outcome = self._count_failure(target, thread, pages, exc.batch or batch, str(exc))
                report.merge(outcome)
                if not outcome.pages_set_aside:
                    return report  # tried again later, with growing delays
            except LLMError as exc:
                report.errors.append(str(exc))
                return report

    def retry_set_aside(self, scope: Scope, cancel: threading.Event | None = None) -> UpdateReport:
        """Analyse again the batches that were set aside; what succeeds leaves the list."""
        report = UpdateReport()
        target = _Target(self.store, scope, self.store.read_pages(scope).generation)
        for batch in list(self.store.read_document(scope).analysis.setAside):
            if cancel is not None and cancel.is_set():
                break
            pages = self.store.read_pages(scope).pages
            position = {page_id: number for number, page_id in enumerate(pages.ids)}
            numbers = [position[page_id] for page_id in batch.pageIds if page_id in position]
            try:
                report.merge(self._analyse(target, batch.thread, numbers, _taking_back(pages), cancel))
            except ReplyError as exc:
                target.write(_retried_in_vain(set(batch.pageIds), str(exc)))
                report.errors.append(f"set-aside exchanges still unusable: {exc}")
            except LLMError as exc:
                report.errors.append(str(exc))
                break
        return report

    def _analyse(
        self, target: _Target, thread: str, batch: list[int], settle: Settle, cancel: threading.Event | None
    ) -> UpdateReport:
        """One LLM call for the batch, applied with `settle` in one write. A reply cut off at the
        output cap applies nothing: the batch is split in half and each half tried in turn."""
        pages = self.store.read_pages(target.scope).pages
        document = self.store.read_document(target.scope)
        # Exchanges the host model already extracted from are not sent again: nothing twice.
        to_send = [pages[number] for number in batch if not carries_host_memory(pages[number])]
        if not to_send:
            target.write(lambda current: settle(current, batch))
            return UpdateReport(pages_analysed=len(batch))
        shown = facts_to_show(document, to_send)
        signals = detect_signals(page.user_input for page in to_send)
        messages = build_messages(document, to_send, signals, shown)
        completion = self.chat.complete(messages, self._schema, cancel)
        if completion.truncated and len(batch) > 1:
            half = len(batch) // 2
            report = UpdateReport(llm_calls=1)
            report.merge(self._analyse(target, thread, batch[:half], settle, cancel))
            report.merge(self._analyse(target, thread, batch[half:], settle, cancel))
            return report
        try:
            return self._apply(target, thread, completion.text, completion.truncated, batch, to_send, shown, settle)
        except ReplyError as exc:
            exc.batch = batch  # this batch's reply, not the larger one it may have been split from
            raise

    def _apply(
        self,
        target: _Target,
        thread: str,
        reply: str,
        truncated: bool,
        batch: list[int],
        sent: list[Page],
        shown: list[Fact],
        settle: Settle,
    ) -> UpdateReport:
        """Apply one reply by the rules, with `settle`, in one write; ReplyError if it cannot be."""
        if truncated:
            raise TruncatedReply(
                "LLM reply was cut off at memory.llm_max_output_tokens "
                f"({self.settings.memory.llm_max_output_tokens}) even for a single exchange"
            )
        proposal = parse_reply(reply)
        outcome = UpdateReport(llm_calls=1, pages_analysed=len(batch))
        removable = {fact.id for fact in shown}

        def change(current: MemoryDocument) -> MemoryDocument:
            # Applied to the document as it is now: a manual edit made during the LLM call survives.
            try:
                updated, applied = apply_proposal(current, proposal, self.settings, thread, removable)
            except UpdateRejected as exc:
                raise ReplyError(f"LLM reply rejected: {exc}") from None
            outcome.merge(applied)
            return settle(_with_topic(updated, session_of(sent[-1]), proposal.session), batch)

        target.write(change)
        return outcome

    def _count_failure(
        self, target: _Target, thread: str, pages: Sequence[Page], batch: list[int], reason: str
    ) -> UpdateReport:
        """Record one more unusable reply for the thread's batch; at the limit, set it aside."""
        limit = self.settings.memory.max_batch_attempts
        report = UpdateReport(errors=[reason])
        first = pages[batch[0]].page_id

        def change(document: MemoryDocument) -> MemoryDocument:
            analysis = document.analysis
            failing = dict(analysis.failing)
            previous = failing.get(thread)
            attempts = previous.attempts + 1 if previous is not None and previous.firstPageId == first else 1
            now = utc_now()
            if attempts < limit:
                failing[thread] = FailingBatch(firstPageId=first, attempts=attempts, reason=reason, at=now)
                return document.model_copy(update={"analysis": analysis.model_copy(update={"failing": failing})})
            failing.pop(thread, None)
            aside = SetAsideBatch(
                thread=thread, pageIds=[pages[n].page_id for n in batch], reason=reason, at=now, attempts=attempts
            )
            progress = mark_analysed(analysis, pages, thread, batch[-1])
            report.pages_set_aside = len(batch)
            report.errors = []
            return document.model_copy(
                update={
                    "analysis": progress.model_copy(
                        update={"failing": failing, "setAside": [*analysis.setAside, aside]}
                    )
                }
            )

        target.write(change)
        return report


def _marking_analysed(pages: Sequence[Page], thread: str) -> Settle:
    """Settle a pending batch: its pages count as analysed, and the thread is failing no more."""

    def settle(document: MemoryDocument, batch: list[int]) -> MemoryDocument:
        analysis = mark_analysed(document.analysis, pages, thread, batch[-1])
        failing = {key: value for key, value in analysis.failing.items() if key != thread}
        return document.model_copy(update={"analysis": analysis.model_copy(update={"failing": failing})})

    return settle


def _taking_back(pages: Sequence[Page]) -> Settle:
    """Settle (part of) a set-aside batch analysed at last: its pages leave the list."""

    def settle(document: MemoryDocument, batch: list[int]) -> MemoryDocument:
        done = {pages[number].page_id for number in batch}
        return _edit_set_aside(
            document,
            lambda entry: entry.model_copy(update={"pageIds": [page for page in entry.pageIds if page not in done]}),
        )

    return settle


def _retried_in_vain(page_ids: set[str], reason: str) -> Callable[[MemoryDocument], MemoryDocument]:
    """Record another unusable reply for what is left of a set-aside batch."""
    now = utc_now()
    return lambda document: _edit_set_aside(
        document,
        lambda entry: (
            entry.model_copy(update={"reason": reason, "at": now, "attempts": entry.attempts + 1})
            if page_ids & set(entry.pageIds)
            else entry
        ),
    )


def _edit_set_aside(document: MemoryDocument, edit: Callable[[SetAsideBatch], SetAsideBatch]) -> MemoryDocument:
    entries = [edited for edited in map(edit, document.analysis.setAside) if edited.pageIds]
    return document.model_copy(update={"analysis": document.analysis.model_copy(update={"setAside": entries})})


def _with_topic(document: MemoryDocument, session: str, topic: SessionTopic | None) -> MemoryDocument:
    """The mid-term session's topic, as the LLM summed up its latest exchanges."""
    if topic is None or not (topic.summary.strip() or topic.keywords):
        return document
    sessions = dict(document.sessions)
    state = sessions.get(session, SessionState()).model_copy()
    state.summary = strip_upload_mentions(topic.summary) or state.summary
    state.keywords = topic.keywords or state.keywords
    sessions[session] = state
    return document.model_copy(update={"sessions": sessions})


def pending_threads(store: MemoryStore, scope: Scope) -> dict[str, int]:
    """How many pages await analysis in each thread of `scope`; the log is read only when some do."""
    progress = store.read_document(scope).analysis
    if progress.allBefore >= store.page_count(scope):
        return {}
    pages = store.read_pages(scope).pages
    return {thread: len(numbers) for thread, numbers in pending_by_thread(pages, progress).items()}


def pending_count(store: MemoryStore, scope: Scope) -> int:
    """How many pages await analysis in `scope`: counted without loading the log unless some
    thread was analysed further than the rest."""
    progress = store.read_document(scope).analysis
    if not progress.threads:
        return max(0, store.page_count(scope) - progress.allBefore)
    return sum(pending_threads(store, scope).values())
