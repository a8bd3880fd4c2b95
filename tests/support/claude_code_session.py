"""Claude Code session transcripts as Claude Code writes them (JSON lines under ~/.claude/projects/),
and the JSON its hooks receive on stdin."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SESSION_ID = "0b4d6f1e-5c1a-4e0f-9d8e-3a2b1c0d9e8f"


class Transcript:
    """A session's transcript file, written line by line as the session goes."""

    def __init__(self, path: Path, session_id: str = SESSION_ID, cwd: str = "/work/app") -> None:
        self.path = path
        self.session_id = session_id
        self.cwd = cwd
        self._count = 0
        self._last: str | None = None
        self.last_reply: str | None = None  # the text of the newest assistant message
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()

    def _line(self, kind: str, message: dict[str, Any], **extra: Any) -> str:
        self._count += 1
        uuid = f"{self.session_id}-{kind[0]}-{self._count:04d}"  # unique across sessions, as Claude Code's are
        line = {
            "parentUuid": self._last,
            "isSidechain": False,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": "2.1.173",
            "gitBranch": "main",
            "type": kind,
            "message": message,
            "uuid": uuid,
            "timestamp": f"2026-06-15T10:{self._count // 60:02d}:{self._count % 60:02d}.000Z",
            **extra,
        }
        with self.path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(line) + "\n")
        self._last = uuid
        return uuid

    def prompt(self, text: str, as_blocks: bool = False) -> str:
        content: Any = [{"type": "text", "text": text}] if as_blocks else text
        return self._line("user", {"role": "user", "content": content})

    def reply(self, *blocks: dict[str, Any], message_id: str | None = None) -> None:
        """One assistant message, written one content block a line as Claude Code does."""
        message_id = message_id or f"msg_{self._count:04d}"
        said = "\n\n".join(block["text"] for block in blocks if block["type"] == "text")
        if said:
            self.last_reply = said
        for block in blocks:
            self._line(
                "assistant",
                {"id": message_id, "type": "message", "role": "assistant", "model": "claude", "content": [block]},
                requestId=f"req_{message_id}",
            )

    def tool_result(self, tool_use_id: str, output: str) -> None:
        self._line(
            "user",
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use_id, "content": output}]},
            toolUseResult={"stdout": output},
        )

    def meta(self, text: str) -> None:
        self._line("user", {"role": "user", "content": text}, isMeta=True)

    def sidechain(self, text: str) -> None:
        self._count += 1
        with self.path.open("a", encoding="utf-8") as file:
            line = {"type": "user", "isSidechain": True, "message": {"role": "user", "content": text}}
            file.write(json.dumps(line) + "\n")

    def raw(self, text: str) -> None:
        with self.path.open("a", encoding="utf-8") as file:
            file.write(text + "\n")

    def prompt_input(self, prompt: str) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "transcript_path": str(self.path),
            "cwd": self.cwd,
            "permission_mode": "default",
            "hook_event_name": "UserPromptSubmit",
            "prompt": prompt,
        }

    def start_input(self, source: str = "startup") -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "transcript_path": str(self.path),
            "cwd": self.cwd,
            "hook_event_name": "SessionStart",
            "source": source,
        }

    def stop_input(
        self, stop_hook_active: bool = False, last_message: str | None = None, sends_last_message: bool = True
    ) -> dict[str, Any]:
        """The Stop hook's input; `last_assistant_message` is the newest reply unless told
        otherwise (Claude Code before 2.1 sends none: `sends_last_message=False`)."""
        event: dict[str, Any] = {
            "session_id": self.session_id,
            "transcript_path": str(self.path),
            "cwd": self.cwd,
            "permission_mode": "default",
            "hook_event_name": "Stop",
            "stop_hook_active": stop_hook_active,
        }
        if sends_last_message:
            event["last_assistant_message"] = last_message if last_message is not None else self.last_reply
        return event


def text(words: str) -> dict[str, Any]:
    return {"type": "text", "text": words}


def thinking(words: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": words, "signature": "sig"}


def tool_use(tool_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": arguments}


def coding_session(transcript: Transcript) -> None:
    """Two turns of a realistic coding session: a command the person ran, a question answered
    after reading a file (text, thinking, a tool call and its result), and a second question
    answered directly; plus a sub-agent's line and a line Claude Code could not finish writing."""
    transcript.meta("Caveat: The messages below were generated by the user while running local commands.")
    transcript.prompt("<command-name>/clear</command-name>\n<command-message>clear</command-message>")
    transcript.prompt("<local-command-stdout></local-command-stdout>")
    transcript.prompt("Why does the parser drop the last line of the CSV? We use Polars here, never pandas.")
    transcript.reply(thinking("The user wants the bug found."), text("Let me look at the parser."), message_id="m1")
    transcript.reply(tool_use("toolu_1", "Read", file_path="/work/app/parser.py"), message_id="m1")
    transcript.tool_result("toolu_1", "def parse(text):\n    return text.split('\\n')[:-1]")
    transcript.sidechain("a sub-agent's own prompt that is not the user's")
    transcript.reply(
        text("The slice `[:-1]` drops the last line when the file has no trailing newline."),
        text("Use `splitlines()` instead."),
        message_id="m2",
    )
    transcript.prompt("Thanks. Remember that our CI runs on Python 3.11.", as_blocks=True)
    transcript.reply(text("Noted: CI runs on Python 3.11."), message_id="m3")
    transcript.raw('{"type": "assistant", "message": {"content": [')
