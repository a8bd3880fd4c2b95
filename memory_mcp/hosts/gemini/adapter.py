"""Gemini CLI's hooks as memory reads them: its event JSON, its `hookSpecificOutput` answer, and
the exchange its AfterAgent event carries whole (the prompt and the final reply).

Facts of Gemini CLI 0.61.0 this rests on: every hook's stdin has `hook_event_name`, `session_id`,
`cwd` and `timestamp`; BeforeAgent adds `prompt`, AfterAgent `prompt`, `prompt_response` and
`stop_hook_active`, SessionStart `source` (startup, resume or clear). Each hook's environment has
GEMINI_SESSION_ID set to the payload's `session_id`. Context is read only from JSON on stdout
(plain text is shown to the user, never given to the model).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import ConfigDict

from memory_mcp.base.model import Model
from memory_mcp.hosts.events import CONTEXT_EVENTS, HookEvent, HostEvent, additional_context, one_exchange
from memory_mcp.models import Page

# Gemini CLI keeps a hook's context whole (0.61.0 has no cap on it); a block is still built to the
# 10,000 characters Claude Code keeps, so a prompt carries no more memory in one host than the other.
MAX_CONTEXT_CHARS = 10_000
EVENT_NAMES: dict[HookEvent, str] = {"session-start": "SessionStart", "prompt": "BeforeAgent", "stop": "AfterAgent"}
# Events only Gemini CLI names so; its SessionStart shares Claude Code's name and is told apart by
# the session id Gemini also puts in the hook's environment.
OWN_EVENTS = {"BeforeAgent", "AfterAgent"}
# In `gemini -p`, SessionStart's context is put before the prompt, each piece as
# `<hook_context>...</hook_context>` and a blank line; BeforeAgent and AfterAgent then carry it as
# part of the prompt. Gemini escapes `<` and `>` inside, so the first closing tag ends the piece.
LEADING_HOOK_CONTEXT = re.compile(r"\A(?:\s*<hook_context>.*?</hook_context>)+\s*", re.DOTALL)
# What AfterAgent sends as the reply when the model gave no text (a cancelled or tool-only turn).
NO_REPLY = "[no response text]"


class HookInput(Model):
    """What Gemini CLI sends a command hook on stdin (the fields used here; others are ignored)."""

    model_config = ConfigDict(extra="ignore")

    session_id: str = ""
    cwd: str | None = None
    transcript_path: str | None = None
    hook_event_name: str | None = None
    timestamp: str | None = None
    prompt: str | None = None
    prompt_response: str | None = None
    source: str | None = None  # SessionStart: startup, resume or clear
    stop_hook_active: bool = False


def users_words(prompt: str | None) -> str | None:
    """The prompt as the user typed it: without the hook context Gemini put before it."""
    return None if prompt is None else LEADING_HOOK_CONTEXT.sub("", prompt, count=1)


class Gemini:
    """Gemini CLI: context as `hookSpecificOutput.additionalContext`; an AfterAgent stores the turn
    it carries as one exchange."""

    name = "gemini"
    max_context_chars = MAX_CONTEXT_CHARS
    injects = CONTEXT_EVENTS
    keeps_prompts = False

    def recognises(self, payload: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
        event = payload.get("hook_event_name")
        if event in OWN_EVENTS:
            return True
        session = payload.get("session_id")
        return event == "SessionStart" and bool(session) and environ.get("GEMINI_SESSION_ID") == session

    def read(self, event: HookEvent, payload: Mapping[str, Any]) -> HostEvent:
        sent = HookInput.model_validate(payload)
        reply = sent.prompt_response if sent.prompt_response != NO_REPLY else None
        return HostEvent(
            session_id=sent.session_id,
            cwd=sent.cwd,
            prompt=users_words(sent.prompt),
            reply=reply,
            transcript_path=sent.transcript_path,
            source=sent.source,
            stop_hook_active=sent.stop_hook_active,
            # One payload per event, shared by every hook of it: a turn whose hooks are installed
            # both for the user and for the project is stored once.
            turn_id=sent.timestamp,
        )

    def answer(self, event: HookEvent, context: str) -> str:
        return additional_context(EVENT_NAMES[event], context)

    def exchanges(self, event: HostEvent) -> list[Page]:
        return one_exchange(self.name, event)
