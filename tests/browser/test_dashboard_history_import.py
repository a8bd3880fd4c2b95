"""Past conversations imported from the dashboard: a ChatGPT export (conversations.json) and a
Claude.ai one (the export's .zip) uploaded on a memory's page, previewed with what they hold and
what is stored already, stored only on Import, and previewed as all stored when uploaded again.

The browser tests drive Debian's Chromium (conftest.py) against `memory-mcp dashboard`, and read
back what is stored with MemoryService. The others call the dashboard's app in this process, for
what a browser does not send: a refused file, an upload past the limit, a form from another site,
an Import whose preview is no longer held.
Screenshot: artifacts/screenshots/import-conversations-preview-1400.png.
"""

from __future__ import annotations

import asyncio
import io
import json
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memory_mcp.base.settings import Settings
from memory_mcp.dashboard import uploads
from memory_mcp.dashboard.app import create_app
from memory_mcp.models import AddMemoryRequest
from memory_mcp.models.stored import Page as StoredPage
from memory_mcp.service.memory_service import MemoryService

try:
    from playwright.sync_api import Page, expect
except ImportError:  # the `browser` fixture skips, or fails with the reason when browsers are required
    Page = Any  # type: ignore[misc,assignment]
    expect = None  # type: ignore[assignment]

MARCH_1 = 1_709_283_600.0  # 2024-03-01T09:00:00Z

# --- exports in the shapes the services write -------------------------------------------------


def chatgpt_conversation(conversation_id: str, title: str, began: float, prompts: list[str]) -> dict[str, Any]:
    """A ChatGPT conversation: a tree of messages by node id under a hidden system message, each
    prompt answered, the branch shown ending at `current_node`."""
    mapping: dict[str, Any] = {"root": {"id": "root", "message": None, "parent": None, "children": []}}

    def add(node_id: str, parent: str, role: str, text: str, at: float, hidden: bool = False) -> str:
        mapping[node_id] = {
            "id": node_id,
            "parent": parent,
            "children": [],
            "message": {
                "id": node_id,
                "author": {"role": role, "name": None, "metadata": {}},
                "create_time": at,
                "content": {"content_type": "text", "parts": [text]},
                "status": "finished_successfully",
                "recipient": "all",
                "metadata": {"is_visually_hidden_from_conversation": True} if hidden else {},
            },
        }
        mapping[parent]["children"].append(node_id)
        return node_id

    last = add(f"{conversation_id}-system", "root", "system", "", began, hidden=True)
    for turn, prompt in enumerate(prompts):
        at = began + 300 * turn
        last = add(f"{conversation_id}-u{turn}", last, "user", prompt, at)
        last = add(f"{conversation_id}-a{turn}", last, "assistant", f"About that: {prompt.lower()}", at + 20)
    return {
        "title": title,
        "create_time": began,
        "update_time": began + 3600,
        "mapping": mapping,
        "current_node": last,
        "conversation_id": conversation_id,
        "id": conversation_id,
    }


def chatgpt_export() -> list[dict[str, Any]]:
    """Three conversations, six exchanges, from 2024-03-01 09:00 to 2024-05-10 18:20 UTC."""
    return [
        chatgpt_conversation(
            "67a1-kyoto", "Kyoto trip", MARCH_1, ["Which train goes to Kyoto?", "Is a rail pass worth it?"]
        ),
        chatgpt_conversation("67a1-bread", "Sourdough starter", MARCH_1 + 86_400 * 14, ["My starter smells sour"]),
        chatgpt_conversation(
            "67a1-tax",
            "Freelance taxes",
            MARCH_1 + 86_400 * 70 + 33_000,
            ["Do I pay VAT as a freelancer?", "What about invoices abroad?", "And quarterly payments?"],
        ),
    ]


def claude_ai_conversation(number: int, name: str, said: list[tuple[str, str, str]]) -> dict[str, Any]:
    """A Claude.ai conversation: its `chat_messages`, each (sender, text, created_at), in order."""
    messages = [
        {
            "uuid": f"{number}-m{turn}",
            "text": text,
            "content": [{"type": "text", "text": text}],
            "sender": sender,
            "created_at": at,
            "updated_at": at,
            "attachments": [],
            "files": [],
        }
        for turn, (sender, text, at) in enumerate(said)
    ]
    return {
        "uuid": f"c1a0de00-0000-4000-8000-{number:012d}",
        "name": name,
        "created_at": said[0][2],
        "updated_at": said[-1][2],
        "chat_messages": messages,
    }


def claude_ai_export() -> list[dict[str, Any]]:
    """Two conversations, three exchanges, in July 2024."""
    polars = [
        ("human", "How do I read a CSV with Polars?", "2024-07-02T08:00:01.000000Z"),
        ("assistant", "Use pl.read_csv('file.csv').", "2024-07-02T08:00:05.000000Z"),
        ("human", "And lazily?", "2024-07-02T08:05:00.000000Z"),
        ("assistant", "pl.scan_csv reads it lazily.", "2024-07-02T08:05:03.000000Z"),
    ]
    garden = [
        ("human", "When do I sow winter kale?", "2024-07-20T17:30:00.000000Z"),
        ("assistant", "Sow kale in midsummer.", "2024-07-20T17:30:09.000000Z"),
    ]
    return [claude_ai_conversation(1, "Polars questions", polars), claude_ai_conversation(2, "Garden planning", garden)]


def as_zip(conversations: list[dict[str, Any]]) -> bytes:
    """An export's .zip: conversations.json beside the account's other files."""
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w") as archive:
        archive.writestr("users.json", json.dumps([{"uuid": "acc", "full_name": "Bob"}]))
        archive.writestr("conversations.json", json.dumps(conversations))
    return packed.getvalue()


# --- what is stored --------------------------------------------------------------------------


def imported(data_dir: Path, user_id: str) -> list[StoredPage]:
    """The exchanges stored for `user_id` that came from an export, read as the server left them."""
    service = MemoryService(Settings(data_storage_path=data_dir))
    found, _ = service.find_pages(user_id, None, lambda page: "imported_from" in (page.meta_data or {}), 1000)
    service.close()
    return list(found)


def threads(pages: list[StoredPage]) -> dict[str, int]:
    counted: dict[str, int] = {}
    for page in pages:
        counted[str(page.thread_id)] = counted.get(str(page.thread_id), 0) + 1
    return counted


# --- in a browser ----------------------------------------------------------------------------

UPLOAD_LABEL = "Import an export or a DeerFlow memory.json, or past conversations"


def import_previewed(page: Page, dashboard: Any, user_id: str) -> None:
    """Press Import on a preview and wait for the user's page it answers with once stored (the
    preview was posted to the same address, so the address alone says nothing)."""
    page.get_by_role("button", name="Import", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(user_id)
    expect(page).to_have_url(dashboard.url(f"/users/{user_id}"))


def preview_upload(page: Page, dashboard: Any, user_id: str, file: Path) -> None:
    page.goto(dashboard.url(f"/users/{user_id}"))
    page.get_by_label(UPLOAD_LABEL).set_input_files(file)
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"{user_id}: import")


@pytest.mark.integration
def test_a_chatgpt_export_is_previewed_then_imported_as_threads_and_not_twice(
    page: Page, fresh_dashboard: Any, screenshot: Any, tmp_path: Path
) -> None:
    exported = tmp_path / "conversations.json"
    exported.write_text(json.dumps(chatgpt_export()), encoding="utf-8")
    page.set_viewport_size({"width": 1400, "height": 900})
    preview_upload(page, fresh_dashboard, "bob", exported)

    expect(page.locator("#source")).to_contain_text("The file is a ChatGPT export")
    expect(page.locator("#preview")).to_have_text(
        "3 conversations with 6 exchanges, from 2024-03-01 09:00 UTC to 2024-05-10 18:20 UTC. "
        "Would import 6 exchanges; 0 are stored already and would be skipped."
    )
    rows = page.locator("#conversations tbody tr")
    expect(rows).to_have_count(3)
    cells = [("Kyoto trip", "2", "2024-03-01 09:00 UTC", "2024-03-01 09:05 UTC")]
    cells.append(("Sourdough starter", "1", "2024-03-15 09:00 UTC", "2024-03-15 09:00 UTC"))
    cells.append(("Freelance taxes", "3", "2024-05-10 18:10 UTC", "2024-05-10 18:20 UTC"))
    for number, row in enumerate(cells):
        expect(rows.nth(number).locator("th, td")).to_have_text(list(row))
    screenshot(page, "import-conversations-preview-1400")
    assert imported(fresh_dashboard.data_dir, "bob") == [], "a preview stores nothing"

    import_previewed(page, fresh_dashboard, "bob")
    stored = imported(fresh_dashboard.data_dir, "bob")
    assert threads(stored) == {"67a1-kyoto": 2, "67a1-bread": 1, "67a1-tax": 3}
    kyoto = sorted((page for page in stored if page.thread_id == "67a1-kyoto"), key=lambda page: page.timestamp)
    assert [page.user_input for page in kyoto] == ["Which train goes to Kyoto?", "Is a rail pass worth it?"]
    assert kyoto[0].timestamp.startswith("2024-03-01T09:00:00")
    assert (kyoto[0].meta_data or {}).get("title") == "Kyoto trip"

    preview_upload(page, fresh_dashboard, "bob", exported)
    expect(page.locator("#preview")).to_contain_text("Would import 0 exchanges; 6 are stored already")
    import_previewed(page, fresh_dashboard, "bob")
    assert len(imported(fresh_dashboard.data_dir, "bob")) == 6, "nothing stored twice"


@pytest.mark.integration
def test_a_claude_ai_zip_is_previewed_then_imported(page: Page, fresh_dashboard: Any, tmp_path: Path) -> None:
    exported = tmp_path / "data-2024-07-21-batch-0000.zip"
    exported.write_bytes(as_zip(claude_ai_export()))
    preview_upload(page, fresh_dashboard, "alice", exported)

    expect(page.locator("#source")).to_contain_text("The file is a Claude.ai export")
    expect(page.locator("#preview")).to_have_text(
        "2 conversations with 3 exchanges, from 2024-07-02 08:00 UTC to 2024-07-20 17:30 UTC. "
        "Would import 3 exchanges; 0 are stored already and would be skipped."
    )
    first = page.locator("#conversations tbody tr").nth(0).locator("th, td")
    expect(first).to_have_text(["Polars questions", "2", "2024-07-02 08:00 UTC", "2024-07-02 08:05 UTC"])
    assert imported(fresh_dashboard.data_dir, "alice") == []

    import_previewed(page, fresh_dashboard, "alice")
    assert threads(imported(fresh_dashboard.data_dir, "alice")) == {
        "c1a0de00-0000-4000-8000-000000000001": 2,
        "c1a0de00-0000-4000-8000-000000000002": 1,
    }
    preview_upload(page, fresh_dashboard, "alice", exported)
    expect(page.locator("#preview")).to_contain_text("Would import 0 exchanges; 3 are stored already")


# --- the app in this process -----------------------------------------------------------------

ORIGIN = "http://127.0.0.1"
BOUNDARY = "history-import-boundary"


@dataclass
class InProcess:
    """The dashboard's app over a memory of bob's, and the service behind it."""

    service: MemoryService
    app: Any


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[InProcess]:
    service = MemoryService(Settings(data_storage_path=tmp_path / "data"))
    service.add_memory(AddMemoryRequest.build(user_id="bob", user_input="I keep bees", agent_response="Lovely."))
    try:
        yield InProcess(service, create_app(service))
    finally:
        service.close()


def call(memory: InProcess, path: str, body: bytes, content_type: str, origin: str | None = ORIGIN) -> Any:
    """One POST to the dashboard, its body in 64 KiB pieces as a server hands it on: (status,
    headers, page)."""
    app = memory.app
    headers = [(b"host", b"127.0.0.1"), (b"content-type", content_type.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    pieces = [body[start : start + 65_536] for start in range(0, len(body), 65_536)] or [b""]
    incoming = [
        {"type": "http.request", "body": piece, "more_body": number < len(pieces) - 1}
        for number, piece in enumerate(pieces)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    # In a thread of its own: Playwright keeps an event loop running in this one (conftest.py).
    with ThreadPoolExecutor(1) as running:
        running.submit(asyncio.run, app(scope, receive, send)).result()  # type: ignore[arg-type]
    start = next(message for message in sent if message["type"] == "http.response.start")
    page = b"".join(message.get("body", b"") for message in sent if message["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), page.decode()


def upload(memory: InProcess, content: bytes, mode: str = "merge", origin: str | None = ORIGIN) -> Any:
    body = (
        (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="mode"\r\n\r\n{mode}\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="conversations.json"\r\n'
            "Content-Type: application/json\r\n\r\n"
        ).encode()
        + content
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )
    return call(memory, "/users/bob/import", body, f"multipart/form-data; boundary={BOUNDARY}", origin)


def held_id(page: str) -> str:
    return page.split('name="held" value="')[1].split('"')[0]


def apply(memory: InProcess, held: str) -> Any:
    return call(memory, "/users/bob/import/apply", f"held={held}".encode(), "application/x-www-form-urlencoded")


def stored_imports(memory: InProcess) -> int:
    return memory.service.find_pages("bob", None, lambda page: "imported_from" in (page.meta_data or {}), 1000)[1]


def test_an_export_is_held_for_its_import_and_each_held_preview_imports_once(memory: InProcess) -> None:
    status, _, page = upload(memory, json.dumps(chatgpt_export()).encode())
    assert status == 200 and "Would import 6 exchanges; 0 are stored already" in page
    assert stored_imports(memory) == 0
    held = held_id(page)
    status, headers, _ = apply(memory, held)
    assert (status, headers[b"location"]) == (303, b"/users/bob")
    assert stored_imports(memory) == 6
    status, _, page = apply(memory, held)
    assert status == 400 and "this preview is no longer held" in page and "upload the file again" in page

    status, _, page = upload(memory, as_zip(chatgpt_export()))
    assert status == 200 and "Would import 0 exchanges; 6 are stored already" in page


@pytest.mark.parametrize(
    ("content", "mode", "said"),
    [
        (b'[{"title": "no mapping"}]', "merge", "not of ChatGPT conversations"),
        (b"[1, 2", "merge", "could not be read as JSON"),
        (as_zip([]).replace(b"conversations.json", b"somethingelse.json"), "merge", "holds no conversations.json"),
        (json.dumps([{"uuid": "x", "name": "empty", "chat_messages": []}]).encode(), "merge", "no conversation with"),
        (json.dumps(claude_ai_export()).encode(), "replace", "replace does not apply to past conversations"),
    ],
)
def test_a_file_that_cannot_be_imported_says_why_and_stores_nothing(
    memory: InProcess, content: bytes, mode: str, said: str
) -> None:
    status, _, page = upload(memory, content, mode)
    assert status == 400 and "Nothing was imported" in page and said in page, page
    assert "/tmp" not in page, "the file is named as it was uploaded"
    assert stored_imports(memory) == 0


def test_an_upload_past_the_limit_is_refused_with_the_limit_named(
    memory: InProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(uploads, "MAX_UPLOAD_BYTES", 300)
    status, _, page = upload(memory, json.dumps(chatgpt_export()).encode())
    assert status == 413 and "Nothing was imported" in page and "memory-mcp import FILE" in page
    assert stored_imports(memory) == 0


def test_the_limit_is_named_beside_the_upload() -> None:
    assert uploads.MAX_UPLOAD_BYTES == 100 * 1024 * 1024
    assert "Files up to {{ max_upload_mb }} MB" in (
        Path(uploads.__file__).parent / "templates" / "user.html"
    ).read_text(encoding="utf-8")


def test_an_upload_from_another_site_is_refused_and_nothing_is_held(memory: InProcess) -> None:
    status, _, page = upload(memory, json.dumps(chatgpt_export()).encode(), origin="https://elsewhere.example")
    assert status == 403 and 'name="held"' not in page
    assert stored_imports(memory) == 0
