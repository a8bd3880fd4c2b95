"""The page sequence stores hand out: it reads like the list of its pages, and its slices keep
their bounds while the log grows."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_mcp.models import Page
from memory_mcp.store import Scope
from memory_mcp.store.files.backend import JsonStore
from memory_mcp.store.page_sequence import HeldPages


def make_page(n: int) -> Page:
    return Page(
        page_id=f"p{n}",
        user_input=f"u{n}",
        agent_response="a",
        timestamp=f"2024-01-{n % 28 + 1:02d}",
        thread_id="t" if n % 2 else None,
    )


PAGES = [make_page(n) for n in range(1200)]  # more than a chunk built at a time


def stored(data_dir: Path) -> list:
    JsonStore(data_dir).append_pages(Scope("alice"), PAGES)
    return [HeldPages(PAGES), JsonStore(data_dir).read_pages(Scope("alice")).pages]


def test_a_sequence_reads_as_the_list_of_its_pages(data_dir: Path) -> None:
    for pages in stored(data_dir):
        assert pages == PAGES and PAGES == pages and pages != PAGES[:-1]
        assert list(reversed(pages)) == PAGES[::-1]
        assert (pages[0], pages[-1], pages[700]) == (PAGES[0], PAGES[-1], PAGES[700])
        assert pages[10:20] == PAGES[10:20] and pages[-5:] == PAGES[-5:] and pages[30:10] == []
        assert pages[100:900][50:60] == PAGES[150:160], "a slice of a slice"
        assert list(pages[3:7].ids) == ["p3", "p4", "p5", "p6"]
        assert list(pages[3:7].threads) == ["t", "", "t", ""]
        assert list(pages[3:5].timestamps) == ["2024-01-04", "2024-01-05"]
        with pytest.raises(IndexError):
            pages[len(PAGES)]
        assert pages[::2] == PAGES[::2] and pages[900:100:-7] == PAGES[900:100:-7] and pages[5:5:3] == []


def test_a_slice_keeps_its_bounds_while_the_log_grows(data_dir: Path) -> None:
    store = JsonStore(data_dir)
    store.append_pages(Scope("alice"), PAGES[:10])
    live = store.read_pages(Scope("alice")).pages
    fixed = live[: len(live)]
    store.append_page(Scope("alice"), PAGES[10])
    assert (len(live), len(fixed), list(fixed)) == (11, 10, PAGES[:10])
