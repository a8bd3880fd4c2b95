"""Changing memory through the dashboard as a person does, in a real Chromium: add, reword, pin and
delete a fact, be told when a value is refused, import another user's export after a preview, and
forget a user. Each test has its own server and data directory (`fresh_dashboard`), and checks both
what the page then shows and what is stored (read back with MemoryService).

Every test fails too if its page logged a console error, threw, or opened a dialog (conftest.py).
Screenshots: artifacts/screenshots/user-edit-1400.png (a fact's edit form open) and
import-preview-1400.png.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from memory_mcp.base.settings import Settings
from memory_mcp.models import SearchFactsRequest
from memory_mcp.models.stored import Fact
from memory_mcp.service.memory_service import MemoryService

try:
    from playwright.sync_api import Locator, Page, expect
except ImportError:  # the `browser` fixture skips, or fails with the reason when browsers are required
    Locator = Page = Any  # type: ignore[misc,assignment]
    expect = None  # type: ignore[assignment]

pytestmark = pytest.mark.integration

Screenshot = Callable[[Any, str], Path]
Refused = Callable[[int, str], AbstractContextManager[None]]


# --- what is stored --------------------------------------------------------------------------


@contextmanager
def service_over(data_dir: Path) -> Iterator[MemoryService]:
    service = MemoryService(Settings(data_storage_path=data_dir))
    try:
        yield service
    finally:
        service.close()


def stored_facts(data_dir: Path, user_id: str, include_superseded: bool = True) -> list[Fact]:
    """Every fact stored for `user_id`, superseded ones too unless told otherwise."""
    with service_over(data_dir) as service:
        request = SearchFactsRequest.build(user_id=user_id, include_superseded=include_superseded, limit=500)
        return list(service.search_facts(request).facts)


def stored_wordings(data_dir: Path, user_id: str) -> set[str]:
    return {fact.content for fact in stored_facts(data_dir, user_id)}


def only(facts: list[Fact], content: str) -> Fact:
    found = [fact for fact in facts if fact.content == content]
    assert len(found) == 1, f"{len(found)} stored facts read {content!r}: {facts}"
    return found[0]


# --- what the page shows ---------------------------------------------------------------------


def facts_table(page: Page) -> Locator:
    return page.get_by_role("region", name="Facts").get_by_role("table")


def fact_row(page: Page, wording: str) -> Locator:
    """The row of the facts table whose fact reads `wording` (followed by nothing, or by its tags)."""
    first_cell = page.locator("td:first-child", has_text=re.compile(rf"^\s*{re.escape(wording)}(\s|$)"))
    return facts_table(page).locator("tbody tr").filter(has=first_cell)


def no_longer_holds(page: Page) -> Locator:
    return page.get_by_role("region", name="What no longer holds")


def open_edit(row: Locator) -> None:
    """Open the row's "Edit" disclosure, as a click on its summary does."""
    row.get_by_text("Edit", exact=True).click()
    expect(row.get_by_role("button", name="Save")).to_be_visible()


def add_a_fact(page: Page, wording: str, category: str, confidence: str | None = None) -> None:
    page.get_by_text("Add a fact", exact=True).click()
    form = page.locator("form").filter(has=page.get_by_role("button", name="Add", exact=True))
    form.get_by_label("Fact", exact=True).fill(wording)
    form.get_by_label("Category", exact=True).select_option(category)
    if confidence is not None:
        form.get_by_label("Confidence", exact=True).fill(confidence)
    form.get_by_role("button", name="Add", exact=True).click()


@contextmanager
def another_tab(page: Page, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A second tab of the same browser, watched like the first (conftest's `page`)."""
    tab = page.context.new_page()
    problems: list[str] = request.node.browser_problems
    tab.on(
        "console",
        lambda message: problems.append(f"console.error: {message.text}") if message.type == "error" else None,
    )
    tab.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    tab.on("dialog", lambda dialog: (problems.append(f"a {dialog.type} dialog opened"), dialog.dismiss()))
    try:
        yield tab
    finally:
        tab.close()


# --- facts -----------------------------------------------------------------------------------


def test_a_fact_added_through_the_form_is_listed_and_stored(page: Page, fresh_dashboard: Any) -> None:
    page.goto(fresh_dashboard.url("/users/alice"))
    add_a_fact(page, "Speaks Portuguese at home", "knowledge", confidence="0.8")

    expect(page).to_have_url(fresh_dashboard.url("/users/alice"))  # back on the page, not on a form result
    row = fact_row(page, "Speaks Portuguese at home")
    expect(row).to_have_count(1)
    expect(row.get_by_role("cell").nth(1)).to_have_text("knowledge")
    expect(row.get_by_role("cell").nth(2)).to_have_text("0.80")
    expect(row.get_by_text("pinned", exact=True)).to_have_count(0)
    expect(fact_row(page, fresh_dashboard.seeded.alice_fact)).to_have_count(1)  # the others stay

    stored = only(stored_facts(fresh_dashboard.data_dir, "alice"), "Speaks Portuguese at home")
    assert (stored.category, stored.confidence, stored.pinned, stored.validTo) == ("knowledge", 0.8, False, None)


def test_rewording_a_fact_lists_the_new_wording_and_keeps_the_old_as_replaced(
    page: Page, fresh_dashboard: Any, screenshot: Screenshot
) -> None:
    old, new = fresh_dashboard.seeded.bob_fact, "Runs a marathon in June"
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(fresh_dashboard.url("/users/bob"))
    expect(no_longer_holds(page)).to_have_count(0)  # nothing replaced yet
    row = fact_row(page, old)
    open_edit(row)
    wording = row.get_by_label("Fact", exact=True)
    expect(wording).to_have_value(old)
    wording.fill(new)
    screenshot(page, "user-edit-1400")
    row.get_by_role("button", name="Save").click()

    expect(fact_row(page, new)).to_have_count(1)
    expect(fact_row(page, old)).to_have_count(0)
    history = no_longer_holds(page).get_by_role("listitem").filter(has_text=old)
    expect(history).to_have_count(1)
    expect(history).to_contain_text("replaced by")

    facts = stored_facts(fresh_dashboard.data_dir, "bob")
    replaced, current = only(facts, old), only(facts, new)
    assert replaced.validTo is not None and replaced.supersededBy == current.id
    assert current.validTo is None
    # The link "replaced by" names the new fact and leads to its row.
    link = history.get_by_role("link")
    expect(link).to_have_text(current.id)
    expect(link).to_have_attribute("href", f"#{current.id}")
    expect(page.locator(f"tr[id='{current.id}']")).to_contain_text(new)


def test_pinning_a_fact_shows_it_pinned_and_changes_nothing_else(page: Page, fresh_dashboard: Any) -> None:
    wording = fresh_dashboard.seeded.bob_fact
    page.goto(fresh_dashboard.url("/users/bob"))
    row = fact_row(page, wording)
    expect(row.get_by_text("pinned", exact=True)).to_have_count(0)
    open_edit(row)
    pinned = row.get_by_label("Pinned", exact=True)
    expect(pinned).not_to_be_checked()
    pinned.check()
    row.get_by_role("button", name="Save").click()

    expect(fact_row(page, wording).get_by_text("pinned", exact=True)).to_be_visible()
    expect(no_longer_holds(page)).to_have_count(0)  # a pin edits the fact in place: nothing replaced
    open_edit(fact_row(page, wording))
    expect(fact_row(page, wording).get_by_label("Pinned", exact=True)).to_be_checked()

    [fact] = stored_facts(fresh_dashboard.data_dir, "bob")
    assert (fact.content, fact.pinned, fact.validTo) == (wording, True, None)


def test_deleting_a_fact_removes_it_and_its_earlier_wordings_from_page_and_storage(
    page: Page, fresh_dashboard: Any
) -> None:
    old, new = fresh_dashboard.seeded.bob_fact, "Runs a half marathon in May"
    page.goto(fresh_dashboard.url("/users/bob"))
    row = fact_row(page, old)
    open_edit(row)
    row.get_by_label("Fact", exact=True).fill(new)
    row.get_by_role("button", name="Save").click()
    expect(no_longer_holds(page)).to_contain_text(old)
    assert stored_wordings(fresh_dashboard.data_dir, "bob") == {old, new}

    row = fact_row(page, new)
    open_edit(row)
    delete = row.get_by_role("button", name=f"Delete the fact: {new}")
    expect(delete).to_be_hidden()  # asked for a second time first
    row.get_by_text("Delete…", exact=True).click()
    delete.click()

    expect(page.get_by_role("region", name="Facts")).to_contain_text("No facts yet.")
    expect(facts_table(page)).to_have_count(0)
    expect(page.get_by_text(new)).to_have_count(0)
    expect(no_longer_holds(page)).to_have_count(0)  # the versions it replaced go with it
    assert stored_wordings(fresh_dashboard.data_dir, "bob") == set()


def test_a_confidence_out_of_range_is_refused_and_stores_nothing(
    page: Page, fresh_dashboard: Any, refused: Refused
) -> None:
    page.goto(fresh_dashboard.url("/users/alice"))
    before = stored_facts(fresh_dashboard.data_dir, "alice")
    add_a_fact(page, "Speaks Portuguese at home", "knowledge", confidence="2")

    # The browser's own check stops the form: the field is flagged, the page stays as it was.
    confidence = page.locator("#new-confidence")
    assert confidence.evaluate("field => field.validity.rangeOverflow")
    expect(confidence).to_have_value("2")
    expect(page).to_have_url(fresh_dashboard.url("/users/alice"))

    # Past the browser's check (its limits removed, as an older browser or a hand-made form would
    # send it), the dashboard refuses it itself.
    confidence.evaluate("field => { field.removeAttribute('min'); field.removeAttribute('max'); }")
    with refused(400, fresh_dashboard.url("/users/alice/facts")):
        page.get_by_role("button", name="Add", exact=True).click()
    alert = page.get_by_role("region", name="Facts").get_by_role("alert")
    expect(alert).to_contain_text("Nothing was changed")
    expect(alert).to_contain_text("confidence")
    # The form is still open, beside its reason, with what was typed; the address is the page's.
    form = page.locator("form").filter(has=page.get_by_role("button", name="Add", exact=True))
    expect(form.get_by_label("Fact", exact=True)).to_have_value("Speaks Portuguese at home")
    expect(form.get_by_label("Category", exact=True)).to_have_value("knowledge")
    expect(form.get_by_label("Confidence", exact=True)).to_have_value("2")
    expect(page).to_have_url(fresh_dashboard.url("/users/alice"))
    expect(fact_row(page, "Speaks Portuguese at home")).to_have_count(0)
    expect(fact_row(page, fresh_dashboard.seeded.alice_fact)).to_have_count(1)  # the page still lists hers
    assert stored_facts(fresh_dashboard.data_dir, "alice") == before


# --- import and forget -----------------------------------------------------------------------


def test_an_import_is_previewed_first_and_written_only_when_confirmed(
    page: Page, fresh_dashboard: Any, screenshot: Screenshot, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    seeded = fresh_dashboard.seeded
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(fresh_dashboard.url("/users/alice"))
    with page.expect_download() as downloading:
        page.get_by_role("link", name="Download everything as JSON").click()
    download = downloading.value
    assert download.suggested_filename == "memory-alice.json"
    exported = tmp_path / download.suggested_filename
    download.save_as(exported)

    page.goto(fresh_dashboard.url("/users/bob"))
    expect(fact_row(page, seeded.alice_fact)).to_have_count(0)
    page.get_by_label("Import an export or a DeerFlow memory.json").set_input_files(exported)
    page.get_by_label("Mode", exact=True).select_option(label="merge: add what is new")
    page.get_by_role("button", name="Preview").click()

    expect(page.get_by_role("heading", level=1)).to_have_text("bob: import")
    preview = page.locator("#preview")
    expect(preview).to_contain_text("Would import 2 exchanges and 2 facts (merge)")
    expect(page.get_by_text("Replace erases")).to_have_count(0)  # merge erases nothing
    screenshot(page, "import-preview-1400")
    assert seeded.alice_fact not in stored_wordings(fresh_dashboard.data_dir, "bob")
    with another_tab(page, request) as tab:  # bob's page, in another tab while the preview is open
        tab.goto(fresh_dashboard.url("/users/bob"))
        expect(fact_row(tab, seeded.bob_fact)).to_have_count(1)
        expect(fact_row(tab, seeded.alice_fact)).to_have_count(0)

    page.get_by_role("button", name="Import", exact=True).click()
    expect(page).to_have_url(fresh_dashboard.url("/users/bob"))
    expect(fact_row(page, seeded.alice_fact)).to_have_count(1)
    expect(fact_row(page, seeded.bob_fact)).to_have_count(1)  # merged, not replaced
    recent = page.get_by_role("region", name="Latest exchanges")
    expect(recent).to_contain_text(seeded.alice_exchange[0])
    expect(recent).to_contain_text(seeded.bob_exchange[0])
    assert {seeded.alice_fact, seeded.alice_long_fact, seeded.bob_fact} <= stored_wordings(
        fresh_dashboard.data_dir, "bob"
    )


def test_forgetting_a_user_needs_their_id_typed_and_then_erases_them(
    page: Page, fresh_dashboard: Any, refused: Refused
) -> None:
    bob_dir = fresh_dashboard.data_dir / "users" / "bob"
    assert bob_dir.is_dir()
    page.goto(fresh_dashboard.url("/users/bob"))
    confirm = page.get_by_label("To erase all of bob's memory for good, type bob")
    confirm.fill("bo")
    with refused(400, fresh_dashboard.url("/users/bob/forget")):
        page.get_by_role("button", name="Forget bob").click()

    expect(page.locator("form.forget").get_by_role("alert")).to_contain_text("confirm must equal the user_id ('bob')")
    expect(page.get_by_role("heading", level=1)).to_have_text("bob")
    expect(page).to_have_url(fresh_dashboard.url("/users/bob"))
    expect(fact_row(page, fresh_dashboard.seeded.bob_fact)).to_have_count(1)
    assert bob_dir.is_dir(), "nothing erased"
    page.get_by_role("link", name="memory-mcp").click()
    users = page.get_by_role("table", name="Users with stored memory")
    expect(users.get_by_role("link", name="bob", exact=True)).to_be_visible()

    users.get_by_role("link", name="bob", exact=True).click()
    page.get_by_label("To erase all of bob's memory for good, type bob").fill("bob")
    page.get_by_role("button", name="Forget bob").click()

    expect(page).to_have_url(fresh_dashboard.url("/users"))
    users = page.get_by_role("table", name="Users with stored memory")
    expect(users.get_by_role("link", name="alice", exact=True)).to_be_visible()
    expect(users.get_by_role("link", name="bob", exact=True)).to_have_count(0)
    assert not bob_dir.exists()
    assert [entry.name for entry in bob_dir.parent.iterdir() if "bob" in entry.name] == [], "no tombstone left"
    with service_over(fresh_dashboard.data_dir) as service:
        assert not service.is_stored("bob")
        assert service.is_stored("alice")
