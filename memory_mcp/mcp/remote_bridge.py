"""A stdio session served by the team's memory-mcp HTTP server (`memory_server.url`): the host
starts `memory-mcp` as always, and this process loads no memory; it passes each message to the
server's /mcp with the token, and each answer back.

Written on httpx2 (the SDK's own HTTP client) rather than the SDK's streamable-HTTP client
transport: that transport lets a refused connection end the whole session, where a host must get
an error for that one call, saying the server did not answer, and go on. The server is ours and
answers every POST with one JSON message (stateless, JSON responses), which keeps this short.

A host starts its stdio server in the folder it works in, so that folder's project is named in
each add_memory and retrieve_memory call that names none, as a local server would.
"""

from __future__ import annotations

import logging

import anyio
import httpx2
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared._stream_protocols import WriteStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from memory_mcp.base.settings import MemoryServerSettings
from memory_mcp.mcp.http import MCP_PATH
from memory_mcp.mcp.stdio import servable

log = logging.getLogger(__name__)

PROJECT_TOOLS = ("add_memory", "retrieve_memory")  # the tools whose calls are about a project
# A tool call may take a while on a busy server (an import, a flush); connecting may not.
CALL_SECONDS = 120.0
# Once the host closes the session, calls still under way get this long to finish.
CLOSING_SECONDS = 10.0


class RemoteSession:
    """One host session's messages, each posted to the server; answers and errors back to the host."""

    def __init__(self, server: MemoryServerSettings, project: str | None, client: httpx2.AsyncClient) -> None:
        self.url = server.endpoint(MCP_PATH)
        self.project = project
        self.client = client
        self.headers = {"Accept": "application/json, text/event-stream", **server.request_headers()}

    async def pass_on(self, message: types.JSONRPCMessage, host: WriteStream[SessionMessage]) -> None:
        """Post one message; a request's answer, or an error saying why there is none, to the host."""
        request_id = message.id if isinstance(message, types.JSONRPCRequest) else None
        body = self._in_project(message).model_dump(by_alias=True, mode="json", exclude_unset=True)
        try:
            response = await self.client.post(self.url, json=body, headers=self.headers)
        except httpx2.HTTPError as exc:
            reason = f"the memory server at {self.url} did not answer ({type(exc).__name__}: {exc})"
            await self._fail(request_id, reason, host)
            return
        if request_id is None:
            return
        if response.status_code == 202:
            await self._fail(
                request_id, f"the memory server at {self.url} accepted the request but gave no answer", host
            )
            return
        try:
            answer = types.jsonrpc_message_adapter.validate_json(response.content, by_name=False)
        except ValidationError:
            said = response.text[:200].strip()
            await self._fail(
                request_id, f"the memory server at {self.url} answered {response.status_code}: {said}", host
            )
            return
        if isinstance(answer, types.JSONRPCResponse | types.JSONRPCError) and answer.id is None:
            answer = answer.model_copy(update={"id": request_id})  # refused before its id was read
        if isinstance(answer, types.JSONRPCResponse) and isinstance(message, types.JSONRPCRequest):
            self._note_version(message, answer)
        await host.send(SessionMessage(answer))

    def _in_project(self, message: types.JSONRPCMessage) -> types.JSONRPCMessage:
        if not (isinstance(message, types.JSONRPCRequest) and message.method == "tools/call" and self.project):
            return message
        params = dict(message.params or {})
        arguments = params.get("arguments")
        if params.get("name") not in PROJECT_TOOLS or not isinstance(arguments, dict) or "project" in arguments:
            return message
        params["arguments"] = {**arguments, "project": self.project}
        return message.model_copy(update={"params": params})

    def _note_version(self, request: types.JSONRPCRequest, answer: types.JSONRPCResponse) -> None:
        """After `initialize`, every request names the protocol version agreed on, as HTTP requires."""
        version = answer.result.get("protocolVersion") if request.method == "initialize" else None
        if isinstance(version, str):
            self.headers["MCP-Protocol-Version"] = version

    async def _fail(self, request_id: types.RequestId | None, reason: str, host: WriteStream[SessionMessage]) -> None:
        log.warning("%s", reason)
        if request_id is not None:
            error = types.ErrorData(code=types.INTERNAL_ERROR, message=f"memory-mcp: {reason}")
            await host.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)))


async def serve_remotely(server: MemoryServerSettings, project: str | None) -> None:
    """Serve this stdio session through the memory server until stdin closes."""
    timeout = httpx2.Timeout(CALL_SECONDS, connect=server.timeout_seconds)
    async with httpx2.AsyncClient(timeout=timeout) as client, stdio_server() as (from_host, to_host):
        session = RemoteSession(server, project, client)
        async with from_host, to_host, anyio.create_task_group() as group:  # stdout closes after the last answer
            async for item in from_host:
                message = await servable(item, to_host)
                if message is not None:  # each on its own: a slow call does not hold up the next
                    group.start_soon(session.pass_on, message.message, to_host)
            group.cancel_scope.deadline = anyio.current_time() + CLOSING_SECONDS  # the host has gone
