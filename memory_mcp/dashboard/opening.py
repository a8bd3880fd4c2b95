"""`memory-mcp dashboard --open`: the browser opened at the address with the key, without the key
on any command line (every account on the machine can list those: ps, /proc/*/cmdline)."""

from __future__ import annotations

import html
import tempfile
import webbrowser
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memory_mcp.store.durable import atomic_write


@contextmanager
def opened_in_browser(address: str) -> Iterator[None]:
    """Open `address` in the default browser through a page in a folder only this account can read
    (0700), which leads on to it; the page is removed when the block ends."""
    with tempfile.TemporaryDirectory(prefix="memory-mcp-dashboard-") as folder:
        page = Path(folder) / "open.html"
        escaped = html.escape(address)
        atomic_write(  # owner-only, as every file the package writes
            page,
            (
                '<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
                f'<meta http-equiv="refresh" content="0; url={escaped}"><title>memory-mcp dashboard</title>'
                f'<p><a href="{escaped}">Open the dashboard</a></p>\n'
            ).encode(),
        )
        webbrowser.open(page.as_uri())
        yield
