"""Cursor's, Windsurf's and Cline's hooks through the real `memory-mcp hook` command, with payloads
in the shapes their documentation gives (none of the three runs here): the prompt kept until the
event that carries the reply stores the exchange, context answered in each host's own shape where
the host reads any, and each payload recognised without `--host`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from command_line import Outcome, cli
from hook_calls import hook, stored

from memory_mcp.hosts.registry import adapter_for

pytestmark = pytest.mark.integration

TOLD = "We deploy the webshop with `make ship`, never by hand."
REPLY = "Noted: deploys go through make ship."
SECRET = "ghp_" + "x1Y2" * 9  # a GitHub token, as redaction knows one


def cursor(event: str, conversation: str, shop: Path, **fields: Any) -> dict[str, Any]:
    """A Cursor hook's stdin: the common fields, and the event's own."""
    return {
        "conversation_id": conversation,
        "generation_id": fields.pop("generation_id", f"{conversation}-gen-1"),
        "model": "claude-4.5-sonnet",
        "hook_event_name": event,
        "cursor_version": "2.1.7",
        "workspace_roots": [str(shop)],
        "user_email": "dev@example.com",
        **fields,
    }


def windsurf(action: str, trajectory: str, execution: str, **info: str) -> dict[str, Any]:
    return {
        "agent_action_name": action,
        "trajectory_id": trajectory,
        "execution_id": execution,
        "timestamp": "2026-11-27T12:00:00.000Z",
        "model_name": "SWE-1.5",
        "tool_info": info,
    }


def cline(hook_name: str, task: str, shop: Path, timestamp: str, **event: Any) -> dict[str, Any]:
    return {
        "clineVersion": "3.38.2",
        "hookName": hook_name,
        "timestamp": timestamp,
        "taskId": task,
        "workspaceRoots": [str(shop)],
        "userId": "u-1",
        "model": {"provider": "anthropic", "slug": "claude-sonnet-4-5"},
        **event,
    }


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    folder = tmp_path / "code" / "webshop"
    folder.mkdir(parents=True)
    return folder


def test_cursor_pairs_each_prompt_with_its_response_and_starts_sessions_with_memory(home: Path, shop: Path) -> None:
    asked = cursor("beforeSubmitPrompt", "conv-1", shop, prompt=TOLD, attachments=[])
    assert hook(home, "prompt", asked, "--host", "cursor") == Outcome(0, "", ""), "Cursor's prompt hook cannot inject"
    answered = cursor("afterAgentResponse", "conv-1", shop, text=REPLY)
    for _ in range(2):
        assert hook(home, "stop", answered, "--host", "cursor") == Outcome(0, "", "")
    assert stored(home) == [(TOLD, REPLY, "conv-1")], "stored once, in the conversation's thread"

    lone = cursor("afterAgentResponse", "conv-2", shop, generation_id="conv-2-gen-1", text="A reply with no prompt")
    assert hook(home, "stop", lone).code == 0 and len(stored(home)) == 1, "no kept prompt: nothing half-stored"

    start = hook(home, "session-start", cursor("sessionStart", "conv-3", shop, session_id="conv-3"))
    assert (start.code, start.stderr) == (0, "")
    answer = json.loads(start.stdout)
    assert list(answer) == ["additional_context"] and TOLD in answer["additional_context"]
    assert answer["additional_context"].startswith("<memory>")


def test_a_kept_prompt_holds_no_secret_and_is_gone_once_stored_or_forgotten(home: Path, shop: Path) -> None:
    prompt = f"Use the key {SECRET} for the staging deploy"
    hook(home, "prompt", cursor("beforeSubmitPrompt", "conv-1", shop, prompt=prompt))
    kept = [path for path in home.rglob("*.prompt.json")]
    assert len(kept) == 1 and SECRET not in kept[0].read_text(encoding="utf-8")
    hook(home, "stop", cursor("afterAgentResponse", "conv-1", shop, text=REPLY))
    [(told, _, _)] = stored(home)
    assert SECRET not in told and "staging deploy" in told
    assert list(home.rglob("*.prompt.json")) == [], "taken by the stop that stored it"

    hook(home, "prompt", cursor("beforeSubmitPrompt", "conv-2", shop, prompt="Another question"))
    assert len(list(home.rglob("*.prompt.json"))) == 1
    assert cli(home, "forget", "default", "--yes").code == 0
    assert list(home.rglob("*.prompt.json")) == [], "forget leaves no prompt behind"


def test_windsurf_stores_each_turn_and_never_prints(home: Path, shop: Path) -> None:
    asked = windsurf("pre_user_prompt", "traj-1", "exec-1", user_prompt=TOLD)
    assert hook(home, "prompt", asked) == Outcome(0, "", "")
    response = f"### Planner Response\n\n{REPLY}"
    answered = windsurf("post_cascade_response", "traj-1", "exec-1", response=response)
    for _ in range(2):
        assert hook(home, "stop", answered) == Outcome(0, "", "")
    assert stored(home) == [(TOLD, response, "traj-1")]
    later = windsurf("pre_user_prompt", "traj-2", "exec-1", user_prompt="How do we deploy?")
    assert hook(home, "prompt", later, "--host", "windsurf") == Outcome(0, "", ""), "Cascade reads no context"


def test_cline_gives_prompts_context_and_stores_the_task_result(home: Path, shop: Path) -> None:
    empty = {"cancel": False, "contextModification": "", "errorMessage": ""}
    first = cline("UserPromptSubmit", "task-1", shop, "1795781000000", userPromptSubmit={"prompt": TOLD})
    assert hook(home, "prompt", first).json() == empty, "nothing remembered yet: an answer all the same"
    complete = {"taskMetadata": {"taskId": "task-1", "ulid": "", "initialTask": TOLD, "result": REPLY}}
    done = cline("TaskComplete", "task-1", shop, "1795781009000", taskComplete=complete)
    assert hook(home, "stop", done).json() == {**empty}
    hook(home, "stop", done)
    assert stored(home) == [(TOLD, REPLY, "task-1")]

    asked = cline("UserPromptSubmit", "task-2", shop, "1795782000000", userPromptSubmit={"prompt": "How do we deploy?"})
    answer = hook(home, "prompt", asked, "--host", "cline").json()
    assert answer["cancel"] is False and TOLD in answer["contextModification"]

    unprompted = {"taskMetadata": {"taskId": "task-3", "initialTask": "Bump the version", "result": "Bumped to 2.0."}}
    hook(home, "stop", cline("TaskComplete", "task-3", shop, "1795783000000", taskComplete=unprompted))
    assert stored(home)[-1] == ("Bump the version", "Bumped to 2.0.", "task-3"), "the task's first prompt stands in"


@pytest.mark.parametrize(
    ("payload", "environ", "host"),
    [
        ({"conversation_id": "c", "hook_event_name": "afterAgentResponse", "cursor_version": "2.1.7"}, {}, "cursor"),
        ({"agent_action_name": "post_cascade_response", "trajectory_id": "t", "tool_info": {}}, {}, "windsurf"),
        ({"clineVersion": "3.38.2", "hookName": "TaskComplete", "taskId": "t"}, {}, "cline"),
        (
            {"sessionId": "s", "transcriptPath": "/x/events.jsonl"},
            {"COPILOT_CLI": "1", "COPILOT_HOOK_DIR": "/h"},
            "copilot",
        ),
        ({"hookEventName": "Stop", "sessionId": "s", "transcript_path": "/x"}, {}, "vscode"),
        (
            {"session_id": "s", "hook_event_name": "Stop", "transcript_path": "/x/s.jsonl"},
            {"COPILOT_CLI": "1"},
            "claude-code",
        ),
    ],
    ids=["cursor", "windsurf", "cline", "copilot", "vscode", "claude-code-started-by-copilot"],
)
def test_each_hosts_payload_is_recognised(payload: dict[str, Any], environ: dict[str, str], host: str) -> None:
    assert adapter_for(None, payload, environ).name == host
