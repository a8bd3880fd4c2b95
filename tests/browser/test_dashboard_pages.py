"""The dashboard as a person uses it, in a real Chromium: open a user from the list, read their
facts and exchanges, search through the form, see remembered markup as text, use it on a 400 px
phone and a wide screen, and reach every control by its label.

Every test fails too if its page logged a console error, threw, or opened a dialog (conftest.py).
Screenshots of each page at both widths go to artifacts/screenshots/.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

try:
    from playwright.sync_api import Page, expect
except ImportError:  # the `browser` fixture skips, or fails with the reason when browsers are required
    Page = Any  # type: ignore[misc,assignment]
    expect = None  # type: ignore[assignment]

pytestmark = pytest.mark.integration


def exchanges_in(page: Page, heading: str) -> Any:
    """The exchanges listed in the section titled `heading`."""
    return page.get_by_role("region", name=heading).locator("article.exchange")


def test_the_users_list_shows_both_users_and_opens_one_by_its_link(page: Page, dashboard: Any) -> None:
    page.goto(dashboard.url("/"))
    expect(page).to_have_url(dashboard.url("/users"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Users")
    table = page.get_by_role("table", name="Users with stored memory")
    for user in ("alice", "bob"):
        expect(table.get_by_role("link", name=user, exact=True)).to_be_visible()

    table.get_by_role("link", name="bob", exact=True).click()
    expect(page).to_have_url(dashboard.url("/users/bob"))
    expect(page.get_by_role("heading", level=1)).to_have_text("bob")
    expect(page.get_by_role("cell", name=dashboard.seeded.bob_fact)).to_be_visible()

    page.go_back()
    page.get_by_role("link", name="alice", exact=True).click()
    expect(page).to_have_url(dashboard.url("/users/alice"))
    expect(page.get_by_role("heading", level=1)).to_have_text("alice")


def test_a_user_page_shows_their_facts_and_latest_exchanges_and_no_one_elses(page: Page, dashboard: Any) -> None:
    seeded = dashboard.seeded
    page.goto(dashboard.url("/users/alice"))
    facts = page.get_by_role("region", name="Facts")
    pistachio = facts.get_by_role("row").filter(has_text=seeded.alice_fact)
    expect(pistachio).to_have_count(1)
    expect(pistachio.get_by_text("pinned", exact=True)).to_be_visible()
    expect(facts.get_by_role("cell", name=seeded.alice_long_fact)).to_be_visible()

    recent = exchanges_in(page, "Latest exchanges")
    expect(recent).to_have_count(2)
    kitten = recent.filter(has_text=seeded.alice_exchange[0])
    expect(kitten).to_contain_text(seeded.alice_exchange[1])
    expect(kitten).to_be_visible()

    expect(page.get_by_text(seeded.bob_fact)).to_have_count(0)
    expect(page.get_by_text(seeded.bob_exchange[0])).to_have_count(0)


def test_searching_through_the_form_lists_the_exchange_with_the_word_marked(page: Page, dashboard: Any) -> None:
    seeded = dashboard.seeded
    page.goto(dashboard.url("/users/alice"))
    search = page.get_by_label("Search this memory")
    search.fill("tabby")
    search.press("Enter")

    expect(page).to_have_url(dashboard.url("/users/alice/search?q=tabby"))
    expect(page.get_by_label("Search this memory")).to_have_value("tabby")  # the query stays, to refine
    found = exchanges_in(page, "Exchanges, best first")
    expect(found).to_have_count(1)  # alice's kitten; bob's tabby is not hers to see
    expect(found).to_contain_text(seeded.alice_exchange[0])
    marks = found.locator("mark")
    expect(marks.first).to_be_visible()
    assert {text.lower() for text in marks.all_inner_texts()} == {"tabby"}
    expect(page.get_by_text(seeded.bob_exchange[0])).to_have_count(0)

    # A word found nowhere says so instead of showing an empty page.
    page.get_by_label("Search this memory").fill("xylophone")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_text("No exchange matches.")).to_be_visible()
    expect(page.get_by_text("No fact matches.")).to_be_visible()


@pytest.mark.parametrize("path", ["/users/alice", "/users/alice/search?q=script+notes"])
def test_markup_in_remembered_text_is_shown_as_text(page: Page, dashboard: Any, path: str) -> None:
    user_input, agent_response = dashboard.seeded.alice_markup_exchange
    page.goto(dashboard.url(path))
    exchange = page.locator("article.exchange").filter(has_text="show up in my notes")
    expect(exchange).to_have_count(1)
    expect(exchange.locator("p").nth(1)).to_have_text(f"User: {user_input}")
    expect(exchange.locator("p").nth(2)).to_have_text(f"Assistant: {agent_response}")
    # Nothing became an element: no script, image or bold text, and no dialog (conftest fails on one).
    assert exchange.locator("script, img, b").count() == 0
    assert page.locator("main script, main img").count() == 0
    scripts = page.evaluate("[...document.scripts].map(script => script.src)")
    assert scripts == [dashboard.url("/static/dashboard.js")], "the package's own script alone"


PAGES = {
    "users": "/users",
    "user": "/users/alice",
    "search": "/users/alice/search?q=tabby+ice+cream",
}


@pytest.mark.parametrize("width", [400, 1400])
def test_every_page_fits_the_window_at_400_and_1400_px(
    page: Page, dashboard: Any, screenshot: Callable[[Any, str], Path], width: int
) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    for name, path in PAGES.items():
        page.goto(dashboard.url(path))
        assert_fits(page, width, name)
        screenshot(page, f"{name}-{width}")
        if name != "users":
            box = page.get_by_label("Search this memory").bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, (name, box)
        if name == "user":
            # Open every fold (each fact's edit form, the form to add one): still no sideways scrolling.
            summaries = page.locator("summary")
            for index in range(summaries.count()):
                summaries.nth(index).click()
            expect(page.get_by_role("button", name="Add", exact=True)).to_be_visible()
            assert_fits(page, width, "user, every fold open")


def assert_fits(page: Page, width: int, name: str) -> None:
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= width, f"the {name} page is {scroll_width} px wide in a {width} px window"


@pytest.mark.parametrize("path", list(PAGES.values()))
def test_every_form_control_has_a_label(page: Page, dashboard: Any, path: str) -> None:
    page.goto(dashboard.url(path))
    controls = page.locator("input:not([type=hidden]), select, textarea")
    for index in range(controls.count()):
        control = controls.nth(index)
        label = control.evaluate(
            """element => ([...element.labels].map(label => label.textContent).join(' ')
                          || element.getAttribute('aria-label') || '').replace(/\\s+/g, ' ').trim()"""
        )
        described = control.evaluate("element => element.outerHTML")
        assert label, f"no label for {described}"
        expect(page.get_by_label(label, exact=True).and_(control), f"{described} by {label!r}").to_have_count(1)
    buttons = page.get_by_role("button")
    for index in range(buttons.count()):
        expect(buttons.nth(index)).to_have_accessible_name(re.compile(r"\w"))

    if path == "/users/alice":
        # One set of fields per fact (two) and one to add a fact, each reached by its label.
        for label in ("Fact", "Category", "Confidence", "Holds until", "Pinned"):
            expect(page.get_by_label(label, exact=True)).to_have_count(3)
        expect(page.get_by_label("Search this memory")).to_have_count(1)
        expect(page.get_by_label("To erase all of alice's memory for good, type alice")).to_have_count(1)
