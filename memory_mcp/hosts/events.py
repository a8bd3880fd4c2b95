"""What a host's hook tells memory, whichever host runs it: one event model, and the contract each
host's adapter meets (reading its JSON, answering in its format, saying what a finished turn said).

Hosts name the same three moments differently (SessionStart, UserPromptSubmit / BeforeAgent,
Stop / AfterAgent ...): the command line names them `session-start`, `prompt` and `stop`, and an
adapter turns its host's payload into a `HostEvent` and context into what its host reads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from pydantic import ConfigDict

from memory_mcp.base.clock import utc_now
from memory_mcp.base.model import Model
from memory_mcp.models import Page

HookEvent = Literal["session-start", "prompt", "stop"]
CONTEXT_EVENTS: frozenset[HookEvent] = frozenset({"session-start", "prompt"})
CLIPPED = " […]"


# SessionStart's sources after which the model no longer holds what was given before.
STARTS_OVER = frozenset({"startup", "clear", "compact"})


class HostEvent(Model):
    """A hook's payload in memory's terms (whatever the host calls each field)."""

    model_config = ConfigDict(frozen=True)

    session_id: str = ""
    cwd: str | None = None
    prompt: str | None = None  # the prompt event's; the stop event's where the host sends it
    reply: str | None = None  # stop: the turn's final reply, where the host sends it
    transcript_path: str | None = None
    source: str | None = None  # session-start: startup, resume, clear or compact
    stop_hook_active: bool = False  # stop: another hook turned this stop into a continuation
    turn_id: str | None = None  # stop: the host's id of the turn, where it gives one
    stamp: str | None = None  # the host's time of this event, where it sends one: alike in each hook it runs

    @property
    def starts_over(self) -> bool:
        """Whether the model holds nothing given before in this session: a new start, a cleared or
        compacted conversation (a resumed one has its conversation again); a host that does not
        say is taken to start over."""
        return self.source in STARTS_OVER or self.source is None


class HostAdapter(Protocol):
    """One host's hooks: how to recognise its payload, read it, and answer it."""

    name: str  # as `--host` names it
    max_context_chars: int  # what the host keeps inline of a hook's context
    injects: frozenset[HookEvent]  # the events whose answer the host gives the model
    keeps_prompts: bool  # its stop lacks the prompt: the prompt hook keeps it for the stop to pair

    def recognises(self, payload: Mapping[str, Any], environ: Mapping[str, str]) -> bool: ...

    def read(self, event: HookEvent, payload: Mapping[str, Any]) -> HostEvent: ...

    def answer(self, event: HookEvent, context: str) -> str:
        """What the hook prints on stdout for `context` ("" when there is none: most hosts then
        want nothing printed)."""
        ...

    def exchanges(self, event: HostEvent) -> list[Page]:
        """Stop: the finished exchanges the host's payload (or its transcript) holds."""
        ...


def one_exchange(host: str, event: HostEvent) -> list[Page]:
    """The turn a stop event carries whole (its prompt and reply), as one exchange whose id is
    made from the host, session and turn: the same turn stored twice is one exchange."""
    if not event.prompt or not event.reply or event.stop_hook_active:
        return []
    turn = event.turn_id or event.prompt
    digest = hashlib.sha256(f"{host}\0{event.session_id}\0{turn}".encode()).hexdigest()[:16]
    return [
        Page(
            page_id=f"page_{digest}",
            user_input=event.prompt,
            agent_response=event.reply,
            timestamp=utc_now(),
            thread_id=event.session_id or None,
        )
    ]


def clipped(text: str, limit: int) -> str:
    """`text` within `limit` characters, a marker where it was cut."""
    return text if len(text) <= limit else text[: limit - len(CLIPPED)] + CLIPPED


def additional_context(event_name: str, context: str) -> str:
    """`context` as the `hookSpecificOutput.additionalContext` answer Claude Code, Codex, Gemini
    CLI and VS Code all read, for their `event_name`; nothing when there is no context."""
    if not context:
        return ""
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": context}}, ensure_ascii=False
    )
