"""The stdio transport: the SDK's, plus an answer to every line it cannot read (over stdio, and over
the socket of the process every stdio session shares: `serve_streams`).

The SDK hands a line that is not a JSON-RPC message to the server as an exception, and nothing
goes back: the host then waits for its own timeout. Here such a line gets the JSON-RPC error at
once (-32700 for text that is not JSON, -32600 for JSON that is not a message or a request whose
id is not a string or an integer), with `id: null` as JSON-RPC prescribes when the id cannot be
read, and the server goes on serving.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeGuard

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp.server import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared._context_streams import create_context_streams
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

log = logging.getLogger(__name__)

INVALID_REQUEST = -32600
MAX_LINE_BYTES = 64 * 1024 * 1024  # one message on a socket; import_memory may carry a whole export


async def serve_stdio(server: MCPServer) -> None:
    """Serve `server` over stdin/stdout until stdin closes."""
    async with stdio_server() as (read_stream, write_stream):
        await serve_streams(server, read_stream, write_stream)


async def serve_streams(
    server: MCPServer,
    read_stream: ReadStream[SessionMessage | Exception],
    write_stream: WriteStream[SessionMessage],
) -> None:
    """Serve one MCP session of `server` over a transport's stream pair until its reading side ends."""
    lowlevel = server._lowlevel_server  # the SDK serves a stream pair only through it
    to_server, from_client = create_context_streams[SessionMessage | Exception](0)

    async def answer_unreadable_lines() -> None:
        async with to_server:
            async for item in read_stream:
                message = await servable(item, write_stream)
                if message is not None:
                    await to_server.send(message)

    async with anyio.create_task_group() as group:
        group.start_soon(answer_unreadable_lines)
        await lowlevel.run(from_client, write_stream, lowlevel.create_initialization_options())


async def servable(
    item: SessionMessage | Exception, write_stream: WriteStream[SessionMessage]
) -> SessionMessage | None:
    """`item` as a message to serve, or None when it is none: a line that is not a JSON-RPC message,
    or a request whose id cannot be used, answered with its error here."""
    if isinstance(item, Exception):
        error = unreadable_line_error(item)
        log.warning("a line received is not a JSON-RPC message: %s", error.error.message)
        await write_stream.send(SessionMessage(error))
        return None
    if is_request_without_usable_id(item.message):
        log.warning("a request received has no usable id (%s)", item.message.method)
        await write_stream.send(SessionMessage(INVALID_ID_ERROR))
        return None
    return item


INVALID_ID_ERROR = types.JSONRPCError(
    jsonrpc="2.0",
    id=None,
    error=types.ErrorData(
        code=INVALID_REQUEST, message="Invalid Request: a request's id must be a string or an integer"
    ),
)


def is_request_without_usable_id(message: object) -> TypeGuard[types.JSONRPCNotification]:
    """A request whose id is an object, a float, a boolean or null reads as a notification (the SDK
    drops the id it cannot take) and would get no answer at all; but every MCP notification's
    method is `notifications/...`, so one named like a request is such a request."""
    return isinstance(message, types.JSONRPCNotification) and not message.method.startswith("notifications/")


def unreadable_line_error(problem: Exception) -> types.JSONRPCError:
    """The JSON-RPC error for a line the transport could not read as a message."""
    errors = problem.errors() if isinstance(problem, ValidationError) else []
    if any(error["type"] == "json_invalid" for error in errors) or not errors:
        reason = errors[0]["msg"] if errors else str(problem)
        data = types.ErrorData(code=types.PARSE_ERROR, message=f"Parse error: the line is not valid JSON ({reason})")
    else:
        data = types.ErrorData(
            code=INVALID_REQUEST, message="Invalid Request: the line is JSON but not a JSON-RPC message"
        )
    return types.JSONRPCError(jsonrpc="2.0", id=None, error=data)


@asynccontextmanager
async def socket_transport(
    received: BufferedByteReceiveStream, stream: anyio.abc.SocketStream
) -> AsyncIterator[tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]]:
    """The SDK's stdio transport over a socket: newline-delimited JSON-RPC, read and written without
    a thread per session (the SDK's stdio reads in a worker thread, which would take one per session)."""
    to_server, read_stream = create_context_streams[SessionMessage | Exception](0)
    write_stream, from_server = create_context_streams[SessionMessage](0)

    async def read_lines() -> None:
        async with to_server:
            while True:
                try:
                    line = await received.receive_until(b"\n", MAX_LINE_BYTES)
                except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return  # the client closed or died: the session ends
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except ValidationError as exc:
                    await to_server.send(exc)
                    continue
                await to_server.send(SessionMessage(message))

    async def write_lines() -> None:
        async with from_server:
            async for session_message in from_server:
                line = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                try:
                    await stream.send(line.encode() + b"\n")
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass  # the client is gone: what is left to say is dropped as the session ends

    async with anyio.create_task_group() as group:
        group.start_soon(read_lines)
        group.start_soon(write_lines)
        yield read_stream, write_stream
        group.cancel_scope.cancel()
