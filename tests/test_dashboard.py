"""The dashboard over HTTP, as `memory-mcp dashboard` serves it: pages list, show and search what
the service holds, print remembered text as text, answer only to loopback names, only to the account
that started it (the key it printed), and never inside another page's frame.

Flows in a real browser are in tests/browser/."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from email.message import Message
from pathlib import Path

import pytest
from http_helpers import free_port
from project import PROJECT_ROOT, PYTHON
from stdio_helpers import server_env

from memory_mcp.base.clock import utc_now
from memory_mcp.base.settings import Settings
from memory_mcp.dashboard.charts import weekly
from memory_mcp.models import (
    AddFactRequest,
    AddMemoryRequest,
    ExportRequest,
    MemoryDocument,
    SearchFactsRequest,
    SessionState,
)
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

pytestmark = pytest.mark.integration

PRINTED = re.compile(r"memory-mcp dashboard on (http://127\.0\.0\.1:\d+/\?key=([\w-]+)) ")


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Message
    body: str

    @property
    def location(self) -> str:
        return self.headers.get("Location", "")


def send(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> Answer:
    """One request, redirects not followed."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=10) as response:
            return Answer(response.status, response.headers, response.read().decode())
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.headers, error.read().decode())


def form(fields: dict[str, str]) -> bytes:
    return urllib.parse.urlencode(fields).encode()


@dataclass(frozen=True)
class Dashboard:
    """A running `memory-mcp dashboard`, and its owner's browser: the cookie that opening the
    printed address set."""

    base: str  # http://127.0.0.1:PORT
    address: str  # the address it printed, with its key
    key: str
    cookie: str  # name=value
    log: Path

    def ask(self, path: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> Answer:
        return send(self.base + path, data, {"Cookie": self.cookie, **(headers or {})})

    def fetch(self, path: str, host: str | None = None) -> tuple[int, str]:
        answer = self.ask(path, headers={"Host": host} if host else None)
        return answer.status, answer.body

    def post(self, path: str, fields: dict[str, str], origin: str | None) -> tuple[int, str, str]:
        """A form sent as the owner's browser sends it (from `origin`)."""
        answer = self.ask(path, form(fields), {"Origin": origin} if origin else None)
        return answer.status, answer.location, answer.body

    def upload(self, path: str, document: bytes, mode: str, origin: str) -> tuple[int, str]:
        """The import form as a browser sends it: multipart, with the file and the mode."""
        boundary = "memory-mcp-test-boundary"
        body = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="mode"\r\n\r\n{mode}\r\n'
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="export.json"\r\n'
                "Content-Type: application/json\r\n\r\n"
            ).encode()
            + document
            + f"\r\n--{boundary}--\r\n".encode()
        )
        answer = self.ask(path, body, {"Content-Type": f"multipart/form-data; boundary={boundary}", "Origin": origin})
        return answer.status, answer.body


@contextmanager
def serving(
    home: Path, log_path: Path, *options: str, env: dict[str, str] | None = None, stop: int = signal.SIGTERM
) -> Iterator[Dashboard]:
    """`memory-mcp dashboard` over `home`, entered as its owner does: the address it printed opened
    once; stopped with signal `stop` when the block ends."""
    port = free_port()
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [PYTHON, "-m", "memory_mcp", "dashboard", "--port", str(port), *options],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=PROJECT_ROOT,
            env=server_env(home, env),
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                printed = PRINTED.search(log_path.read_text())
                try:
                    if printed is not None and (entered := send(printed[1])).status == 200:
                        break
                except (urllib.error.URLError, ConnectionError):
                    pass  # not listening yet
                assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.1)
            cookie = entered.headers["Set-Cookie"].split(";")[0]
            yield Dashboard(f"http://127.0.0.1:{port}", printed[1], printed[2], cookie, log_path)
        finally:
            process.send_signal(stop)
            process.wait(timeout=10)


@pytest.fixture
def dashboard(home: Path, tmp_path: Path) -> Iterator[Dashboard]:
    """`memory-mcp dashboard` over a memory with two users, its owner's cookie in hand."""
    service = MemoryService(Settings(data_storage_path=home))
    service.add_memory(
        AddMemoryRequest.build(
            user_id="alice",
            user_input="We had ice cream <script>alert(1)</script> by the sea",
            agent_response="Lovely!",
        )
    )
    service.add_fact(AddFactRequest.build(user_id="alice", content="Likes pistachio ice cream", pinned=True))
    service.add_memory(
        AddMemoryRequest.build(user_id="bob", user_input="My marathon is in May", agent_response="Good luck")
    )
    service.close()
    with serving(home, tmp_path / "dashboard.log") as served:
        yield served


def test_the_users_page_lists_every_user_with_a_link_to_their_memory(dashboard: Dashboard) -> None:
    assert dashboard.ask("/").location == "/users"
    status, html = dashboard.fetch("/users")
    assert status == 200
    assert '<a href="/users/alice">alice</a>' in html, "addresses are root-relative: never from the Host header"
    assert '<a href="/users/bob">bob</a>' in html
    assert html.count(f'<td><time datetime="{utc_now()[:11]}') == 2, "each user's last exchange, just now"


def test_a_user_page_shows_profile_facts_and_exchanges_with_remembered_text_as_text(dashboard: Dashboard) -> None:
    status, html = dashboard.fetch("/users/alice")
    assert status == 200
    assert "Likes pistachio ice cream" in html and "pinned" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html
    assert "marathon" not in html, "another user's memory is not on this page"
    assert "<dt>Work context</dt>" in html, "sections by name, as words"
    assert "No LLM endpoint is configured" in html and "Run now" not in html, "extraction is off here"


def test_search_ranks_and_marks_the_words_found(dashboard: Dashboard) -> None:
    status, html = dashboard.fetch("/users/alice/search?q=ice+cream")
    assert status == 200
    assert "<mark>ice</mark> <mark>cream</mark> &lt;script&gt;" in html
    assert "Likes pistachio <mark>ice</mark> <mark>cream</mark>" in html


def test_unknown_users_and_bad_ids_are_a_page_that_says_so(dashboard: Dashboard) -> None:
    assert dashboard.fetch("/users/nobody")[0] == 404
    status, html = dashboard.fetch("/users/..%2Fbob")
    assert status == 404 and "marathon" not in html


def test_a_request_naming_another_host_is_refused(dashboard: Dashboard) -> None:
    """A web page elsewhere that renames itself to 127.0.0.1 (DNS rebinding) still sends its own name."""
    assert dashboard.fetch("/users", host="attacker.example")[0] == 400
    assert dashboard.fetch("/users", host="localhost")[0] == 200


def fact_ids(service: MemoryService, include_superseded: bool = False) -> dict[str, str]:
    request = SearchFactsRequest.build(user_id="alice", include_superseded=include_superseded, limit=50)
    return {fact.content: fact.id for fact in service.search_facts(request).facts}


def stored(home: Path) -> str:
    """Everything stored for alice and bob, as one comparable text."""
    service = MemoryService(Settings(data_storage_path=home), short_lived=True)
    try:
        exports = [service.export_memory(ExportRequest.build(user_id=user)) for user in ("alice", "bob")]
        return "\n".join(exported.model_dump_json(exclude={"exported_at"}) for exported in exports)
    finally:
        service.close()


def test_the_printed_address_lets_its_owner_in_with_a_strict_cookie_and_leads_on_without_the_key(
    dashboard: Dashboard,
) -> None:
    entered = send(dashboard.address)
    assert entered.status == 200
    cookie = entered.headers["Set-Cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
    assert '<meta http-equiv="refresh" content="0; url=/">' in entered.body, "on to the same address, keyless"
    assert dashboard.key not in entered.body and entered.headers["Referrer-Policy"] == "no-referrer"
    deeper = send(f"{dashboard.base}/users/alice/search?q=ice&key={dashboard.key}")
    assert 'content="0; url=/users/alice/search?q=ice"' in deeper.body
    assert dashboard.fetch("/users")[0] == 200
    assert dashboard.log.read_text().count(dashboard.key) == 1, "written once: the line printed for the owner"


def test_without_the_key_every_page_and_change_is_refused_even_with_a_forged_origin(
    dashboard: Dashboard, home: Path
) -> None:
    before = stored(home)
    forged = {"Origin": dashboard.base, "Sec-Fetch-Site": "same-origin"}
    port = dashboard.base.rsplit(":", 1)[1]
    strangers = [
        ({}, "/users"),
        ({}, "/users/alice"),
        ({}, "/users/alice/export"),
        ({}, "/users?key=not-the-key"),
        ({}, "/users?key="),
        ({"Cookie": f"memory-mcp-owner-{port}=not-the-key"}, "/users/alice"),
        ({"Cookie": f"memory-mcp-owner-{port}={dashboard.key}x"}, "/users/alice"),
    ]
    answers = [send(dashboard.base + path, headers={**forged, **headers}) for headers, path in strangers]
    changes = {"/users/alice/facts": {"content": "Owns a boat"}, "/users/bob/forget": {"confirm": "bob"}}
    answers += [send(dashboard.base + path, form(fields), forged) for path, fields in changes.items()]
    for answer in answers:
        assert answer.status == 403 and "open the address it printed" in answer.body.lower()
        assert "pistachio" not in answer.body and "marathon" not in answer.body
    assert stored(home) == before, "nothing changed"


def test_another_account_on_this_machine_is_refused(dashboard: Dashboard, home: Path) -> None:
    """The finding itself: `runuser -u nobody` with a forged Origin read, added and erased."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if os.geteuid() != 0 or shutil.which("runuser") is None or python is None:
        pytest.skip("acting as another account needs root, runuser and a system python3")
    script = """
import os, sys, urllib.error, urllib.request
base = sys.argv[1]
def status(path, data=None):
    headers = {"Origin": base, "Sec-Fetch-Site": "same-origin"}
    try:
        with urllib.request.urlopen(urllib.request.Request(base + path, data, headers), timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
print(os.getuid(), status("/users/alice"), status("/users/alice/facts", b"content=Sneaked+in"),
      status("/users/bob/forget", b"confirm=bob"))
"""
    before = stored(home)
    ran = subprocess.run(
        ["runuser", "-u", "nobody", "--", python, "-c", script, dashboard.base],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert ran.returncode == 0, ran.stderr
    uid, *statuses = ran.stdout.split()
    assert uid != "0" and statuses == ["403", "403", "403"]
    assert stored(home) == before


def test_no_answer_may_be_framed_and_no_page_is_cached(dashboard: Dashboard) -> None:
    answers = {
        "a page": dashboard.ask("/users/alice"),
        "a search": dashboard.ask("/users/alice/search?q=ice"),
        "the export": dashboard.ask("/users/alice/export"),
        "a page not found": dashboard.ask("/users/nobody"),
        "a change from elsewhere": dashboard.ask(
            "/users/alice/facts", form({"content": "x"}), {"Origin": "https://a.example"}
        ),
        "a stranger's request": send(f"{dashboard.base}/users/alice"),
        "another host name": dashboard.ask("/users", headers={"Host": "attacker.example"}),
        "the welcome": send(dashboard.address),
    }
    for what, answer in answers.items():
        assert answer.headers["X-Frame-Options"] == "DENY", what
        assert answer.headers["Content-Security-Policy"] == "frame-ancestors 'none'", what
        assert answer.headers["Cache-Control"] == "no-store", what
    script = send(f"{dashboard.base}/static/dashboard.js")
    assert script.status == 200 and script.headers["X-Frame-Options"] == "DENY"
    assert "Cache-Control" not in script.headers, "the package's own script may be cached"


def test_open_leads_the_browser_on_through_a_private_file_never_a_command_line(home: Path, tmp_path: Path) -> None:
    """Every account can read a process's command line (ps), so the key never is on one."""
    given = tmp_path / "the-browser-was-given.txt"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{given}"\n')
    browser.chmod(0o700)
    opening = serving(home, tmp_path / "dashboard.log", "--open", env={"BROWSER": str(browser)}, stop=signal.SIGINT)
    with opening as dashboard:
        (uri,) = given.read_text().split()
        assert uri.startswith("file://") and dashboard.key not in uri
        opener = Path(urllib.parse.unquote(urllib.parse.urlsplit(uri).path))
        assert stat.S_IMODE(opener.parent.stat().st_mode) == 0o700, "a folder only this account can read"
        assert f'content="0; url={dashboard.address}"' in html.unescape(opener.read_text())
    assert not opener.parent.exists(), "removed when the dashboard stops (Ctrl-C)"


def test_each_change_says_what_it_does_before_it_is_made(dashboard: Dashboard) -> None:
    page = dashboard.fetch("/users/alice")[1]
    assert "A new wording replaces the fact and keeps this one under “What no longer holds”" in page, "Save"
    assert "The fact and its earlier versions are erased for good." in page, "Delete"
    assert "nothing is written until you confirm it there" in page, "Preview"
    assert "To erase all of alice's memory for good" in page, "Forget alice"


def test_facts_are_added_edited_and_deleted_through_the_service(dashboard: Dashboard, home: Path) -> None:
    facts = "/users/alice/facts"
    status, location, _ = dashboard.post(
        facts, {"content": "Runs on Sundays", "category": "behavior", "confidence": "0.8"}, dashboard.base
    )
    assert (status, location) == (303, "/users/alice")
    service = MemoryService(Settings(data_storage_path=home))
    added = fact_ids(service)["Runs on Sundays"]

    edit = {"content": "Runs on Saturdays", "category": "behavior", "confidence": "0.8", "pinned": "on"}
    assert dashboard.post(f"{facts}/{added}", edit, dashboard.base)[0] == 303
    assert "Runs on Saturdays" in fact_ids(service) and "Runs on Sundays" not in fact_ids(service)
    assert "Runs on Sundays" in fact_ids(service, include_superseded=True), "the old wording is kept as history"
    page = dashboard.fetch("/users/alice")[1]
    assert "Runs on Sundays" in page.split('<h2 id="history">What no longer holds</h2>')[1]

    assert dashboard.post(f"{facts}/{fact_ids(service)['Runs on Saturdays']}/delete", {}, dashboard.base)[0] == 303
    assert "Runs on Saturdays" not in fact_ids(service, include_superseded=True)


def test_one_exchange_is_erased_from_its_page_and_only_that_one(dashboard: Dashboard, home: Path) -> None:
    service = MemoryService(Settings(data_storage_path=home))
    (sea,) = service.store.read_pages(Scope("alice")).pages.ids
    page = dashboard.fetch(f"/users/alice/exchanges/{sea}")[1]
    erase = f"/users/alice/exchanges/{sea}/forget"
    assert f'{erase}"' in page and "Erase this exchange" in page and "Erase for good" in page

    assert dashboard.post(erase, {}, "https://attacker.example")[0] == 403
    assert dashboard.post(erase, {}, dashboard.base)[:2] == (303, "/users/alice")
    assert list(service.store.read_pages(Scope("alice")).pages.ids) == []
    assert dashboard.fetch(f"/users/alice/exchanges/{sea}")[0] == 404
    assert "Likes pistachio ice cream" in fact_ids(service), "what was learned stays"
    assert len(service.store.read_pages(Scope("bob")).pages) == 1
    status, _, again = dashboard.post(erase, {}, dashboard.base)
    assert status == 400 and sea in again


def test_a_bad_fact_changes_nothing_and_says_why(dashboard: Dashboard, home: Path) -> None:
    status, _, page = dashboard.post("/users/alice/facts", {"content": "Likes tea", "category": "mood"}, dashboard.base)
    assert status == 400 and "Nothing was changed: category" in page
    assert "Likes tea" not in fact_ids(MemoryService(Settings(data_storage_path=home)))


def test_a_change_sent_from_another_site_is_refused(dashboard: Dashboard, home: Path) -> None:
    fields = {"content": "Owns a boat", "category": "context"}
    assert dashboard.post("/users/alice/facts", fields, "https://attacker.example")[0] == 403
    assert dashboard.post("/users/alice/facts", fields, None)[0] == 403
    assert "Owns a boat" not in fact_ids(MemoryService(Settings(data_storage_path=home)))


def test_export_downloads_the_users_memory_as_the_export_document(dashboard: Dashboard) -> None:
    answer = dashboard.ask("/users/alice/export")
    assert answer.headers["Content-Disposition"] == 'attachment; filename="memory-alice.json"'
    exported = json.loads(answer.body)
    assert exported["format"] == "memory-mcp/export" and exported["user_id"] == "alice"
    assert [page["agent_response"] for page in exported["pages"]] == ["Lovely!"]


def test_forget_needs_the_user_id_typed_and_then_erases_it_from_the_list_and_the_disk(
    dashboard: Dashboard, home: Path
) -> None:
    forget = "/users/bob/forget"
    status, _, page = dashboard.post(forget, {"confirm": "bo"}, dashboard.base)
    assert status == 400 and "confirm must equal the user_id" in page
    assert (home / "users" / "bob").is_dir(), "nothing erased"

    assert dashboard.post(forget, {"confirm": "bob"}, dashboard.base)[:2] == (303, "/users")
    assert not (home / "users" / "bob").exists()
    users_page = dashboard.fetch("/users")[1]
    assert ">bob</a>" not in users_page and ">alice</a>" in users_page


def test_weeks_count_what_falls_in_them_and_leave_out_what_is_no_time() -> None:
    stamps = ["2026-11-23T10:00:00Z", "2026-11-29T23:59:59Z", "2026-11-16T00:00:00Z", "2026-06-01T00:00:00Z", "never"]
    chart = weekly({"exchanges": stamps}, until=date(2026, 11, 25), weeks=3)
    assert chart.weeks == [date(2026, 11, 9), date(2026, 11, 16), date(2026, 11, 23)]
    assert chart.series["exchanges"] == [0, 1, 2], "Monday to Sunday; older weeks and non-times left out"
    assert chart.peak == 2


def test_a_user_page_draws_exchanges_and_facts_per_week(dashboard: Dashboard) -> None:
    html = dashboard.fetch("/users/alice")[1]
    assert 'aria-label="exchanges per week' in html and "1 in all" in html
    assert 'aria-label="facts added per week' in html


def test_exchanges_are_browsed_by_day_and_thread_and_opened_with_their_metadata(
    dashboard: Dashboard, home: Path
) -> None:
    service = MemoryService(Settings(data_storage_path=home))
    added = service.add_memory(
        AddMemoryRequest.build(
            user_id="alice",
            user_input="Booked the train to Porto",
            agent_response="Noted",
            thread_id="trip",
            timestamp="2025-03-02T09:00:00Z",
            meta_data={"source": "chat <b>"},
        )
    )
    service.close()

    by_thread = dashboard.fetch("/users/alice/exchanges?thread=trip")[1]
    assert "Booked the train to Porto" in by_thread and "ice cream" not in by_thread
    by_day = dashboard.fetch("/users/alice/exchanges?day=2025-03-02")[1]
    assert "Booked the train to Porto" in by_day and "1 exchange, newest first" in by_day
    status, detail = dashboard.fetch(f"/users/alice/exchanges/{added.page_id}")
    assert status == 200 and added.page_id in detail and "chat \\u003cb\\u003e" in detail
    assert dashboard.fetch(f"/users/bob/exchanges/{added.page_id}")[0] == 404, "only within its own user"


def test_exchanges_say_their_project_and_are_browsed_by_project(dashboard: Dashboard, home: Path) -> None:
    service = MemoryService(Settings(data_storage_path=home))
    for said, project in (("Shop uses pnpm", "/home/alice/code/webshop"), ("API rounds half-even", "/srv/python-api")):
        service.add_memory(
            AddMemoryRequest.build(user_id="alice", user_input=said, agent_response="ok", project=project)
        )
    service.close()

    everything = dashboard.fetch("/users/alice/exchanges")[1]
    assert "project <a" in everything and ">webshop</a>" in everything and "(no project)" in everything
    query = urllib.parse.urlencode({"project": "/home/alice/code/webshop"})
    shop = dashboard.fetch(f"/users/alice/exchanges?{query}")[1]
    assert "Shop uses pnpm" in shop and "half-even" not in shop and "in project webshop" in shop
    none = dashboard.fetch("/users/alice/exchanges?project=")[1]
    assert "ice cream" in none and "pnpm" not in none and "without a project" in none


def test_an_import_is_previewed_with_what_it_would_change_and_written_only_when_confirmed(
    dashboard: Dashboard, home: Path
) -> None:
    exported = dashboard.ask("/users/alice/export").body.encode()
    status, preview = dashboard.upload("/users/bob/import", exported, "merge", dashboard.base)
    assert status == 200
    assert "Would import 1 exchange and 1 fact (merge)" in preview
    assert "pistachio" not in dashboard.fetch("/users/bob")[1], "a preview writes nothing"

    document = preview.split('name="document" hidden aria-hidden="true">')[1].split("</textarea>")[0]
    applied = dashboard.post(
        "/users/bob/import/apply", {"mode": "merge", "document": html.unescape(document)}, dashboard.base
    )
    assert applied[:2] == (303, "/users/bob")
    bob = dashboard.fetch("/users/bob")[1]
    assert "Likes pistachio ice cream" in bob and "marathon" in bob


def test_a_bad_import_shows_its_errors_and_writes_nothing(dashboard: Dashboard) -> None:
    status, page = dashboard.upload(
        "/users/bob/import", b'{"format": "memory-mcp/export", "pages": [{}]}', "merge", dashboard.base
    )
    assert status == 400 and "Nothing was imported" in page
    status, page = dashboard.upload("/users/bob/import", b"not json", "merge", dashboard.base)
    assert status == 400 and "the file is not JSON" in page
    assert "marathon" in dashboard.fetch("/users/bob")[1]


def test_sessions_show_their_heat_and_archived_ones_are_marked_wherever_their_exchanges_are(
    dashboard: Dashboard, home: Path
) -> None:
    service = MemoryService(Settings(data_storage_path=home))
    session = f"day:{utc_now()[:10]}"  # alice's exchange has no thread: its session is its day

    def archive(document: MemoryDocument) -> MemoryDocument:
        document.sessions[session] = SessionState(visits=3, archived=True)
        return document

    assert 'class="tag">archived' not in dashboard.fetch("/users/alice")[1]
    service.store.update_document(Scope("alice"), archive)
    service.close()

    page = dashboard.fetch("/users/alice")[1]
    sessions = page.split('id="sessions"')[1].split("</section>")[0]
    assert f"{utc_now()[:10]} (no thread)" in sessions and '<span class="tag">archived</span>' in sessions
    assert '<td class="wide-only">3</td>' in sessions, "its visits"
    latest = page.split('id="recent"')[1]
    assert '<span class="tag">archived session</span>' in latest
    found = dashboard.fetch("/users/alice/search?q=ice+cream")[1]
    assert '<span class="tag">archived session</span>' in found, "searched here all the same, and marked"
    assert 'class="tag">archived' not in dashboard.fetch("/users/bob")[1], "bob's session is his own"
