"""Nothing secret is kept: secrets typed or pasted are replaced by a typed placeholder before
anything is stored, indexed, embedded, exported or sent to the LLM, and <private> spans are
dropped, on every way in (add_memory, host facts and profile, add_fact, update_fact, imports, the
Claude Code Stop hook).

The labelled set (tests/data/redaction/labelled.json) holds real-shaped secrets (random values
with the providers' prefixes and lengths) and look-alikes that must be kept as they are: commit
SHAs, UUIDs, content hashes, base64 images, version strings, code that names a secret."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from core_calls import add, flush
from scripted_llm import ScriptedLLM
from stdio_helpers import add as add_over_stdio
from stdio_helpers import connect, recall, run

from memory_mcp.base.settings import Settings
from memory_mcp.memory.redaction import redact
from memory_mcp.models import AddFactRequest, ExportRequest, ImportRequest, RetrieveMemoryRequest, UpdateFactRequest
from memory_mcp.service.memory_service import MemoryService

LABELLED = json.loads((Path(__file__).parent / "data" / "redaction" / "labelled.json").read_text(encoding="utf-8"))
SECRETS: list[dict[str, str]] = LABELLED["secrets"]
KEEP: list[str] = LABELLED["keep"]
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
OPENAI_KEY = "sk-proj-" + "Ab3" * 16 + "T3BlbkFJ" + "Zy9" * 16


def stored_bytes(root: Path) -> bytes:
    return b"".join(path.read_bytes() for path in root.rglob("*") if path.is_file())


@pytest.mark.parametrize("case", SECRETS, ids=[case["label"] for case in SECRETS])
def test_a_real_shaped_secret_is_replaced_by_a_typed_placeholder(case: dict[str, str]) -> None:
    text = case["before"] + case["secret"] + case["after"]
    redacted = redact(text)
    secret = case["secret"]
    assert secret not in redacted
    # Not even a part of it survives (a detector that reports part of a token leaves the rest).
    assert not [secret[n : n + 10] for n in range(0, len(secret) - 10, 5) if secret[n : n + 10] in redacted]
    assert "[redacted: " in redacted
    first_line = case["before"].split("\n")[0]
    assert redacted.startswith(first_line[: first_line.find("=") + 1] if "=" in first_line else first_line[:6])


@pytest.mark.parametrize("text", KEEP)
def test_a_look_alike_is_kept_as_it_is(text: str) -> None:
    assert redact(text) == text


def test_private_spans_are_dropped_whole_and_an_unclosed_one_to_the_end() -> None:
    assert redact("a <private>my diary\nsecond line</private> b") == "a  b"
    assert redact("keep <PRIVATE>x</Private> this") == "keep  this"
    assert redact("before <private>everything after\nis mine") == "before "


def test_every_way_in_stores_no_secret_and_the_llm_is_never_sent_one(make_service: Any, llm: ScriptedLLM) -> None:
    service: MemoryService = make_service()
    add(
        service,
        f"my AWS_SECRET_ACCESS_KEY={AWS_SECRET} <private>salary 90k</private>",
        "Do not paste keys here.",
        user_id="alice",
        meta_data={"shell": f"export OPENAI_API_KEY={OPENAI_KEY}"},
        facts=[{"content": "db password is hunter2x", "category": "context", "confidence": 0.9}],
        profile={"workContext": f"Runs billing; deploy key {OPENAI_KEY}"},
    )
    fact = service.add_fact(AddFactRequest.build(user_id="alice", content=f"Their AWS key is {AWS_SECRET}"))
    service.update_fact(
        UpdateFactRequest.build(user_id="alice", fact_id=fact.fact.id, content="GITHUB_TOKEN=ghp_" + "x1Y2" * 9)
    )
    exported = service.export_memory(ExportRequest.build(user_id="alice")).model_dump(mode="json")
    exported["pages"][0]["user_input"] += f" and the AWS key again: {AWS_SECRET}"
    exported["pages"][0]["page_id"] = "page_imported"
    service.import_memory(ImportRequest.build(user_id="bob", data=exported))
    add(service, f"the AWS key is {AWS_SECRET}, and OPENAI_API_KEY={OPENAI_KEY}", user_id="alice")  # analysed
    flush(service, user_id="alice")

    held = stored_bytes(service.settings.data_storage_path)
    for secret in (AWS_SECRET, OPENAI_KEY, "hunter2x", "salary 90k", "x1Y2x1Y2"):
        assert secret.encode() not in held, secret
    assert b"[redacted: aws secret key]" in held and b"[redacted: password]" in held
    sent = json.dumps(llm.requests)
    assert llm.requests and AWS_SECRET not in sent and OPENAI_KEY not in sent and "salary" not in sent
    found = service.retrieve_memory(RetrieveMemoryRequest.build(user_id="bob", query="AWS key"))
    assert AWS_SECRET not in found.model_dump_json()


def test_with_redaction_off_text_is_stored_as_given(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir, memory={"redaction": False}))
    add(service, f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}", user_id="alice")
    assert AWS_SECRET.encode() in stored_bytes(data_dir)


@pytest.mark.integration
def test_an_add_over_stdio_keeps_no_secret_and_answers_without_it(home: Path) -> None:
    async def body() -> dict[str, Any]:
        async with connect(home) as client:
            await add_over_stdio(client, f"deploy with STRIPE_SECRET_KEY=sk_live_{'4eC39HqLyjWDarjt' * 2}", "ok")
            return await recall(client, "stripe deploy key")

    recalled = run(body, timeout=60)
    assert "sk_live_" not in json.dumps(recalled) and "[redacted: " in recalled["context"]
    assert b"sk_live_" not in stored_bytes(home)
