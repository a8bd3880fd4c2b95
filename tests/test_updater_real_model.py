"""The updater against a real model: SmolLM2-135M-Instruct behind llama.cpp's OpenAI-compatible
server (tests/llama_server.py), driven over the real stdio transport by flush_memory.

A 135M-parameter model says odd things, so nothing here depends on what it extracts. What must
hold whatever it says: the request asked for the schema and capped the reply, the call finished in
time, and the reply was applied by the rules or cleanly refused, leaving only valid memory and every
exchange either analysed or set aside with a reason. Slow tier: each update takes 10-40 s here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import pytest
from llama_server import LlamaServer, llama_server
from scripted_llm import ScriptedLLM, exchanges_of
from stdio_helpers import add, connect, ok, run, write_config

from memory_mcp.extraction.reply_parsing import reply_schema
from memory_mcp.models import FactCategory, MemoryDocument

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

OUTPUT_CAP = 1500
CONVERSATION = [
    ("I'm Dana, I work as a data engineer at a bakery chain, mostly Python and Airflow.", "Nice to meet you, Dana!"),
    ("No, that's wrong: I use Dagster now, not Airflow. We migrated last spring.", "Sorry, noted: Dagster."),
    ("我周末喜欢去山里徒步。", "听起来很棒！"),
]


@pytest.fixture(scope="module")
def smollm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    with llama_server(log_dir=tmp_path_factory.mktemp("llama")) as server:
        yield server


@pytest.fixture
def recorded(smollm: LlamaServer) -> Iterator[ScriptedLLM]:
    """Every request the product sends to the real model, recorded on its way through."""
    proxy = ScriptedLLM(upstream=smollm.base_url).start()
    yield proxy
    proxy.stop()


def test_a_real_small_model_updates_memory_or_is_cleanly_refused(
    smollm: LlamaServer, recorded: ScriptedLLM, home: Path, tmp_path: Path, errlog: TextIO
) -> None:
    config = write_config(
        tmp_path / "config.json",
        {
            "data_storage_path": str(home),
            "openai_base_url": recorded.base_url,
            "llm_model": smollm.model,
            "memory": {
                "debounce_seconds": 300,  # only the flush below updates
                "llm_timeout_seconds": 300,
                "llm_max_attempts": 1,
                "llm_max_output_tokens": OUTPUT_CAP,
                "max_batch_attempts": 1,  # an unusable reply sets its exchanges aside at once
            },
        },
    )

    async def body() -> tuple[dict[str, Any], dict[str, Any]]:
        async with connect(config=config, errlog=errlog) as client:
            for said, answered in CONVERSATION:
                await add(client, said, answered, user_id="dana")
            flushed = ok(await client.call_tool("flush_memory", {"user_id": "dana"}))
            return flushed, ok(await client.call_tool("memory_status", {}))

    flushed, status = run(body, timeout=800)

    # The requests asked for the schema and capped the reply.
    assert recorded.requests, smollm.log_tail()
    for request in recorded.requests:
        assert request["max_tokens"] == OUTPUT_CAP
        assert request["response_format"]["type"] == "json_schema"
        assert request["response_format"]["json_schema"]["schema"] == reply_schema(5)
    sent = [exchange["user"] for request in recorded.requests for exchange in exchanges_of(request)]
    assert set(sent) == {said for said, _ in CONVERSATION}
    # In time: no attempt ran into the timeout.
    assert not any("too slow" in error for error in flushed["errors"]), flushed
    # Every exchange analysed, or set aside with its reason; nothing left hanging.
    assert flushed["pending_pages"] == 0, flushed
    stored = home / "users" / "dana" / "memory.json"
    document = MemoryDocument.model_validate(json.loads(stored.read_text(encoding="utf-8")))
    aside = document.analysis.setAside
    assert sum(len(batch.pageIds) for batch in aside) == flushed["set_aside_pages"]
    assert all(batch.reason and batch.at for batch in aside)
    assert flushed["pages_analysed"] + flushed["set_aside_pages"] == len(CONVERSATION)
    # Nothing but valid memory: each fact passed the rules.
    categories = set(FactCategory.__args__)  # type: ignore[attr-defined]
    for fact in document.facts:
        assert fact.content.strip() and fact.category in categories
        assert fact.confidence >= 0.7 and fact.id.startswith("fact_")
    [user] = status["users"]
    assert (user["pending_pages"], user["set_aside_pages"]) == (0, flushed["set_aside_pages"])
    print(
        f"\nSmolLM2-135M: {len(recorded.requests)} calls, finish reasons {recorded.finish_reasons}; "
        f"analysed {flushed['pages_analysed']}, set aside {flushed['set_aside_pages']}, "
        f"facts added {flushed['facts_added']}, sections {flushed['sections_updated']}, errors {flushed['errors']}"
    )
