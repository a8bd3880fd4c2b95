"""Shared fixtures: every test gets its own data directory; nothing touches ~/.memory-mcp."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import pytest
from hook_helpers import see_hook_helpers_out, stop_hook_helpers
from scripted_llm import SCRIPTED_MODEL, ScriptedLLM
from update_helpers import TEST_MEMORY, ServiceFactory

from memory_mcp.base.settings import Settings
from memory_mcp.service.memory_service import MemoryService


@pytest.fixture(autouse=True, scope="session")
def no_helper_outlives_the_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The helpers the tests' hooks left, seen out at the end of the run (see see_hook_helpers_out)."""
    yield
    left = see_hook_helpers_out(tmp_path_factory.getbasetemp())
    if left:
        warnings.warn(f"processes of the tests' data homes still running: {left}", stacklevel=1)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point the default data directory at a temp dir and clear LLM settings from the environment."""
    home = tmp_path / "memory-home"
    monkeypatch.setenv("MEMORY_MCP_HOME", str(home))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("MEMORY_MCP_SHARED_PROCESS_IDLE_MINUTES", raising=False)
    yield home
    stop_hook_helpers(tmp_path)


@pytest.fixture
def home(isolated_home: Path) -> Path:
    """The data directory a server gets through MEMORY_MCP_HOME (not created in advance)."""
    return isolated_home


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    """Where a server's stderr goes, so logs neither clutter the test output nor get lost."""
    with (tmp_path / "server-stderr.log").open("w", encoding="utf-8") as stream:
        yield stream


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    """A scripted OpenAI-compatible endpoint on 127.0.0.1 with nothing queued (modules with their
    own script define their own `llm`)."""
    server = ScriptedLLM().start()
    yield server
    server.stop()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def settings(data_dir: Path) -> Settings:
    return Settings(data_storage_path=data_dir)


@pytest.fixture
def service(settings: Settings) -> Iterator[MemoryService]:
    """A service on the test's data dir, closed at the end of the test: none of its background
    work outlives the test (or writes into a data dir being deleted)."""
    service = MemoryService(settings)
    yield service
    service.close()


@pytest.fixture
def make_service(data_dir: Path, llm: ScriptedLLM) -> Iterator[ServiceFactory]:
    """Services on the test's data dir that update only when flushed, talking to the scripted LLM
    unless told otherwise; closed at the end of the test."""
    opened: list[MemoryService] = []

    def factory(base_url: str | None = "scripted", memory: dict[str, Any] | None = None, **top: Any) -> MemoryService:
        settings = Settings(
            data_storage_path=data_dir,
            openai_base_url=llm.base_url if base_url == "scripted" else base_url,
            memory={**TEST_MEMORY, **(memory or {})},
            **{"llm_model": SCRIPTED_MODEL, **top},
        )
        service = MemoryService(settings)
        opened.append(service)
        return service

    yield factory
    for service in opened:
        service.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that talks to PostgreSQL is an integration test, whichever module holds it."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "schemas" in getattr(item, "fixturenames", ()) or "postgres" in params.values():
            item.add_marker(pytest.mark.integration)
