"""The dashboard behind the HTTP server's bearer tokens, in a real Chromium: the page asks for the
token once, keeps it in the tab (never in an address or a cookie), sends it with every page and
form, and a token for alice can neither see nor change bob's memory, whatever the page is made to send.

Screenshot: artifacts/screenshots/token-ask-1400.png (the page that asks for the token).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from memory_mcp.base.settings import Settings
from memory_mcp.models import SearchFactsRequest
from memory_mcp.service.memory_service import MemoryService

try:
    from playwright.sync_api import Page, expect
except ImportError:  # the `browser` fixture skips, or fails with the reason when browsers are required
    Page = Any  # type: ignore[misc,assignment]
    expect = None  # type: ignore[assignment]

pytestmark = pytest.mark.integration

Refused = Callable[[int, str], AbstractContextManager[None]]
TOKEN_KEY = "memory-mcp-token"


def stored_facts(data_dir: Path, user_id: str, include_superseded: bool = False) -> set[str]:
    service = MemoryService(Settings(data_storage_path=data_dir), short_lived=True)
    try:
        request = SearchFactsRequest.build(user_id=user_id, include_superseded=include_superseded, limit=100)
        return {fact.content for fact in service.search_facts(request).facts}
    finally:
        service.close()


def sign_in(page: Page, dashboard: Any, user: str, path: str = "/") -> None:
    page.goto(dashboard.url(path))
    page.get_by_label("Token", exact=True).fill(dashboard.tokens[user])
    page.get_by_role("button", name="Open").click()


def test_the_token_is_asked_for_once_and_kept_in_the_tab_only(
    page: Page, token_dashboard: Any, refused: Refused, screenshot: Callable[[Any, str], Path]
) -> None:
    seeded = token_dashboard.seeded
    page.goto(token_dashboard.url("/"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Open your memory")
    expect(page.get_by_label("Token", exact=True)).to_be_focused()
    expect(page.get_by_role("button", name="Sign out")).to_have_count(0)  # nothing to sign out of yet
    screenshot(page, "token-ask-1400")

    page.get_by_label("Token", exact=True).fill("mm_not-a-token")
    with refused(401, token_dashboard.url("/")):
        page.get_by_role("button", name="Open").click()
    expect(page.get_by_role("alert")).to_contain_text("That token is not accepted")
    assert page.evaluate(f"sessionStorage.getItem('{TOKEN_KEY}')") is None, "a refused token is not kept"

    page.get_by_label("Token", exact=True).fill(token_dashboard.tokens["alice"])
    page.get_by_role("button", name="Open").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Your memory")
    expect(page).to_have_url(token_dashboard.url("/users"))
    users = page.get_by_role("table", name="Users with stored memory")
    expect(users.get_by_role("link", name="alice", exact=True)).to_be_visible()
    expect(users).not_to_contain_text("bob")

    users.get_by_role("link", name="alice", exact=True).click()
    expect(page).to_have_url(token_dashboard.url("/users/alice"))
    expect(page.get_by_role("region", name="Facts")).to_contain_text(seeded.alice_fact)
    page.get_by_label("Search this memory").fill("tabby")
    page.get_by_role("button", name="Search").click()
    expect(page).to_have_url(token_dashboard.url("/users/alice/search?q=tabby"))
    found = page.get_by_role("region", name="Exchanges, best first")
    expect(found.locator("mark").first).to_have_text("tabby")
    expect(found).not_to_contain_text(seeded.bob_exchange[0])

    page.reload()  # the tab still has the token: the page comes back without asking
    expect(page.get_by_role("heading", level=1)).to_contain_text("search")
    page.go_back()
    expect(page).to_have_url(token_dashboard.url("/users/alice"))
    expect(page.get_by_role("region", name="Facts")).to_contain_text(seeded.alice_fact)

    assert page.context.cookies() == [], "no cookie carries it"
    assert token_dashboard.tokens["alice"] not in page.url
    assert page.evaluate(f"sessionStorage.getItem('{TOKEN_KEY}')") == token_dashboard.tokens["alice"]
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("Token", exact=True)).to_be_visible()
    assert page.evaluate(f"sessionStorage.getItem('{TOKEN_KEY}')") is None


def test_facts_are_changed_and_memory_downloaded_through_the_token(page: Page, token_dashboard: Any) -> None:
    sign_in(page, token_dashboard, "alice", "/users/alice")
    facts = page.get_by_role("region", name="Facts")
    expect(facts).to_contain_text(token_dashboard.seeded.alice_fact)

    page.get_by_text("Add a fact", exact=True).click()
    page.locator("#new-content").fill("Swims on Fridays")
    page.get_by_role("button", name="Add", exact=True).click()
    row = facts.locator("tbody tr").filter(has_text="Swims on Fridays")
    expect(row).to_have_count(1)
    assert "Swims on Fridays" in stored_facts(token_dashboard.data_dir, "alice")

    row.get_by_text("Edit", exact=True).click()
    row.get_by_label("Fact", exact=True).fill("Swims on Saturdays")
    row.get_by_role("button", name="Save").click()
    expect(page.get_by_role("region", name="What no longer holds")).to_contain_text("Swims on Fridays")
    assert "Swims on Saturdays" in stored_facts(token_dashboard.data_dir, "alice")

    with page.expect_download() as download:
        page.get_by_role("link", name="Download everything as JSON").click()
    assert download.value.suggested_filename == "memory-alice.json"
    exported = json.loads(Path(download.value.path()).read_text(encoding="utf-8"))
    assert exported["user_id"] == "alice"
    assert "Swims on Saturdays" in {fact["content"] for fact in exported["memory"]["facts"]}
    assert stored_facts(token_dashboard.data_dir, "bob") == {token_dashboard.seeded.bob_fact}


def test_alices_token_can_neither_see_nor_change_bobs_memory(
    page: Page, token_dashboard: Any, refused: Refused
) -> None:
    sign_in(page, token_dashboard, "alice")
    expect(page.get_by_role("heading", level=1)).to_have_text("Your memory")
    bobs_page = token_dashboard.url("/users/bob")
    with refused(403, bobs_page):
        page.goto(bobs_page)
    expect(page.get_by_role("heading", level=1)).to_have_text("Not allowed")
    expect(page.get_by_role("main")).not_to_contain_text(token_dashboard.seeded.bob_fact)
    expect(page.get_by_role("main")).not_to_contain_text(token_dashboard.seeded.bob_exchange[0])

    # A script on the page sending a change to bob's memory with alice's token is refused too.
    bobs_facts = token_dashboard.url("/users/bob/facts")
    with refused(403, bobs_facts):
        status = page.evaluate(
            """async ([url, token]) => {
                const body = new FormData();
                body.set("content", "Planted by alice");
                const answer = await fetch(url, {method: "POST", body, headers: {Authorization: `Bearer ${token}`}});
                return answer.status;
            }""",
            [bobs_facts, token_dashboard.tokens["alice"]],
        )
    assert status == 403
    assert stored_facts(token_dashboard.data_dir, "bob", include_superseded=True) == {token_dashboard.seeded.bob_fact}
