"""The forms that carry a whole file to import: read up to MAX_UPLOAD_BYTES, and refused past it.

A ChatGPT or Claude.ai export runs to tens of megabytes; one larger than the dashboard takes is
for `memory-mcp import FILE`, which has no such limit. A body past the limit is still read to its
end, and dropped: a browser still sending it would otherwise see the connection closed instead
of the page that says why.
"""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import Message, Receive

from memory_mcp.base.errors import InvalidInput

MAX_UPLOAD_BYTES = 100 * 1024 * 1024
MEGABYTE = 1024 * 1024


class TooLarge(InvalidInput):
    """An upload past MAX_UPLOAD_BYTES (answered 413)."""


class _Counted:
    """A receive that counts the body, and past `limit` drains the rest and ends it there."""

    def __init__(self, receive: Receive, limit: int) -> None:
        self.receive = receive
        self.limit = limit
        self.size = 0

    async def __call__(self) -> Message:
        message = await self.receive()
        if message["type"] != "http.request":
            return message
        self.size += len(message.get("body", b""))
        if self.size <= self.limit:
            return message
        while message.get("more_body", False):
            message = await self.receive()
            if message["type"] != "http.request":
                return message
            self.size += len(message.get("body", b""))
        return {"type": "http.request", "body": b"", "more_body": False}


async def upload_form(request: Request) -> FormData:
    """The request's form, each field up to MAX_UPLOAD_BYTES (the document an import page sends
    back is one); TooLarge when the body is longer, InvalidInput when it is no form."""
    counted = _Counted(request.receive, MAX_UPLOAD_BYTES)
    try:
        form = await Request(request.scope, counted).form(max_part_size=MAX_UPLOAD_BYTES)
    except HTTPException as exc:  # the multipart parser's refusal, or a body cut at the limit
        if counted.size > MAX_UPLOAD_BYTES:
            raise too_large(counted.size) from None
        raise InvalidInput(f"the upload could not be read ({exc.detail}); nothing was imported") from None
    if counted.size > MAX_UPLOAD_BYTES:
        await form.close()
        raise too_large(counted.size)
    return form


def too_large(size: int) -> TooLarge:
    return TooLarge(
        f"the upload is {size / MEGABYTE:,.0f} MB, and the dashboard takes files up to "
        f"{MAX_UPLOAD_BYTES // MEGABYTE} MB: import it with `memory-mcp import FILE`, which has no such "
        "limit (a ChatGPT export's .zip also holds its images: its conversations.json alone is smaller)"
    )
