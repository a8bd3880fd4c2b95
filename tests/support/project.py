"""Where the project is, for tests that read its files or start its server as a host would."""

from __future__ import annotations

import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = PROJECT_ROOT / "memory_mcp"
SERVER_SCRIPT = PROJECT_ROOT / "server.py"
PYTHON = sys.executable
