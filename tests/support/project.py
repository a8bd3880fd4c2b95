"""Where the project is, for tests that read its files or start its server as a host would."""

from __future__ import annotations

import os
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = PROJECT_ROOT / "memory_mcp"
SERVER_SCRIPT = PROJECT_ROOT / "server.py"
PYTHON = sys.executable

# What a host's environment carries to reach the package index (certificates, proxies, a mirror).
NETWORK_VARIABLES = ("_PROXY", "_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "UV_INDEX_URL", "UV_DEFAULT_INDEX")


def network_environment() -> dict[str, str]:
    """The machine's way out to the package index, for a process started with an environment of its own."""
    return {name: value for name, value in os.environ.items() if name.endswith(NETWORK_VARIABLES)}
