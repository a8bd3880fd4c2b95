"""The dashboard's forms that change memory: facts added, edited and deleted, an exchange or a whole
memory forgotten, extraction run now, a document or past conversations imported (previewed first).

Each is taken only from the dashboard's own pages (or with a bearer token), goes through the
service, and answers 303 to the memory's page; refused, it shows that page again with the reason
beside the form that failed and nothing changed."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import URL, FormData, UploadFile
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from memory_mcp.base.errors import InvalidInput, NotFound
from memory_mcp.dashboard import past_conversations
from memory_mcp.dashboard.context import Memory, dashboard_of, path, refusal, render, service_of
from memory_mcp.dashboard.gate import viewer
from memory_mcp.dashboard.pages import memory_page
from memory_mcp.dashboard.past_conversations import is_past_conversations
from memory_mcp.dashboard.uploads import TooLarge, upload_form
from memory_mcp.models import (
    AddFactRequest,
    DeleteFactRequest,
    FlushRequest,
    ForgetExchangeRequest,
    ForgetRequest,
    ImportRequest,
    UpdateFactRequest,
)

HEAD_BYTES = 1024  # read of an upload to tell an export of past conversations from a document


async def add_fact(request: Request, memory: Memory) -> Response:
    service = service_of(request)
    form = await request.form()
    return await changing(
        request,
        memory,
        lambda: service.add_fact(
            AddFactRequest.build(
                user_id=memory.user_id,
                agent_name=memory.agent_name,
                content=form.get("content", ""),
                category=form.get("category") or "context",
                confidence=form.get("confidence") or 0.9,
                pinned=form.get("pinned") == "on",
                expires_at=form.get("expires_at") or None,
            )
        ),
        failed="add",
        typed=_typed_fact(form),
    )


async def edit_fact(request: Request, memory: Memory) -> Response:
    service = service_of(request)
    fact_id = request.path_params["fact_id"]
    form = await request.form()
    return await changing(
        request,
        memory,
        lambda: service.update_fact(
            UpdateFactRequest.build(
                user_id=memory.user_id,
                agent_name=memory.agent_name,
                fact_id=fact_id,
                content=form.get("content") or None,
                category=form.get("category") or None,
                confidence=form.get("confidence") or None,
                pinned=form.get("pinned") == "on",
                expires_at=form.get("expires_at") or "never",
            )
        ),
        failed=fact_id,
        typed=_typed_fact(form),
    )


async def delete_fact(request: Request, memory: Memory) -> Response:
    fact_id = request.path_params["fact_id"]

    def erase() -> BaseModel:
        return service_of(request).delete_fact(DeleteFactRequest.build(fact_id=fact_id, **memory.whose))

    return await changing(request, memory, erase, failed=fact_id)


async def forget_exchange(request: Request, memory: Memory) -> Response:
    page_id = request.path_params["page_id"]

    def erase() -> BaseModel:
        return service_of(request).forget_exchange(ForgetExchangeRequest.build(exchange_id=page_id, **memory.whose))

    return await changing(request, memory, erase, failed="forget_exchange")


async def flush(request: Request, memory: Memory) -> Response:
    service = service_of(request)
    form = await request.form()
    retry = form.get("retry_failed") == "yes"
    return await changing(
        request,
        memory,
        lambda: service.flush_memory(
            FlushRequest.build(user_id=memory.user_id, agent_name=memory.agent_name, retry_failed=retry)
        ),
        failed="flush",
    )


async def forget(request: Request, memory: Memory) -> Response:
    form = await request.form()

    def change() -> object:
        confirm = str(form.get("confirm", ""))
        return service_of(request).forget(
            ForgetRequest.build(user_id=memory.user_id, agent_name=memory.agent_name, confirm=confirm)
        )

    # A user forgotten leaves the list; an agent forgotten leaves its user's page.
    after = path(request, "users") if memory.agent_name is None else Memory(memory.user_id).url(request, "user")
    return await changing(request, memory, change, failed="forget", after=after)


async def changing(
    request: Request,
    memory: Memory,
    change: Callable[[], object],
    failed: str,
    after: URL | None = None,
    **values: Any,
) -> Response:
    """Make a change through the service, then show the memory's page (303: a reload does
    not repeat it); refused from another site, and on bad input with nothing changed and the
    reason shown beside the form that failed."""
    if (refused := cross_site(request)) is not None:
        return refused
    try:
        change()
    except (InvalidInput, NotFound) as exc:
        return await memory_page(request, memory, status=400, failed=failed, error=str(exc), **values)
    return RedirectResponse(after or memory.url(request, "user"), status_code=303)


async def import_preview(request: Request, memory: Memory) -> Response:
    """An uploaded file checked and counted against this user's memory; nothing written. A
    ChatGPT or Claude.ai export is held for its Import (past_conversations.py); a document of
    memory-mcp's own goes back in the page."""
    if (refused := cross_site(request)) is not None:
        return refused
    try:
        form = await upload_form(request)
    except InvalidInput as exc:
        return _import_refused(request, memory, exc, "merge")
    upload, mode = form.get("file"), str(form.get("mode", "merge"))
    if isinstance(upload, UploadFile):
        head = await upload.read(HEAD_BYTES)
        await upload.seek(0)
        if is_past_conversations(head):
            return await _conversations_preview(request, memory, upload, mode)
    text = (await upload.read()).decode("utf-8", errors="replace") if isinstance(upload, UploadFile) else ""
    try:
        data = _import_data(text)
        preview = service_of(request).preview_import(ImportRequest.build(data=data, mode=mode, user_id=memory.user_id))
    except InvalidInput as exc:
        return _import_refused(request, memory, exc, mode)
    return render(
        request,
        "import.html",
        memory=memory,
        preview=preview,
        document=text,
        mode=mode,
        source=data.get("user_id") if isinstance(data.get("user_id"), str) else None,
        exported_at=data.get("exported_at") if isinstance(data.get("exported_at"), str) else None,
    )


async def import_apply(request: Request, memory: Memory) -> Response:
    if (refused := cross_site(request)) is not None:
        return refused
    try:
        form = await upload_form(request)
    except InvalidInput as exc:
        return _import_refused(request, memory, exc, "merge")
    mode = str(form.get("mode", "merge"))
    held = form.get("held")
    try:
        if held is not None:
            past = dashboard_of(request).held.take(memory, str(held))
            await run_in_threadpool(past_conversations.store, service_of(request), past)
        else:
            data = _import_data(str(form.get("document", "")))
            service_of(request).import_memory(ImportRequest.build(data=data, mode=mode, user_id=memory.user_id))
    except InvalidInput as exc:
        return _import_refused(request, memory, exc, mode)
    return RedirectResponse(memory.url(request, "user"), status_code=303)


async def _conversations_preview(request: Request, memory: Memory, upload: UploadFile, mode: str) -> Response:
    """What importing an uploaded export of past conversations would add and skip, the export
    held for the Import that confirms it."""
    service = service_of(request)
    try:
        if mode == "replace":
            raise InvalidInput(
                "replace does not apply to past conversations: they are added to what is stored "
                f"(to start over, forget {memory.user_id} first)"
            )
        history = await run_in_threadpool(past_conversations.read_upload, upload.file, upload.filename)
        past = await run_in_threadpool(past_conversations.preview, service, memory.user_id, history)
    except InvalidInput as exc:
        return _import_refused(request, memory, exc, mode)
    held = dashboard_of(request).held.hold(memory, past)
    return render(request, "import.html", memory=memory, past=past, held=held, mode="merge")


def _import_refused(request: Request, memory: Memory, exc: InvalidInput, mode: str) -> Response:
    status = 413 if isinstance(exc, TooLarge) else 400
    return render(request, "import.html", status=status, memory=memory, error=str(exc), mode=mode)


def cross_site(request: Request) -> Response | None:
    """The refusal of a change not sent from the dashboard's own pages (None: it was). A
    bearer token is that proof already (a browser never adds one by itself)."""
    if viewer(request) is not None or _same_origin(request):
        return None
    return refusal(request, 403, "Changes are taken only from this page itself.")


def _same_origin(request: Request) -> bool:
    """Whether a state-changing request comes from a page of this dashboard: browsers name the
    page a form was sent from (Origin), and a page elsewhere cannot pass for this one."""
    origin = request.headers.get("origin")
    if origin is None:
        return request.headers.get("sec-fetch-site") == "same-origin"
    return origin == f"{request.url.scheme}://{request.url.netloc}"


def _typed_fact(form: FormData) -> dict[str, Any]:
    """A fact form's values as typed, to put back in the form when the change is refused."""
    return {
        "content": str(form.get("content", "")),
        "category": str(form.get("category", "context")),
        "confidence": str(form.get("confidence", "")),
        "expiresAt": str(form.get("expires_at", "")),
        "pinned": form.get("pinned") == "on",
    }


def _import_data(text: str) -> dict[str, Any]:
    """An uploaded document's JSON object; InvalidInput when it is none."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"the file is not JSON ({exc}); nothing was imported") from None
    if not isinstance(data, dict):
        raise InvalidInput("the file holds no JSON object; nothing was imported")
    return data
