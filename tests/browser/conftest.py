"""Fixtures for the dashboard in a real browser: Debian's Chromium driven by Playwright.

- `browser`: one headless Chromium for the session: Debian's /usr/bin/chromium (or MEMORY_MCP_CHROMIUM),
  never a build Playwright downloads.
  Without Playwright or Chromium the tests skip, or fail with the reason when
  MEMORY_MCP_REQUIRE_BROWSER=1 (as CI sets it).
- `dashboard`: `memory-mcp dashboard` as a subprocess on a free loopback port, over a data directory
  seeded with two users (alice and bob); yields a `Dashboard` (base URL, the address with the key it
  printed, what was seeded). One server per module, for flows that only read; `fresh_dashboard` is
  the same with its own server and data directory per test, for flows that change what is stored.
- `token_dashboard`: the same memory behind the HTTP server's bearer tokens, at /dashboard of
  `memory-mcp --transport streamable-http`, with a token for each user (`Dashboard.tokens`).
- `page`: a fresh browser context and page, which has opened the printed address first (as the
  dashboard's owner does) when the test uses `dashboard` or `fresh_dashboard`; every console error,
  uncaught page error and dialog is recorded and fails the test that caused it (one exception:
  Chromium's own /favicon.ico 404).
- `refused(status, url)` (a fixture): `with refused(400, url):` expects the block to be answered with
  that status from that address, the one console error Chromium logs for it taken off the problems.
- `screenshot(page, name)` (a fixture): a full-page PNG in artifacts/screenshots/ under the project root.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from http_helpers import HttpServer, free_port, issue_token
from project import PROJECT_ROOT, PYTHON
from stdio_helpers import server_env, write_config

from memory_mcp.base.settings import Settings
from memory_mcp.models import AddFactRequest, AddMemoryRequest
from memory_mcp.service.memory_service import MemoryService

CHROMIUM = os.environ.get("MEMORY_MCP_CHROMIUM", "/usr/bin/chromium")  # Debian's package
SCREENSHOTS = PROJECT_ROOT / "artifacts" / "screenshots"
REQUIRED = os.environ.get("MEMORY_MCP_REQUIRE_BROWSER") == "1"
INSTALL_HINT = (
    "install them with `apt-get install -y chromium` and `pip install -e '.[test]'` (`make test` does the "
    "latter; .ci/run does both); never `playwright install`"
)
PRINTED = re.compile(r"memory-mcp dashboard on (http://127\.0\.0\.1:\d+/\?key=[\w-]+) ")


def _missing() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"the Playwright package is not installed ({exc})"
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        return f"Debian's Chromium is not at {CHROMIUM} (`command -v chromium`: {shutil.which('chromium')})"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium for one module. Playwright's sync API keeps an event loop running in this thread while
    it is open: kept for the whole session, every later test that runs a loop of its own would fail."""
    reason = _missing()
    if reason is not None:
        message = f"browser tests cannot run: {reason}; {INSTALL_HINT}"
        if REQUIRED:
            pytest.fail(f"{message} (MEMORY_MCP_REQUIRE_BROWSER=1 demands them)", pytrace=False)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    # Chromium's sandbox refuses to start as root (CI and the developers' machines run as root).
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        yield browser
        browser.close()


@dataclass(frozen=True)
class Seeded:
    """What the seeded memory holds, for the tests to look for."""

    alice_fact: str = "Likes pistachio ice cream"
    alice_long_fact: str = (
        "Keeps her reading list at https://example.org/reading-lists/alice/2026/spring-and-summer-unabridged-edition"
    )
    alice_exchange: tuple[str, str] = (
        "I adopted a tabby kitten called Miso last week",
        "Miso is a lovely name for a tabby!",
    )
    # Markup in remembered text: the dashboard must print it as text.
    alice_markup_exchange: tuple[str, str] = (
        "Why does <script>alert('xss')</script> show up in my notes? Also <img src=x onerror=alert(2)>",
        "That looks like markup <b>pasted</b> from a web page.",
    )
    bob_fact: str = "Runs a marathon in May"
    bob_exchange: tuple[str, str] = ("My neighbour also has a tabby", "Tabbies are friendly cats.")


SEEDED = Seeded()


@dataclass(frozen=True)
class Dashboard:
    base: str
    data_dir: Path
    address: str = ""  # the address `memory-mcp dashboard` printed, with its key (none behind tokens)
    seeded: Seeded = SEEDED
    tokens: dict[str, str] = field(default_factory=dict)  # user -> bearer token, behind tokens

    def url(self, path: str) -> str:
        return f"{self.base}{path}"


def seed(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir))
    try:
        for user_input, agent_response in (SEEDED.alice_exchange, SEEDED.alice_markup_exchange):
            service.add_memory(
                AddMemoryRequest.build(user_id="alice", user_input=user_input, agent_response=agent_response)
            )
        service.add_fact(AddFactRequest.build(user_id="alice", content=SEEDED.alice_fact, pinned=True))
        service.add_fact(AddFactRequest.build(user_id="alice", content=SEEDED.alice_long_fact))
        bob_input, bob_response = SEEDED.bob_exchange
        service.add_memory(AddMemoryRequest.build(user_id="bob", user_input=bob_input, agent_response=bob_response))
        service.add_fact(AddFactRequest.build(user_id="bob", content=SEEDED.bob_fact))
    finally:
        service.close()


@contextmanager
def serve_dashboard(root: Path) -> Iterator[Dashboard]:
    """`memory-mcp dashboard` over a freshly seeded data directory under `root`, until the block ends."""
    data_dir = root / "data"
    seed(data_dir)
    log_path = root / "dashboard.log"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with log_path.open("w", encoding="utf-8") as log:
        process = subprocess.Popen(
            [PYTHON, "-m", "memory_mcp", "dashboard", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=PROJECT_ROOT,
            env=server_env(home=data_dir),
        )
        try:
            _wait_for(f"{base}/static/dashboard.css", process, log_path)
            printed = PRINTED.search(log_path.read_text(encoding="utf-8"))
            assert printed is not None, log_path.read_text(encoding="utf-8")
            yield Dashboard(base=base, data_dir=data_dir, address=printed[1])
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """The dashboard over the seeded memory, one server per test module (the flows only read)."""
    with serve_dashboard(tmp_path_factory.mktemp("dashboard")) as served:
        yield served


@pytest.fixture
def fresh_dashboard(tmp_path: Path) -> Iterator[Dashboard]:
    """The dashboard over its own freshly seeded memory, one server per test: for flows that change it."""
    with serve_dashboard(tmp_path) as served:
        yield served


@pytest.fixture
def token_dashboard(tmp_path: Path) -> Iterator[Dashboard]:
    """The dashboard as the HTTP server mounts it at /dashboard, behind bearer tokens for alice and
    bob, over its own freshly seeded memory (one server per test)."""
    data_dir = tmp_path / "data"
    seed(data_dir)
    config = write_config(tmp_path / "config.json", {"data_storage_path": str(data_dir)})
    tokens = {user: issue_token(config, user) for user in ("alice", "bob")}
    with HttpServer(config, tmp_path / "server.log") as server:
        yield Dashboard(base=f"{server.base}/dashboard", data_dir=data_dir, tokens=tokens)


def _wait_for(url: str, process: subprocess.Popen[bytes], log_path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise AssertionError(f"the dashboard exited with {process.returncode}:\n{log_path.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"the dashboard did not answer {url} within {timeout} s:\n{log_path.read_text()}")
        time.sleep(0.1)


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A page in its own context (1280×800 unless a test resizes it). Console errors, uncaught
    exceptions and dialogs are recorded; any of them fails the test (see pytest_runtest_call)."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    problems: list[str] = []

    def on_console(message: Any) -> None:
        if message.type == "error":
            problems.append(f"console.{message.type}: {message.text} at {message.location}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))

    def on_dialog(dialog: Any) -> None:
        problems.append(f"a {dialog.type} dialog opened: {dialog.message!r}")
        dialog.dismiss()

    page.on("dialog", on_dialog)
    request.node.browser_problems = problems
    page.set_default_timeout(10_000)
    for name in ("dashboard", "fresh_dashboard"):
        if name in request.fixturenames:
            served: Dashboard = request.getfixturevalue(name)
            page.goto(served.address)  # its cookie set, then on to the list
            page.wait_for_url(served.url("/users"))
    yield page
    context.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Fail a test, not just its teardown, when its page logged an error or opened a dialog."""
    result = yield
    problems = getattr(item, "browser_problems", None)
    if problems:
        listed = "\n  ".join(problems)
        raise AssertionError(f"the page reported {len(problems)} problem(s):\n  {listed}")
    return result


@pytest.fixture
def refused(page: Any, request: pytest.FixtureRequest) -> Callable[[int, str], AbstractContextManager[None]]:
    """`with refused(status, url):` expect the action in the block to be answered with `status` from `url`.

    Chromium logs every resource answered with an error status as a console error ("Failed to load
    resource: ... 400"), which `page` counts as a problem. The dashboard answers a refusal (a refused
    change, another user's page, an unknown token) with a page and an error status on purpose, so
    exactly that one message, waited for here, is taken off the problems; any other still fails the test.
    """

    @contextmanager
    def answered(status: int, url: str) -> Iterator[None]:
        said = f"status of {status}"

        def is_it(message: Any) -> bool:
            return message.type == "error" and said in message.text and message.location["url"] == url

        with page.expect_console_message(is_it):
            yield
        problems: list[str] = request.node.browser_problems
        expected = [problem for problem in problems if said in problem and f"'url': '{url}'" in problem]
        assert len(expected) == 1, problems
        problems.remove(expected[0])

    return answered


@pytest.fixture
def screenshot() -> Callable[[Any, str], Path]:
    """`screenshot(page, name)`: a full-page PNG saved as artifacts/screenshots/NAME.png (its path)."""

    def save(page: Any, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return save
