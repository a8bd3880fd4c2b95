"""Hooks against a team's memory-mcp HTTP server instead of local files: what a hook asks it, and
the client that asks.

With `memory_server.url` set (or MEMORY_MCP_SERVER_URL), a hook loads no memory of its own: it
reads its host's event as always (the host's transcript is on this machine), then asks the
server for the session's context, or sends it the finished exchanges, at /hooks/ beside /mcp,
with the token as a bearer token. The server runs the same code a local hook runs (injection.py,
hooks.py) on its own memory, for the token's user. A server that does not answer in time, or
refuses, costs the prompt nothing: the hook says why on stderr and gives no context.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Literal

from pydantic import ConfigDict, Field

from memory_mcp.base.model import Model
from memory_mcp.base.settings import Settings
from memory_mcp.hosts.events import HookEvent, HostAdapter, HostEvent
from memory_mcp.hosts.hooks import answers_start, finished_exchanges, keep_prompt, within_limit
from memory_mcp.hosts.injection import HostSession
from memory_mcp.models import Page
from memory_mcp.models.requests import MAX_QUERY_CHARS, AgentName, UserId
from memory_mcp.service.scopes import resolve_scope
from memory_mcp.store import Scope

HOOKS_PATH = "/hooks"
# A stop's exchanges are sent in requests of at most this many pages and bytes: under what the
# server takes (StoreRequest's pages, and 4 MiB a body: remote_api.MAX_BODY_BYTES).
BATCH_PAGES = 1000
BATCH_BYTES = 3 * 1024 * 1024
# The hosts give a hook 15 s (a stop 30) and then kill it: whatever memory_server.timeout_seconds
# says (up to 60), one hook's calls to the server wait this long at most, all together.
HOOK_BUDGET_SECONDS = 10.0


class HookRequest(Model):
    """What every request of a hook names: its session, its project, whose memory."""

    model_config = ConfigDict(extra="forbid")

    session_id: str = Field(max_length=512)
    project: str | None = Field(None, max_length=4096)
    agent_name: AgentName = None
    user_id: UserId = None  # a server with tokens serves the token's user alone


class ContextRequest(HookRequest):
    """What a session-start or prompt hook asks the server for."""

    event: Literal["session-start", "prompt"]
    prompt: str = Field("", max_length=20_000)
    fresh: bool = True  # session-start: the session holds nothing given before
    max_tokens: int | None = Field(None, ge=100, le=8000)
    max_chars: int = Field(10_000, ge=0, le=100_000)


class ContextAnswer(Model):
    context: str


class StoreRequest(HookRequest):
    """The finished exchanges a stop hook sends the server to store."""

    pages: list[Page] = Field(max_length=BATCH_PAGES)


class StoreAnswer(Model):
    added: int


class ServerUnavailable(Exception):
    """The memory server did not answer, or refused: the message says which, in one line."""


def ask_context(settings: Settings, request: ContextRequest, deadline: float) -> str:
    return ContextAnswer.model_validate(_post(settings, "context", request.model_dump_json(), deadline)).context


def send_exchanges(settings: Settings, request: StoreRequest, deadline: float) -> int:
    return StoreAnswer.model_validate(_post(settings, "store", request.model_dump_json(), deadline)).added


def _post(settings: Settings, action: str, body: str, deadline: float) -> object:
    """The server's JSON answer, waited for until `deadline` (time.monotonic) at the latest."""
    server = settings.memory_server
    left = min(server.timeout_seconds, deadline - time.monotonic())
    if left <= 0:
        raise ServerUnavailable(f"the memory server at {server.url} was not asked: this hook's time is up")
    headers = {"Accept": "application/json", **server.request_headers()}
    request = urllib.request.Request(
        server.endpoint(f"{HOOKS_PATH}/{action}"), data=body.encode("utf-8"), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=left) as response:  # noqa: S310 (the configured URL)
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        said = exc.read(500).decode("utf-8", "replace").strip()
        raise ServerUnavailable(f"the memory server at {server.url} refused ({exc.code}): {said[:200]}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ServerUnavailable(f"the memory server at {server.url} did not answer ({reason})") from None


def answer_remotely(
    settings: Settings,
    host: HostAdapter,
    hook_event: HookEvent,
    event: HostEvent,
    session: HostSession,
    max_tokens: int | None,
) -> str:
    """What a hook prints, its work done by the memory server: the context it gives, or the
    exchanges a stop finishes sent to it. A prompt a stop will need is kept here, as locally."""
    folder = settings.data_storage_path
    deadline = time.monotonic() + HOOK_BUDGET_SECONDS

    def resolve(user_id: str | None, agent_name: str | None) -> Scope:
        return resolve_scope(settings, user_id, agent_name)

    if hook_event == "stop":
        pages = [
            within_limit(page, settings.max_text_chars)
            for page in finished_exchanges(host, event, session, folder, resolve)
        ]
        for batch in _batches(pages):  # oldest first: one refused leaves the rest to the next stop
            send_exchanges(
                settings,
                StoreRequest(
                    session_id=session.session_id,
                    project=session.project,
                    pages=batch,
                    agent_name=session.agent_name,
                    user_id=session.user_id,
                ),
                deadline,
            )
        return host.answer("stop", "")
    if hook_event == "prompt":
        keep_prompt(host, event, session, folder, resolve)
    if hook_event not in host.injects:
        return host.answer(hook_event, "")
    if hook_event == "session-start" and not answers_start(folder, event, session, resolve):
        return host.answer(hook_event, "")  # another copy of this hook answers this start, as locally
    asked = ContextRequest(
        event=hook_event,
        session_id=session.session_id,
        project=session.project,
        prompt=(event.prompt or "")[:MAX_QUERY_CHARS],
        fresh=event.starts_over,
        max_tokens=max_tokens,
        max_chars=host.max_context_chars,
        agent_name=session.agent_name,
        user_id=session.user_id,
    )
    context = ask_context(settings, asked, deadline)
    # Asked for within max_chars: a server that sends more (another version) is not passed on, nor cut.
    return host.answer(hook_event, context if len(context) <= host.max_context_chars else "")


def _batches(pages: list[Page]) -> Iterator[list[Page]]:
    """`pages` in order, in runs of at most BATCH_PAGES pages and about BATCH_BYTES of JSON (a
    page larger than that alone: its sides are within max_text_chars)."""
    batch: list[Page] = []
    size = 0
    for page in pages:
        page_size = len(page.model_dump_json().encode())
        if batch and (len(batch) == BATCH_PAGES or size + page_size > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(page)
        size += page_size
    if batch:
        yield batch
