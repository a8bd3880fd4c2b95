"""The dashboard as the streamable-HTTP server mounts it at /dashboard: behind the server's bearer
tokens a page needs a token, and a token sees and changes its own user's memory and no one else's,
on every page the dashboard has. Without tokens (loopback only) it lists every user, as the local
`memory-mcp dashboard` does.

The same flows in a real browser (the token asked for once and kept in the tab):
tests/browser/test_dashboard_behind_tokens.py."""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from http_helpers import HttpServer, issue_token
from stdio_helpers import write_config

from memory_mcp.base.settings import Settings
from memory_mcp.dashboard.app import create_app
from memory_mcp.mcp.http import DASHBOARD_PATH
from memory_mcp.models import AddFactRequest, AddMemoryRequest, ExportRequest, SearchFactsRequest
from memory_mcp.models.requests import MAX_QUERY_CHARS
from memory_mcp.service.memory_service import MemoryService

pytestmark = pytest.mark.integration

BOB_SAYS = "My marathon is in May"
BOB_FACT = "Trains at the harbour at dawn"
ALICE_FACT = "Likes pistachio ice cream"


class Answer:
    def __init__(self, status: int, body: str, location: str = "") -> None:
        self.status, self.body, self.location = status, body, location


def ask(url: str, token: str | None = None, form: dict[str, str] | None = None) -> Answer:
    """One request as the page's script sends it (the token in the header), not following redirects."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=10) as response:
            return Answer(response.status, response.read().decode(), response.headers.get("Location", ""))
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.read().decode(), error.headers.get("Location", ""))


def seed(data: Path) -> dict[str, str]:
    """Alice (with an agent) and Bob; returns ids a request about Bob's memory can name."""
    service = MemoryService(Settings(data_storage_path=data))
    try:
        service.add_memory(
            AddMemoryRequest.build(user_id="alice", user_input="Ice cream by the sea", agent_response="!")
        )
        service.add_memory(
            AddMemoryRequest.build(user_id="alice", agent_name="coach", user_input="Plan my week", agent_response="ok")
        )
        service.add_fact(AddFactRequest.build(user_id="alice", content=ALICE_FACT))
        page = service.add_memory(AddMemoryRequest.build(user_id="bob", user_input=BOB_SAYS, agent_response="Go!"))
        service.add_memory(
            AddMemoryRequest.build(user_id="bob", agent_name="coach", user_input="Bob's plan", agent_response="ok")
        )
        fact = service.add_fact(AddFactRequest.build(user_id="bob", content=BOB_FACT))
        return {"page_id": page.page_id, "fact_id": fact.fact.id}
    finally:
        service.close()


def bobs_memory(data: Path) -> str:
    """Everything stored for Bob (and his agents), as one comparable text."""
    service = MemoryService(Settings(data_storage_path=data), short_lived=True)
    try:
        exported = service.export_memory(ExportRequest.build(user_id="bob"))
        return exported.model_dump_json(exclude={"exported_at"})
    finally:
        service.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path, dict[str, str], dict[str, str]]]:
    """The HTTP server with tokens for alice and bob; yields (dashboard URL, data dir, tokens, Bob's ids)."""
    data = tmp_path / "data"
    ids = seed(data)
    config = write_config(tmp_path / "config.json", {"data_storage_path": str(data)})
    tokens = {user: issue_token(config, user) for user in ("alice", "bob")}
    with HttpServer(config, tmp_path / "server.log") as server:
        yield server.base + DASHBOARD_PATH, data, tokens, ids


def test_a_page_opened_without_a_token_asks_for_one_and_shows_nothing_remembered(
    served: tuple[str, Path, dict[str, str], dict[str, str]],
) -> None:
    dashboard, data, _, _ = served
    opened = ask(f"{dashboard}/users/alice")
    assert opened.status == 200 and 'id="token-form"' in opened.body
    assert ALICE_FACT not in opened.body and "alice" not in opened.body.split("<main>")[1]
    assert ask(f"{dashboard}/static/dashboard.js").status == 200, "the page's own assets need no token"

    change = ask(f"{dashboard}/users/alice/facts", form={"content": "Sneaked in"})
    assert change.status == 401
    service = MemoryService(Settings(data_storage_path=data), short_lived=True)
    facts = service.search_facts(SearchFactsRequest.build(user_id="alice")).facts
    service.close()
    assert [fact.content for fact in facts] == [ALICE_FACT]


def test_the_token_page_takes_its_assets_from_this_server_whatever_the_host_header_says(
    served: tuple[str, Path, dict[str, str], dict[str, str]],
) -> None:
    """Behind tokens any Host is answered: a page whose script address came from that header would
    load a script from wherever a client (or a cache poisoned by one) named."""
    dashboard, _, tokens, _ = served
    renamed = urllib.request.Request(f"{dashboard}/users/alice", headers={"Host": "attacker.example"})
    with urllib.request.urlopen(renamed, timeout=10) as response:
        page, headers = response.read().decode(), response.headers
    assert f'<script src="{DASHBOARD_PATH}/static/dashboard.js" defer></script>' in page
    assert f'href="{DASHBOARD_PATH}/static/dashboard.css"' in page and "attacker.example" not in page
    assert headers["Cache-Control"] == "no-store", "the token page is kept by no cache"
    mine = urllib.request.Request(f"{dashboard}/users/alice", headers={"Authorization": f"Bearer {tokens['alice']}"})
    with urllib.request.urlopen(mine, timeout=10) as response:
        assert ALICE_FACT in response.read().decode() and response.headers["Cache-Control"] == "no-store"
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["Content-Security-Policy"] == "frame-ancestors 'none'"


def test_an_unknown_or_malformed_token_is_refused_with_401_and_asked_again(
    served: tuple[str, Path, dict[str, str], dict[str, str]],
) -> None:
    dashboard, _, tokens, _ = served
    for token in ("mm_not-a-token", tokens["alice"] + "x"):
        refused = ask(f"{dashboard}/users/alice", token=token)
        assert refused.status == 401 and "not accepted" in refused.body and ALICE_FACT not in refused.body
    basic = urllib.request.Request(f"{dashboard}/users/alice", headers={"Authorization": f"Basic {tokens['alice']}"})
    with pytest.raises(urllib.error.HTTPError) as refused_basic:
        urllib.request.urlopen(basic, timeout=10)
    assert refused_basic.value.code == 401


def test_a_token_opens_its_own_users_memory_and_lists_no_one_else(
    served: tuple[str, Path, dict[str, str], dict[str, str]],
) -> None:
    dashboard, _, tokens, _ = served
    home = ask(f"{dashboard}/", token=tokens["alice"])
    assert home.status == 303 and home.location == f"{DASHBOARD_PATH}/users"
    listed = ask(f"{dashboard}/users", token=tokens["alice"])
    assert listed.status == 200
    assert f'href="{DASHBOARD_PATH}/users/alice"' in listed.body
    assert f'href="{DASHBOARD_PATH}/users/alice/agents/coach"' in listed.body
    assert "bob" not in listed.body, "another user is not even named"

    mine = ask(f"{dashboard}/users/alice", token=tokens["alice"])
    assert mine.status == 200 and ALICE_FACT in mine.body and BOB_FACT not in mine.body
    agent = ask(f"{dashboard}/users/alice/agents/coach", token=tokens["alice"])
    assert agent.status == 200 and "Plan my week" in agent.body and "Bob&#39;s plan" not in agent.body

    added = ask(f"{dashboard}/users/alice/facts", token=tokens["alice"], form={"content": "Swims on Fridays"})
    assert added.status == 303 and added.location == f"{DASHBOARD_PATH}/users/alice"
    assert "Swims on Fridays" in ask(f"{dashboard}/users/alice", token=tokens["alice"]).body


def memory_addresses(ids: dict[str, str]) -> list[tuple[str, str]]:
    """(method, path) of every dashboard page about one memory, filled in for Bob's."""
    app = create_app(MemoryService(Settings(data_storage_path=Path("/nonexistent")), short_lived=True))
    values = {"user_id": "bob", "agent_name": "coach", **ids}
    addresses = []
    for route in app.routes:
        path = getattr(route, "path", "")
        if "{user_id}" not in path:
            continue
        filled = re.sub(r"\{(\w+)\}", lambda name: values[name.group(1)], path)
        addresses += [(method, filled) for method in sorted(route.methods or []) if method != "HEAD"]
    return addresses


def test_a_token_for_one_user_can_neither_see_nor_change_another_on_any_page(
    served: tuple[str, Path, dict[str, str], dict[str, str]],
) -> None:
    dashboard, data, tokens, ids = served
    before = bobs_memory(data)
    addresses = memory_addresses(ids)
    assert len(addresses) == 26, "every page of a user's memory and of an agent's"
    for method, path in addresses:
        form = {"content": "Hijacked", "confirm": "bob", "document": "{}", "retry_failed": "yes"}
        answer = ask(f"{dashboard}{path}", token=tokens["alice"], form=form if method == "POST" else None)
        assert answer.status == 403, (method, path, answer.status)
        assert "Not allowed" in answer.body
        for bobs in (BOB_SAYS, BOB_FACT, ids["page_id"], ids["fact_id"]):
            assert bobs not in answer.body, (method, path)
    assert bobs_memory(data) == before, "nothing of Bob's changed"
    assert ask(f"{dashboard}/users/bob", token=tokens["bob"]).status == 200, "his own token still opens it"


def test_without_tokens_the_mounted_dashboard_lists_everyone_on_loopback_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    seed(data)
    config = write_config(tmp_path / "config.json", {"data_storage_path": str(data)})
    with HttpServer(config, tmp_path / "server.log") as server:
        dashboard = server.base + DASHBOARD_PATH
        bare = ask(dashboard)
        assert bare.status == 307 and bare.location == f"{DASHBOARD_PATH}/"
        listed = ask(f"{dashboard}/users")
        assert listed.status == 200
        assert (
            f'href="{DASHBOARD_PATH}/users/alice"' in listed.body
            and f'href="{DASHBOARD_PATH}/users/bob"' in listed.body
        )
        assert 'id="token-form"' not in listed.body
        renamed = urllib.request.Request(f"{dashboard}/users", headers={"Host": "attacker.example"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(renamed, timeout=10)
        assert refused.value.code == 400


def test_an_agents_memory_is_forgotten_from_its_page_and_its_user_keeps_theirs(
    served: tuple[str, Path, dict[str, str], dict[str, str]],
) -> None:
    dashboard, _, tokens, _ = served
    agent_page = f"{dashboard}/users/alice/agents/coach"
    refused = ask(f"{agent_page}/forget", token=tokens["alice"], form={"confirm": "coach"})
    assert refused.status == 400 and "Nothing was changed" in refused.body

    forgotten = ask(f"{agent_page}/forget", token=tokens["alice"], form={"confirm": "alice"})
    assert forgotten.status == 303 and forgotten.location == f"{DASHBOARD_PATH}/users/alice"
    assert ask(agent_page, token=tokens["alice"]).status == 404
    page = ask(f"{dashboard}/users/alice", token=tokens["alice"])
    assert page.status == 200 and ALICE_FACT in page.body and "agents/coach" not in page.body
    assert ask(f"{dashboard}/users/bob/agents/coach", token=tokens["bob"]).status == 200, "bob's agent stays"


def test_a_search_the_tools_would_refuse_is_a_page_that_says_why(
    served: tuple[str, Path, dict[str, str], dict[str, str]],
) -> None:
    dashboard, _, tokens, _ = served
    answer = ask(f"{dashboard}/users/alice/search?q=" + "x" * (MAX_QUERY_CHARS + 1), token=tokens["alice"])
    assert answer.status == 400 and "Cannot be shown" in answer.body and "query" in answer.body
