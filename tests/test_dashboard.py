"""The dashboard over HTTP, as `memory-mcp dashboard` serves it: pages list, show and search what
the service holds, print remembered text as text, and answer only to loopback names.

Flows in a real browser are in tests/browser/."""

from __future__ import annotations

import html
import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest
from http_helpers import free_port
from project import PROJECT_ROOT, PYTHON
from stdio_helpers import server_env

from memory_mcp.clock import utc_now
from memory_mcp.config import Settings
from memory_mcp.dashboard.charts import weekly
from memory_mcp.models import AddFactRequest, AddMemoryRequest, MemoryDocument, SearchFactsRequest, SessionState
from memory_mcp.service import MemoryService
from memory_mcp.store import Scope

pytestmark = pytest.mark.integration


@pytest.fixture
def dashboard(home: Path, tmp_path: Path) -> Iterator[str]:
    """`memory-mcp dashboard` over a memory with two users; yields its base URL."""
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
    port = free_port()
    with (tmp_path / "dashboard.log").open("w") as log:
        process = subprocess.Popen(
            [PYTHON, "-m", "memory_mcp", "dashboard", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=PROJECT_ROOT,
            env={**server_env(), "MEMORY_MCP_HOME": str(home)},
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    urllib.request.urlopen(f"{base}/users", timeout=2).close()
                    break
                except (urllib.error.URLError, ConnectionError):
                    assert process.poll() is None and time.monotonic() < deadline, (
                        tmp_path / "dashboard.log"
                    ).read_text()
                    time.sleep(0.1)
            yield base
        finally:
            process.terminate()
            process.wait(timeout=10)


def fetch(url: str, host: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode("utf-8")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8")


def test_the_users_page_lists_every_user_with_a_link_to_their_memory(dashboard: str) -> None:
    status, html = fetch(f"{dashboard}/")  # redirected to the list
    assert status == 200
    assert f'<a href="{dashboard}/users/alice">alice</a>' in html
    assert f'<a href="{dashboard}/users/bob">bob</a>' in html
    assert html.count(f'<td><time datetime="{utc_now()[:11]}') == 2, "each user's last exchange, just now"


def test_a_user_page_shows_profile_facts_and_exchanges_with_remembered_text_as_text(dashboard: str) -> None:
    status, html = fetch(f"{dashboard}/users/alice")
    assert status == 200
    assert "Likes pistachio ice cream" in html and "pinned" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html
    assert "marathon" not in html, "another user's memory is not on this page"
    assert "<dt>Work context</dt>" in html, "sections by name, as words"
    assert "No LLM endpoint is configured" in html and "Run now" not in html, "extraction is off here"


def test_search_ranks_and_marks_the_words_found(dashboard: str) -> None:
    status, html = fetch(f"{dashboard}/users/alice/search?q=ice+cream")
    assert status == 200
    assert "<mark>ice</mark> <mark>cream</mark> &lt;script&gt;" in html
    assert "Likes pistachio <mark>ice</mark> <mark>cream</mark>" in html


def test_unknown_users_and_bad_ids_are_a_page_that_says_so(dashboard: str) -> None:
    assert fetch(f"{dashboard}/users/nobody")[0] == 404
    status, html = fetch(f"{dashboard}/users/..%2Fbob")
    assert status == 404 and "marathon" not in html


def test_a_request_naming_another_host_is_refused(dashboard: str) -> None:
    """A web page elsewhere that renames itself to 127.0.0.1 (DNS rebinding) still sends its own name."""
    assert fetch(f"{dashboard}/users", host="attacker.example")[0] == 400
    assert fetch(f"{dashboard}/users", host="localhost")[0] == 200


def post(url: str, fields: dict[str, str], origin: str | None) -> tuple[int, str, str]:
    """A form sent as a browser sends it (from `origin`), not following the redirect."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    data = urllib.parse.urlencode(fields).encode()
    request = urllib.request.Request(url, data=data, headers={"Origin": origin} if origin else {})
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=10) as response:
            return response.status, response.headers.get("Location", ""), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Location", ""), error.read().decode()


def fact_ids(service: MemoryService, include_superseded: bool = False) -> dict[str, str]:
    request = SearchFactsRequest.build(user_id="alice", include_superseded=include_superseded, limit=50)
    return {fact.content: fact.id for fact in service.search_facts(request).facts}


def test_facts_are_added_edited_and_deleted_through_the_service(dashboard: str, home: Path) -> None:
    facts = f"{dashboard}/users/alice/facts"
    status, location, _ = post(
        facts, {"content": "Runs on Sundays", "category": "behavior", "confidence": "0.8"}, dashboard
    )
    assert (status, location) == (303, f"{dashboard}/users/alice")
    service = MemoryService(Settings(data_storage_path=home))
    added = fact_ids(service)["Runs on Sundays"]

    edit = {"content": "Runs on Saturdays", "category": "behavior", "confidence": "0.8", "pinned": "on"}
    assert post(f"{facts}/{added}", edit, dashboard)[0] == 303
    assert "Runs on Saturdays" in fact_ids(service) and "Runs on Sundays" not in fact_ids(service)
    assert "Runs on Sundays" in fact_ids(service, include_superseded=True), "the old wording is kept as history"
    page = fetch(f"{dashboard}/users/alice")[1]
    assert "What no longer holds" in page and "Runs on Sundays" in page.split("What no longer holds")[1]

    assert post(f"{facts}/{fact_ids(service)['Runs on Saturdays']}/delete", {}, dashboard)[0] == 303
    assert "Runs on Saturdays" not in fact_ids(service, include_superseded=True)


def test_one_exchange_is_erased_from_its_page_and_only_that_one(dashboard: str, home: Path) -> None:
    service = MemoryService(Settings(data_storage_path=home))
    (sea,) = service.store.read_pages(Scope("alice")).pages.ids
    page = fetch(f"{dashboard}/users/alice/exchanges/{sea}")[1]
    erase = f"/users/alice/exchanges/{sea}/forget"
    assert f'{erase}"' in page and "Erase this exchange" in page and "Erase for good" in page

    assert post(f"{dashboard}{erase}", {}, "https://attacker.example")[0] == 403
    assert post(f"{dashboard}{erase}", {}, dashboard)[:2] == (303, f"{dashboard}/users/alice")
    assert list(service.store.read_pages(Scope("alice")).pages.ids) == []
    assert fetch(f"{dashboard}/users/alice/exchanges/{sea}")[0] == 404
    assert "Likes pistachio ice cream" in fact_ids(service), "what was learned stays"
    assert len(service.store.read_pages(Scope("bob")).pages) == 1
    status, _, again = post(f"{dashboard}{erase}", {}, dashboard)
    assert status == 400 and sea in again


def test_a_bad_fact_changes_nothing_and_says_why(dashboard: str, home: Path) -> None:
    status, _, page = post(f"{dashboard}/users/alice/facts", {"content": "Likes tea", "category": "mood"}, dashboard)
    assert status == 400 and "Nothing was changed: category" in page
    assert "Likes tea" not in fact_ids(MemoryService(Settings(data_storage_path=home)))


def test_a_change_sent_from_another_site_is_refused(dashboard: str, home: Path) -> None:
    fields = {"content": "Owns a boat", "category": "context"}
    assert post(f"{dashboard}/users/alice/facts", fields, "https://attacker.example")[0] == 403
    assert post(f"{dashboard}/users/alice/facts", fields, None)[0] == 403
    assert "Owns a boat" not in fact_ids(MemoryService(Settings(data_storage_path=home)))


def test_export_downloads_the_users_memory_as_the_export_document(dashboard: str) -> None:
    with urllib.request.urlopen(f"{dashboard}/users/alice/export", timeout=10) as response:
        assert response.headers["Content-Disposition"] == 'attachment; filename="memory-alice.json"'
        exported = json.loads(response.read())
    assert exported["format"] == "memory-mcp/export" and exported["user_id"] == "alice"
    assert [page["agent_response"] for page in exported["pages"]] == ["Lovely!"]


def test_forget_needs_the_user_id_typed_and_then_erases_it_from_the_list_and_the_disk(
    dashboard: str, home: Path
) -> None:
    forget = f"{dashboard}/users/bob/forget"
    status, _, page = post(forget, {"confirm": "bo"}, dashboard)
    assert status == 400 and "confirm must equal the user_id" in page
    assert (home / "users" / "bob").is_dir(), "nothing erased"

    assert post(forget, {"confirm": "bob"}, dashboard)[:2] == (303, f"{dashboard}/users")
    assert not (home / "users" / "bob").exists()
    users_page = fetch(f"{dashboard}/users")[1]
    assert ">bob</a>" not in users_page and ">alice</a>" in users_page


def test_weeks_count_what_falls_in_them_and_leave_out_what_is_no_time() -> None:
    stamps = ["2026-11-23T10:00:00Z", "2026-11-29T23:59:59Z", "2026-11-16T00:00:00Z", "2026-06-01T00:00:00Z", "never"]
    chart = weekly({"exchanges": stamps}, until=date(2026, 11, 25), weeks=3)
    assert chart.weeks == [date(2026, 11, 9), date(2026, 11, 16), date(2026, 11, 23)]
    assert chart.series["exchanges"] == [0, 1, 2], "Monday to Sunday; older weeks and non-times left out"
    assert chart.peak == 2


def test_a_user_page_draws_exchanges_and_facts_per_week(dashboard: str) -> None:
    html = fetch(f"{dashboard}/users/alice")[1]
    assert 'aria-label="exchanges per week' in html and "1 in all" in html
    assert 'aria-label="facts added per week' in html


def test_exchanges_are_browsed_by_day_and_thread_and_opened_with_their_metadata(dashboard: str, home: Path) -> None:
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

    by_thread = fetch(f"{dashboard}/users/alice/exchanges?thread=trip")[1]
    assert "Booked the train to Porto" in by_thread and "ice cream" not in by_thread
    by_day = fetch(f"{dashboard}/users/alice/exchanges?day=2025-03-02")[1]
    assert "Booked the train to Porto" in by_day and "1 exchange, newest first" in by_day
    status, detail = fetch(f"{dashboard}/users/alice/exchanges/{added.page_id}")
    assert status == 200 and added.page_id in detail and "chat \\u003cb\\u003e" in detail
    assert fetch(f"{dashboard}/users/bob/exchanges/{added.page_id}")[0] == 404, "only within its own user"


def test_exchanges_say_their_project_and_are_browsed_by_project(dashboard: str, home: Path) -> None:
    service = MemoryService(Settings(data_storage_path=home))
    for said, project in (("Shop uses pnpm", "/home/alice/code/webshop"), ("API rounds half-even", "/srv/python-api")):
        service.add_memory(
            AddMemoryRequest.build(user_id="alice", user_input=said, agent_response="ok", project=project)
        )
    service.close()

    everything = fetch(f"{dashboard}/users/alice/exchanges")[1]
    assert "project <a" in everything and ">webshop</a>" in everything and "(no project)" in everything
    query = urllib.parse.urlencode({"project": "/home/alice/code/webshop"})
    shop = fetch(f"{dashboard}/users/alice/exchanges?{query}")[1]
    assert "Shop uses pnpm" in shop and "half-even" not in shop and "in project webshop" in shop
    none = fetch(f"{dashboard}/users/alice/exchanges?project=")[1]
    assert "ice cream" in none and "pnpm" not in none and "without a project" in none


def upload(url: str, document: bytes, mode: str, origin: str) -> tuple[int, str]:
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
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}", "Origin": origin}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers), timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_an_import_is_previewed_with_what_it_would_change_and_written_only_when_confirmed(
    dashboard: str, home: Path
) -> None:
    exported = urllib.request.urlopen(f"{dashboard}/users/alice/export", timeout=10).read()
    status, preview = upload(f"{dashboard}/users/bob/import", exported, "merge", dashboard)
    assert status == 200
    assert "Would import 1 exchange and 1 fact (merge)" in preview
    assert "pistachio" not in fetch(f"{dashboard}/users/bob")[1], "a preview writes nothing"

    document = preview.split('name="document" hidden aria-hidden="true">')[1].split("</textarea>")[0]
    applied = post(
        f"{dashboard}/users/bob/import/apply", {"mode": "merge", "document": html.unescape(document)}, dashboard
    )
    assert applied[:2] == (303, f"{dashboard}/users/bob")
    bob = fetch(f"{dashboard}/users/bob")[1]
    assert "Likes pistachio ice cream" in bob and "marathon" in bob


def test_a_bad_import_shows_its_errors_and_writes_nothing(dashboard: str) -> None:
    status, page = upload(
        f"{dashboard}/users/bob/import", b'{"format": "memory-mcp/export", "pages": [{}]}', "merge", dashboard
    )
    assert status == 400 and "Nothing was imported" in page
    status, page = upload(f"{dashboard}/users/bob/import", b"not json", "merge", dashboard)
    assert status == 400 and "the file is not JSON" in page
    assert "marathon" in fetch(f"{dashboard}/users/bob")[1]


def test_sessions_show_their_heat_and_archived_ones_are_marked_wherever_their_exchanges_are(
    dashboard: str, home: Path
) -> None:
    service = MemoryService(Settings(data_storage_path=home))
    session = f"day:{utc_now()[:10]}"  # alice's exchange has no thread: its session is its day

    def archive(document: MemoryDocument) -> MemoryDocument:
        document.sessions[session] = SessionState(visits=3, archived=True)
        return document

    assert 'class="tag">archived' not in fetch(f"{dashboard}/users/alice")[1]
    service.store.update_document(Scope("alice"), archive)
    service.close()

    page = fetch(f"{dashboard}/users/alice")[1]
    sessions = page.split('id="sessions"')[1].split("</section>")[0]
    assert f"{utc_now()[:10]} (no thread)" in sessions and '<span class="tag">archived</span>' in sessions
    assert '<td class="wide-only">3</td>' in sessions, "its visits"
    latest = page.split('id="recent"')[1]
    assert '<span class="tag">archived session</span>' in latest
    found = fetch(f"{dashboard}/users/alice/search?q=ice+cream")[1]
    assert '<span class="tag">archived session</span>' in found, "searched here all the same, and marked"
    assert 'class="tag">archived' not in fetch(f"{dashboard}/users/bob")[1], "bob's session is his own"
