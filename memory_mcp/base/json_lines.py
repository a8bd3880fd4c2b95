"""Hosts' session logs, read forgivingly: each is JSON lines in the host's internal format, which
changes between versions, so a line that cannot be read is skipped, never fatal."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def json_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The file's lines that are JSON objects, in order (OSError when the file cannot be opened)."""
    with path.open(encoding="utf-8", errors="replace") as log:
        for text in log:
            try:
                line = json.loads(text)
            except ValueError:
                continue
            if isinstance(line, dict):
                yield line
