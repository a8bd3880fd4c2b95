#!/usr/bin/env python
"""LongMemEval retrieval recall: how often retrieve_memory ranks the sessions that hold the answer.

Protocol (../shared/data/longmemeval/README.md, LongMemEval_S dev split: 100 questions):
  ingest     one user per question. Each haystack session's turns are stored with add_memory through
             the real MemoryService as exchanges: a user turn with the assistant turn after it (a turn
             with no partner is stored alone), timestamp = the session's date, thread_id = the
             session's id, meta_data = {"session": id, "answer": true if either turn has has_answer}.
  query      each question asked once, retrieve_memory(query=question, max_results=50), as of the
             question's date (the clock recall reads is set to it, as when the user asked). Sessions
             are ranked by the first appearance of one of their exchanges in retrieved_pages.
  short-term the service hands back the newest `short_term_capacity` exchanges unranked; the bench
             sets it to 1 and counts evidence sitting there (never ranked).
  skipped    abstention questions (ids ending in _abs: no evidence) are not scored.

Metrics, per question type and overall: session recall_any@{1,3,5,10} (an evidence session among
the first k), session recall_all@{5,10} (every evidence session among the first k), turn
recall_any@{1,5,10} (an exchange marked answer among the first k pages); ingest time and retrieve
latency (warm: the user's index loaded first, untimed). Five folds of the questions (question i in fold
i mod 5) show how much the overall figure moves between subsets: a parameter is chosen on four
folds and checked on the fifth, never on the overall score alone.

Usage:  .venv/bin/python bench/longmemeval_recall.py [--data PATH] [--limit N | --every K [--start N] | --ids A,B]
                                                     [--json] [--settings-json '{...}'] [--data-dir DIR]
With local vectors: --settings-json '{"embeddings": {"backend": "local"}}' --data-dir DIR. The
vectors of ~250 long exchanges a question take 6-10 minutes on two cores (10-15 hours for all);
stopped, the same command goes on where it was. --every 5 scores a fifth of the questions spread
over all question types (the list is ordered by type, so --limit would score the first types only);
--start 2 with it scores another fifth.
The data set is read in place; nothing from it is written into this repository (pages go to a
temporary directory deleted afterwards, or to --data-dir, outside it). Always exits 0: it is a report.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from bench.locomo_recall import percentile
from bench.result_files import add_results_option, markdown_table, write

DEFAULT_DATA = PROJECT_ROOT.parent / "shared" / "data" / "longmemeval" / "longmemeval-s-dev.json.gz"
TYPES = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "knowledge-update",
    "temporal-reasoning",
)
SESSION_KS = (1, 3, 5, 10)
ALL_KS = (5, 10)
TURN_KS = (1, 5, 10)
MAX_RESULTS = 50
INGESTED = "longmemeval-ingested.txt"  # in --data-dir: the users whose haystack is stored whole
SHORT_TERM_CAPACITY = 1
FOLDS = 5
TARGETS = {"words": 0.97, "vectors": 0.985}  # session recall_any@5
DATE_FORMAT = "%Y/%m/%d (%a) %H:%M"


# --- data set -------------------------------------------------------------------------------


@dataclass
class Exchange:
    user_input: str
    agent_response: str
    timestamp: str  # "YYYY-MM-DD HH:MM:SS"
    session: str
    answer: bool


@dataclass
class Question:
    question_id: str
    question_type: str
    question: str
    asked_at: datetime
    evidence_sessions: set[str]
    exchanges: list[Exchange]

    @property
    def user(self) -> str:
        return "q" + "".join(char if char.isalnum() else "-" for char in self.question_id)


def dated(raw: str) -> datetime:
    return datetime.strptime(raw.strip(), DATE_FORMAT).replace(tzinfo=UTC)


def paired(turns: Sequence[dict[str, Any]]) -> Iterator[tuple[str, str, bool]]:
    """(user_input, agent_response, holds the answer) for each user turn with the assistant turn
    after it; a turn with no partner goes alone."""
    index = 0
    while index < len(turns):
        turn = turns[index]
        following = turns[index + 1] if index + 1 < len(turns) else None
        if turn["role"] == "user" and following is not None and following["role"] == "assistant":
            yield turn["content"], following["content"], bool(turn.get("has_answer") or following.get("has_answer"))
            index += 2
        elif turn["role"] == "user":
            yield turn["content"], "", bool(turn.get("has_answer"))
            index += 1
        else:
            yield "", turn["content"], bool(turn.get("has_answer"))
            index += 1


def load_questions(
    path: Path, limit: int | None = None, every: int = 1, ids: Sequence[str] = (), start: int = 0
) -> list[Question]:
    raw = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
    questions = []
    for item in raw:
        if item["question_id"].endswith("_abs"):
            continue
        exchanges = []
        for session_id, date, turns in zip(
            item["haystack_session_ids"], item["haystack_dates"], item["haystack_sessions"], strict=True
        ):
            timestamp = dated(date).strftime("%Y-%m-%d %H:%M:%S")
            exchanges += [
                Exchange(said, answered, timestamp, session_id, answer) for said, answered, answer in paired(turns)
            ]
        questions.append(
            Question(
                item["question_id"],
                item["question_type"],
                item["question"],
                dated(item["question_date"]),
                set(item["answer_session_ids"]),
                exchanges,
            )
        )
    questions = [question for question in questions if question.question_id in ids] if ids else questions[start::every]
    return questions[:limit] if limit else questions


# --- the run --------------------------------------------------------------------------------


@dataclass
class Ranked:
    question_type: str
    fold: int
    evidence_sessions: set[str]
    sessions: list[str]  # ranked, each once
    answers: list[bool]  # per ranked page: holds the answer
    evidence_in_short_term: bool


def ingest(service: Any, questions: Sequence[Question]) -> tuple[float, int, float]:
    """Store every question's haystack, one user each; (seconds, exchanges refused, seconds of
    vectors when they are on)."""
    from memory_mcp.base.errors import MemoryServiceError
    from memory_mcp.models import AddMemoryRequest

    refused = 0
    started = time.perf_counter()
    done_file = Path(service.settings.data_storage_path) / INGESTED
    done = set(done_file.read_text().split()) if done_file.exists() else set()
    for question in questions:
        if question.user in done:  # stored by an earlier run over the same --data-dir
            continue
        for exchange in question.exchanges:
            try:
                service.add_memory(
                    AddMemoryRequest.build(
                        user_input=exchange.user_input,
                        agent_response=exchange.agent_response,
                        timestamp=exchange.timestamp,
                        thread_id=exchange.session,
                        meta_data={"session": exchange.session, "answer": exchange.answer},
                        user_id=question.user,
                    )
                )
            except (MemoryServiceError, ValueError):
                refused += 1
        with done_file.open("a") as marks:
            marks.write(question.user + "\n")
    stored = time.perf_counter()
    if service.settings.embeddings.backend != "none":
        for question in questions:
            service.embed_missing(question.user, None)
    return stored - started, refused, time.perf_counter() - stored


def ask(service: Any, questions: Sequence[Question]) -> tuple[list[Ranked], list[float]]:
    """Each question once, as of its date: what was ranked, and each retrieve's milliseconds."""
    from memory_mcp.models import RetrieveMemoryRequest
    from memory_mcp.recall import scope_recall

    ranked, latencies_ms = [], []
    for position, question in enumerate(questions):
        with mock.patch.object(scope_recall, "now", lambda question=question: question.asked_at):
            service.warm_up(question.user)  # loads the index; a warm-up query would count a visit
            request = RetrieveMemoryRequest.build(
                query=question.question, max_results=MAX_RESULTS, user_id=question.user
            )
            started = time.perf_counter()
            answer = service.retrieve_memory(request)
            latencies_ms.append((time.perf_counter() - started) * 1000)
        metas = [page.meta_data or {} for page in answer.retrieved_pages]
        sessions = list(dict.fromkeys(str(meta.get("session")) for meta in metas))
        short_term = {str((page.meta_data or {}).get("session")) for page in answer.short_term_memory}
        ranked.append(
            Ranked(
                question.question_type,
                position % FOLDS,
                question.evidence_sessions,
                sessions,
                [bool(meta.get("answer")) for meta in metas],
                bool(short_term & question.evidence_sessions),
            )
        )
    return ranked, latencies_ms


def score(items: Sequence[Ranked]) -> dict[str, float]:
    n = max(1, len(items))
    out: dict[str, float] = {"questions": len(items)}
    for k in SESSION_KS:
        out[f"any@{k}"] = sum(bool(set(r.sessions[:k]) & r.evidence_sessions) for r in items) / n
    for k in ALL_KS:
        out[f"all@{k}"] = sum(r.evidence_sessions <= set(r.sessions[:k]) for r in items) / n
    for k in TURN_KS:
        out[f"turn_any@{k}"] = sum(any(r.answers[:k]) for r in items) / n
    return out


def run(questions: Sequence[Question], extra_settings: dict[str, Any], kept_in: Path | None = None) -> dict[str, Any]:
    """Ingest, ask and score; the memory in a temporary folder, or in `kept_in`, where a run that
    was stopped goes on (the vectors of 22,000 long exchanges take hours on two cores)."""
    from memory_mcp.base.settings import Settings
    from memory_mcp.service.memory_service import MemoryService

    with contextlib.ExitStack() as cleanup:
        data_dir = (
            str(kept_in) if kept_in else cleanup.enter_context(tempfile.TemporaryDirectory(prefix="longmemeval-"))
        )
        fields = {"short_term_capacity": SHORT_TERM_CAPACITY, **extra_settings, "data_storage_path": data_dir}
        service = MemoryService(Settings.model_validate(fields))  # not started: no background work
        try:
            ingest_s, refused, embed_s = ingest(service, questions)
            ranked, latencies_ms = ask(service, questions)
        finally:
            service.close()
    by_type = {kind: score([r for r in ranked if r.question_type == kind]) for kind in TYPES}
    return {
        "settings": {"short_term_capacity": SHORT_TERM_CAPACITY, **extra_settings},
        "questions": len(questions),
        "exchanges": sum(len(q.exchanges) for q in questions),
        "refused": refused,
        "ingest_seconds": ingest_s,
        "embedding_seconds": embed_s,
        "evidence_in_short_term": sum(r.evidence_in_short_term for r in ranked),
        "overall": score(ranked),
        "by_type": {kind: block for kind, block in by_type.items() if block["questions"]},
        "folds": [score([r for r in ranked if r.fold == fold]) for fold in range(FOLDS)],
        "latency_ms": {
            "p50": statistics.median(latencies_ms) if latencies_ms else float("nan"),
            "p95": percentile(latencies_ms, 95),
        },
    }


# --- output ---------------------------------------------------------------------------------

COLUMNS = [f"any@{k}" for k in SESSION_KS] + [f"all@{k}" for k in ALL_KS] + [f"turn_any@{k}" for k in TURN_KS]


def table(report: dict[str, Any]) -> str:
    rows = [
        (kind, int(block["questions"]), *(f"{block[c]:.3f}" for c in COLUMNS))
        for kind, block in report["by_type"].items()
    ]
    overall = report["overall"]
    rows.append(("**overall**", int(overall["questions"]), *(f"**{overall[c]:.3f}**" for c in COLUMNS)))
    headers = [
        "question type",
        "questions",
        *(f"session {c}" for c in COLUMNS[:6]),
        *(f"turn {c[5:]}" for c in COLUMNS[6:]),
    ]
    return markdown_table(headers, rows)


def summary(report: dict[str, Any]) -> str:
    folds = ", ".join(f"{fold['any@5']:.3f}" if fold["questions"] else "-" for fold in report["folds"])
    vectors = report["settings"].get("embeddings", {}).get("backend", "none") != "none"
    target = TARGETS["vectors" if vectors else "words"]
    reached = report["overall"]["any@5"]
    latency = report["latency_ms"]
    embedding = f"; vectors computed in {report['embedding_seconds']:.0f} s" if vectors else ""
    return (
        f"Session recall_any@5 per fold of the questions: {folds} (target {target}: "
        f"{'not judged on a sample' if report.get('sample') else 'met' if reached >= target else 'not met'}). "
        f"{report['exchanges']:,} exchanges stored in "
        f"{report['ingest_seconds']:.0f} s ({report['refused']} refused){embedding}; retrieve_memory p50 "
        f"{latency['p50']:.1f} ms, p95 {latency['p95']:.1f} ms (warm); evidence in the unranked newest "
        f"exchange: {report['evidence_in_short_term']} questions."
    )


DOCUMENTED = {"longmemeval_recall": {}, "longmemeval_recall-embeddings": {"embeddings": {"backend": "local"}}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help=f"LongMemEval JSON(.gz) (default {DEFAULT_DATA})"
    )
    parser.add_argument("--limit", type=int, help="use only the first N scored questions")
    parser.add_argument(
        "--every", type=int, default=1, help="use every K-th scored question: a sample over all question types"
    )
    parser.add_argument(
        "--start", type=int, default=0, help="with --every K, begin at scored question N (from 0): another sample"
    )
    parser.add_argument("--ids", default="", help="use only these question ids (comma-separated)")
    parser.add_argument("--json", action="store_true", help="also print the results as one JSON object")
    parser.add_argument("--settings-json", default="{}", help="extra Settings fields as a JSON object")
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="keep the memory here; run again with the same options to go on where a run stopped "
        "(ingest and vector times then count only what that run did)",
    )
    add_results_option(parser)
    args = parser.parse_args(argv)
    try:
        extra = json.loads(args.settings_json)
        if not isinstance(extra, dict):
            raise ValueError("--settings-json must be a JSON object")
        ids = [part for part in args.ids.split(",") if part]
        report = run(load_questions(args.data, args.limit, args.every, ids, args.start), extra, args.data_dir)
        report["sample"] = bool(args.limit or args.every != 1 or args.start or ids)
    except Exception as exc:  # a report, not a test: say what went wrong and still exit 0
        print(f"longmemeval_recall: could not run: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 0
    words = "words and local vectors fused" if extra.get("embeddings") else "words alone"
    print(f"LongMemEval_S dev split, {report['questions']} questions with evidence, {words}")
    print(f"settings: {json.dumps(report['settings'], sort_keys=True)}\n")
    print(table(report) + "\n\n" + summary(report))
    names = [name for name, settings in DOCUMENTED.items() if settings == extra]
    if (
        not args.no_results
        and names
        and not args.limit
        and args.every == 1
        and not args.start
        and not args.ids
        and args.data == DEFAULT_DATA
    ):
        write(
            names[0],
            f"LongMemEval_S dev split: how often retrieve_memory ranks the sessions that hold the answer, {words}",
            table(report) + "\n\n" + summary(report),
            "One user per question, each haystack session stored as exchanges (a user turn with the assistant "
            "turn after it) with its date and a thread per session; one retrieve_memory(max_results=50) per "
            "question, as of its date; sessions ranked by their first exchange in retrieved_pages. Abstention "
            "questions are not scored. Published session recall_any@5 (no LLM, all non-abstention questions of "
            "LongMemEval_S): plain BM25 0.916; MemPalace raw embeddings 0.966, hybrid 0.984. The data set is read "
            "in place from ../shared/data/longmemeval (MIT); nothing of it is kept here.",
        )
    if args.json:
        print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
