"""Shared fixtures: every test gets its own data directory; nothing touches ~/.memory-mcp."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_mcp.config import Settings
from memory_mcp.service import MemoryService

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SERVER_SCRIPT = PROJECT_ROOT / "server.py"
PYTHON = sys.executable


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point the default data directory at a temp dir and clear LLM settings from the environment."""
    home = tmp_path / "memory-home"
    monkeypatch.setenv("MEMORY_MCP_HOME", str(home))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    yield home


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def settings(data_dir: Path) -> Settings:
    return Settings(data_storage_path=data_dir)


@pytest.fixture
def service(settings: Settings) -> MemoryService:
    return MemoryService(settings)
