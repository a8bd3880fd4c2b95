"""Erasing memory for good: a whole scope (forget), one exchange, or a scope replaced by an import.

Whatever runs on a scope is stopped first and whatever is cached of it dropped after, so that
nothing erased comes back from a cache or from an update that read it before.
"""

from __future__ import annotations

from memory_mcp.base.errors import InvalidInput, NotFound, StorageError
from memory_mcp.base.settings import Settings
from memory_mcp.extraction.retention import document_without
from memory_mcp.extraction.runner import UpdateRunner
from memory_mcp.models import ForgetExchangeResult, ForgetResult
from memory_mcp.recall.scope_recall import PageRecall
from memory_mcp.service.admission import ImportPart
from memory_mcp.service.browse import PageProjects
from memory_mcp.service.scopes import is_stored, require_stored, with_agents
from memory_mcp.service.session_ledger import erase_ledgers
from memory_mcp.store import MemoryStore, Scope

ERASE_WAIT_SECONDS = 30.0  # for an update under way, before erasing an exchange says busy


class Erasure:
    """Erases scopes and exchanges, and lets go of what the updater, the recall caches, the
    session ledgers and the page-project cache hold of them."""

    def __init__(
        self,
        settings: Settings,
        store: MemoryStore,
        updates: UpdateRunner,
        recall: PageRecall,
        page_projects: PageProjects,
    ) -> None:
        self._settings = settings
        self._store = store
        self._updates = updates
        self._recall = recall
        self._page_projects = page_projects

    def forget(self, scope: Scope, confirm: str) -> ForgetResult:
        """Erase everything stored for the scope; for a user's own scope, their agents' too."""
        if confirm != scope.user_id:
            raise InvalidInput(f"confirm must equal the user_id ({scope.user_id!r}) to erase that user's memory")
        require_stored(self._store, scope)
        scopes = with_agents(self._store, scope)
        pages = sum(len(self._store.read_pages(each).pages) for each in scopes)
        facts = sum(len(self._store.read_document(each).facts) for each in scopes)
        self._erase(scope)
        return ForgetResult(
            user_id=scope.user_id,
            agent_name=scope.agent_name,
            removed_pages=pages,
            removed_facts=facts,
            message=f"Erased all memory of {scope.describe()}{' and its agents' if scope.agent_name is None else ''}.",
        )

    def forget_exchange(self, scope: Scope, exchange_id: str) -> ForgetExchangeResult:
        """Erase one exchange for good: from the log, its vectors, the word index and the sessions'
        counts, in one step a crash cannot leave half done. What was learned from it stays (facts
        are erased one by one). An update under way is waited for, as it reads the exchanges by
        their positions."""
        require_stored(self._store, scope)
        with self._store.exclusive_updates(scope, wait=ERASE_WAIT_SECONDS) as acquired:
            if not acquired:
                raise StorageError(
                    f"the memory of {scope.describe()} is being updated (an LLM call may take a minute): "
                    "nothing was erased; try again shortly"
                )
            pages = self._store.read_pages(scope).pages
            if exchange_id not in pages.ids:
                raise NotFound(f"no exchange {exchange_id!r} in the memory of {scope.describe()}")
            self._store.erase_pages(
                scope, [exchange_id], lambda document, positions: document_without(document, pages, positions)
            )
        self._page_projects.drop(scope)
        return ForgetExchangeResult(
            user_id=scope.user_id,
            agent_name=scope.agent_name,
            exchange_id=exchange_id,
            message=f"Erased exchange {exchange_id} of {scope.describe()} for good.",
        )

    def replace(self, scope: Scope, parts: list[ImportPart]) -> None:
        """Swap in `parts` for the scope (for a user, with their agents) at once: a crash leaves
        the old memory or the new."""
        affected = self._let_go(scope)
        self._store.replace(scope, parts)
        self._recall.drop(affected)

    def _erase(self, scope: Scope) -> None:
        """Erase a scope (for a user, with their agents) and forget everything cached about it.

        It waits for no update: one under way here is cancelled (its LLM call cut off), and no
        background write, here or in another process, can recreate erased memory or write into
        memory begun anew after it (the store refuses them), so an erase never fails for being busy."""
        if not is_stored(self._store, scope):
            return
        affected = self._let_go(scope)
        self._store.erase(scope)
        self._recall.drop(affected)

    def _let_go(self, scope: Scope) -> list[Scope]:
        """Before a scope (for a user, with their agents) is erased or replaced: its updates cut off,
        and what host sessions were given of it forgotten. Returns the scopes (whose caches the
        caller drops once the store has changed)."""
        affected = with_agents(self._store, scope)
        self._updates.stop_for_erase(affected)
        erase_ledgers(self._settings.data_storage_path, scope)  # what host sessions were given: ids only
        for each in affected:
            self._page_projects.drop(each)
        return affected
