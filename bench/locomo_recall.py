#!/usr/bin/env python
"""LoCoMo retrieval recall: how often retrieve_memory ranks the exchanges that hold the answer.

Protocol (../shared/data/locomo/README.md, dev split: 5 conversations):
  ingest     one user per conversation (user_id = sample_id). Each session's turns, in order, are
             paired as (user_input, agent_response) and stored with add_memory through the real
             MemoryService; a session with an odd number of turns stores its last turn with an
             empty agent_response. Each turn is prefixed with its speaker's name ("Caroline: ..."),
             since questions name people; image turns get " [shares a photo: <blip_caption>]".
             timestamp = the session's date_time, meta_data = {"dia_ids": [...], "session": N}.
  query      every question of category 1-4 (multi-hop, temporal, open-domain, single-hop) whose
             normalised evidence is non-empty is asked ONCE with max_results = max(--ks); recall@k
             is read off the first k of retrieved_pages (the ranked list), for every k.
  short-term the service hands back the newest `short_term_capacity` pages unranked as
             short_term_memory and ranks only older ones. The benchmark sets short_term_capacity=1
             and scores retrieved_pages only; how many gold ids sit in that last page is reported
             (they can never be recalled, so it should be ~0).
  evidence   entries holding several ids are split on ';' / spaces, "D:11:26" -> "D11:26",
             "D30:05" -> "D30:5", duplicates and ids absent from the conversation are dropped.

Metrics, per category and overall:
  turn recall@k (macro)  per question: gold ids found in the top k pages / gold ids; mean over
                         questions. The headline figure.
  turn recall@k (micro)  gold ids found over all questions / all gold ids.
  turn hit@k             questions with at least one gold id in the top k.
  session any@k          questions for which at least one of the top k pages comes from a session
                         holding one of the gold ids.
  latency                median and p95 of retrieve_memory wall time, warm (one untimed query per
                         user first, which builds that user's index).

Usage:  .venv/bin/python bench/locomo_recall.py [--data PATH] [--ks 1,5,10] [--json]
                                                [--limit-conversations N] [--settings-json '{...}']
The data set is CC BY-NC and is read in place; nothing from it is written into this repository
(pages go to a temporary directory that is deleted afterwards). Always exits 0: it is a report.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from bench.result_files import add_results_option, markdown_table, write

DEFAULT_DATA = PROJECT_ROOT.parent / "shared" / "data" / "locomo" / "locomo-dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
DATE_FORMAT = "%I:%M %p on %d %B, %Y"
SHORT_TERM_CAPACITY = 1
# Recall targets on the dev split, words alone and with vectors fused (any embeddings backend).
TARGETS = {"recall@5": 0.78, "recall@10": 0.85, "p50_ms": 20.0}
TARGETS_WITH_VECTORS = {**TARGETS, "recall@5": 0.82, "recall@10": 0.89}

_SESSION_KEY = re.compile(r"session_(\d+)")
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")


# --- data set -------------------------------------------------------------------------------


@dataclass
class Exchange:
    """One stored page: two consecutive turns of a session (or a lone last turn)."""

    user_input: str
    agent_response: str
    timestamp: str  # "YYYY-MM-DD HH:MM:SS"
    session: int
    dia_ids: list[str]


@dataclass
class Question:
    question: str
    category: int
    evidence: list[str]  # normalised, deduplicated, all present in the conversation


@dataclass
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    exchanges: list[Exchange] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    dropped_evidence: list[str] = field(default_factory=list)  # raw parts that named no turn
    skipped_questions: int = 0  # category 1-4 questions left with no evidence


def turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn.get('text', '')}".rstrip()
    caption = turn.get("blip_caption")
    if caption:
        text += f" [shares a photo: {caption}]"
    return text


def session_timestamp(raw: str) -> str:
    return datetime.strptime(raw.strip(), DATE_FORMAT).strftime("%Y-%m-%d %H:%M:%S")


def normalise_evidence(entries: Sequence[str], known: set[str]) -> tuple[list[str], list[str]]:
    """(normalised ids present in the conversation, raw parts dropped)."""
    kept: list[str] = []
    dropped: list[str] = []
    for entry in entries:
        for part in re.split(r"[;,\s]+", str(entry)):
            if not part:
                continue
            match = _DIA_ID.fullmatch(part)
            dia_id = f"D{int(match.group(1))}:{int(match.group(2))}" if match else None
            if dia_id is None or dia_id not in known:
                dropped.append(part)
            elif dia_id not in kept:
                kept.append(dia_id)
    return kept, dropped


def load_conversations(path: Path, limit: int | None = None) -> list[Conversation]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    conversations = []
    for sample in raw[:limit] if limit else raw:
        body = sample["conversation"]
        conversation = Conversation(sample["sample_id"], (body["speaker_a"], body["speaker_b"]))
        numbers = sorted(int(m.group(1)) for key in body if (m := _SESSION_KEY.fullmatch(key)))
        known: set[str] = set()
        for number in numbers:
            turns = body[f"session_{number}"]
            timestamp = session_timestamp(body[f"session_{number}_date_time"])
            for start in range(0, len(turns), 2):
                pair = turns[start : start + 2]
                conversation.exchanges.append(
                    Exchange(
                        user_input=turn_text(pair[0]),
                        agent_response=turn_text(pair[1]) if len(pair) > 1 else "",
                        timestamp=timestamp,
                        session=number,
                        dia_ids=[turn["dia_id"] for turn in pair],
                    )
                )
            known.update(turn["dia_id"] for turn in turns)
        for qa in sample["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            evidence, dropped = normalise_evidence(qa.get("evidence") or [], known)
            conversation.dropped_evidence.extend(dropped)
            if evidence:
                conversation.questions.append(Question(qa["question"], qa["category"], evidence))
            else:
                conversation.skipped_questions += 1
        conversations.append(conversation)
    return conversations


def session_of(dia_id: str) -> int:
    return int(dia_id[1:].split(":")[0])


# --- scoring --------------------------------------------------------------------------------


@dataclass
class Ranked:
    """One question's outcome: the dia_ids and session of each ranked page, best first."""

    category: int
    evidence: list[str]
    pages: list[tuple[list[str], int]]  # (dia_ids, session) per returned page


def score(results: Sequence[Ranked], ks: Sequence[int]) -> dict[str, Any]:
    """Per-category and overall metrics for a list of ranked outcomes."""

    def block(items: Sequence[Ranked]) -> dict[str, Any]:
        out: dict[str, Any] = {"questions": len(items), "gold_ids": sum(len(r.evidence) for r in items)}
        for k in ks:
            found_total = macro = hits = session_hits = 0.0
            for r in items:
                top = r.pages[:k]
                returned = {dia_id for dia_ids, _ in top for dia_id in dia_ids}
                found = sum(1 for dia_id in r.evidence if dia_id in returned)
                found_total += found
                macro += found / len(r.evidence)
                hits += found > 0
                gold_sessions = {session_of(dia_id) for dia_id in r.evidence}
                session_hits += any(session in gold_sessions for _, session in top)
            n = max(1, len(items))
            out[f"recall@{k}"] = macro / n
            out[f"micro_recall@{k}"] = found_total / max(1, out["gold_ids"])
            out[f"hit@{k}"] = hits / n
            out[f"session_any@{k}"] = session_hits / n
        return out

    report = {"overall": block(results)}
    for category in CATEGORIES:
        report[str(category)] = block([r for r in results if r.category == category])
    return report


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))]


# --- the run --------------------------------------------------------------------------------


def ingest(service: Any, conversations: Sequence[Conversation]) -> tuple[float, float]:
    """Store every conversation, one user each, and compute their embeddings when they are on;
    return the seconds each took."""
    from memory_mcp.models import AddMemoryRequest

    started = time.perf_counter()
    for conversation in conversations:
        for exchange in conversation.exchanges:
            service.add_memory(
                AddMemoryRequest.build(
                    user_input=exchange.user_input,
                    agent_response=exchange.agent_response,
                    timestamp=exchange.timestamp,
                    meta_data={"dia_ids": exchange.dia_ids, "session": exchange.session},
                    user_id=conversation.sample_id,
                )
            )
    stored = time.perf_counter()
    if service.settings.embeddings.backend != "none":
        for conversation in conversations:
            service.embed_missing(conversation.sample_id, None)
    return stored - started, time.perf_counter() - stored


def ask(
    service: Any, conversations: Sequence[Conversation], max_k: int
) -> tuple[list[list[Ranked]], list[float], list[dict[str, Any]]]:
    """Every question once, per conversation: what was ranked, each retrieve's milliseconds, and
    per-conversation counts."""
    from memory_mcp.models import RetrieveMemoryRequest

    results: list[list[Ranked]] = []
    latencies_ms: list[float] = []
    per_conversation = []
    for conversation in conversations:
        user = conversation.sample_id
        # Warm-up: builds this user's index and loads numpy; not timed, not scored.
        service.retrieve_memory(RetrieveMemoryRequest.build(query="hello", max_results=max_k, user_id=user))
        short_term = conversation.exchanges[-service.settings.short_term_capacity :]
        short_term_ids = {dia_id for exchange in short_term for dia_id in exchange.dia_ids}
        gold_in_short_term = 0
        ranked = []
        for question in conversation.questions:
            request = RetrieveMemoryRequest.build(query=question.question, max_results=max_k, user_id=user)
            started = time.perf_counter()
            answer = service.retrieve_memory(request)
            latencies_ms.append((time.perf_counter() - started) * 1000)
            metas = [page.meta_data or {} for page in answer.retrieved_pages[:max_k]]
            pages = [(list(meta.get("dia_ids", [])), int(meta.get("session", -1))) for meta in metas]
            ranked.append(Ranked(question.category, question.evidence, pages))
            gold_in_short_term += sum(1 for dia_id in question.evidence if dia_id in short_term_ids)
        results.append(ranked)
        per_conversation.append(
            {
                "sample_id": user,
                "pages": len(conversation.exchanges),
                "questions": len(conversation.questions),
                "skipped_no_evidence": conversation.skipped_questions,
                "dropped_evidence": conversation.dropped_evidence,
                "gold_ids_in_short_term": gold_in_short_term,
            }
        )
    return results, latencies_ms, per_conversation


def open_service(data_dir: str, extra_settings: dict[str, Any]) -> Any:
    from memory_mcp.base.settings import Settings
    from memory_mcp.service.memory_service import MemoryService

    fields = {"short_term_capacity": SHORT_TERM_CAPACITY, **extra_settings, "data_storage_path": data_dir}
    # Not started: no background work (an embedding runner would compute what ingest() computes).
    return MemoryService(Settings.model_validate(fields))


def run(conversations: Sequence[Conversation], ks: Sequence[int], extra_settings: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="locomo-recall-") as data_dir:
        service = open_service(data_dir, extra_settings)
        try:
            ingest_s, embed_s = ingest(service, conversations)
            results, latencies_ms, per_conversation = ask(service, conversations, max(ks))
        finally:
            service.close()
    return {
        "settings": {"short_term_capacity": SHORT_TERM_CAPACITY, **extra_settings},
        "ks": list(ks),
        "ingest_seconds": ingest_s,
        "embedding_seconds": embed_s,
        "conversations": per_conversation,
        "metrics": score([ranked for each in results for ranked in each], ks),
        "latency_ms": {
            "queries": len(latencies_ms),
            "p50": statistics.median(latencies_ms) if latencies_ms else float("nan"),
            "p95": percentile(latencies_ms, 95),
            "max": max(latencies_ms, default=float("nan")),
        },
    }


# --- output ---------------------------------------------------------------------------------


def print_report(report: dict[str, Any], data_path: Path) -> None:
    ks = report["ks"]
    settings = report["settings"]
    conversations = report["conversations"]
    ranking = (
        "lexical ranking"
        if report["settings"].get("embeddings", {}).get("backend", "none") == "none"
        else "lexical and vector ranking fused"
    )
    print(f"LoCoMo retrieval recall (memory-mcp retrieve_memory, {ranking})")
    print(f"  data: {data_path} ({len(conversations)} conversations, {sum(c['pages'] for c in conversations)} pages)")
    print("  pages: consecutive turns of a session paired, each turn prefixed with its speaker ('Name: text'),")
    print("         image turns + ' [shares a photo: <caption>]'; one user per conversation")
    print(f"  settings: {json.dumps(settings, sort_keys=True)}")
    print(
        f"  scoring: retrieved_pages[:k] only (ranked); short_term_capacity={settings['short_term_capacity']}, so the"
        f" newest {settings['short_term_capacity']} page(s) per user are never ranked"
    )
    in_short = sum(c["gold_ids_in_short_term"] for c in conversations)
    print(f"  gold ids sitting in the short-term (unranked) page(s): {in_short}")
    dropped = [f"{c['sample_id']}:{part}" for c in conversations for part in c["dropped_evidence"]]
    skipped = sum(c["skipped_no_evidence"] for c in conversations)
    print(f"  evidence dropped (names no turn): {', '.join(dropped) or 'none'}")
    print(f"  category 1-4 questions left with no evidence (not scored): {skipped}")
    embeddings = report["settings"].get("embeddings", {}).get("backend", "none")
    embedding = f", embedding ({embeddings}) {report['embedding_seconds']:.1f} s" if embeddings != "none" else ""
    print(
        f"  one retrieve per question, max_results={max(ks)}; ingest took {report['ingest_seconds']:.1f} s{embedding}"
    )
    print()

    metrics = report["metrics"]
    groups = [("recall", "recall macro"), ("micro_recall", "recall micro")]
    groups += [("hit", "hit (>=1 gold)"), ("session_any", "session any")]
    rows = [("overall", "overall")] + [(str(c), f"{c} {name}") for c, name in CATEGORIES.items()]
    header = f"{'category':<15} {'questions':>9} {'gold':>5}  " + "  ".join(
        " ".join(f"{'@' + str(k):>6}" for k in ks) for _ in groups
    )
    print(" " * 33 + "  ".join(f"{title[: 7 * len(ks) - 1]:<{7 * len(ks) - 1}}" for _, title in groups))
    print(header)
    print("-" * len(header))
    for key, label in rows:
        block = metrics[key]
        cells = "  ".join(" ".join(f"{block[f'{prefix}@{k}']:>6.3f}" for k in ks) for prefix, _ in groups)
        print(f"{label:<15} {block['questions']:>9} {block['gold_ids']:>5}  {cells}")
    print("  recall macro = turn recall@k averaged per question (headline); recall micro = over all gold ids;")
    print("  hit = questions with >=1 gold turn in the top k;")
    print("  session any = questions with >=1 top-k page from a session holding a gold turn")
    print()
    latency = report["latency_ms"]
    print(
        f"retrieve_memory latency (warm, {latency['queries']} queries): p50 {latency['p50']:.2f} ms,"
        f" p95 {latency['p95']:.2f} ms, max {latency['max']:.2f} ms"
    )
    overall = metrics["overall"]
    targets = TARGETS if embeddings == "none" else TARGETS_WITH_VECTORS
    checks = []
    for name, target in targets.items():
        if name in overall:
            value = overall[name]
            checks.append(f"{name} {value:.3f} (target >= {target:.2f}: {'met' if value >= target else 'NOT met'})")
    checks.append(
        f"p50 {latency['p50']:.2f} ms (target < {targets['p50_ms']:.0f} ms: "
        f"{'met' if latency['p50'] < targets['p50_ms'] else 'NOT met'})"
    )
    print("targets: " + "; ".join(checks))


# The configurations the documentation quotes, by result file: words alone, and local vectors fused.
DOCUMENTED = {"locomo_recall": {}, "locomo_recall-embeddings": {"embeddings": {"backend": "local"}}}


def write_results(report: dict[str, Any], extra: dict[str, Any], args: argparse.Namespace) -> None:
    names = [name for name, settings in DOCUMENTED.items() if settings == extra]
    if not names or args.limit_conversations or args.data != DEFAULT_DATA:
        print("result files hold the documented configurations only: bench/results/ left as it is")
        return
    ks = report["ks"]
    metrics = report["metrics"]
    # Both readings of "recalled": the share of a question's evidence turns among the first k
    # (recall), and whether any of them is (any: LongMemEval's recall_any, at turn level).
    columns = [f"recall@{k}" for k in ks] + [f"hit@{k}" for k in ks if k > 1]
    rows = [
        (CATEGORIES[int(key)] if key != "overall" else "**overall**", metrics[key]["questions"])
        + tuple(f"{metrics[key][column]:.3f}" for column in columns)
        for key in [str(c) for c in CATEGORIES] + ["overall"]
    ]
    rows[-1] = rows[-1][:2] + tuple(f"**{value}**" for value in rows[-1][2:])
    latency = report["latency_ms"]
    embedding = (
        f"; vectors for {sum(c['pages'] for c in report['conversations']):,} exchanges computed in "
        f"{report['embedding_seconds']:.0f} s"
        if extra
        else ""
    )
    write(
        names[0],
        "LoCoMo dev split: how often retrieve_memory ranks the exchanges that hold the answer, "
        + ("words and local vectors fused" if extra else "words alone"),
        markdown_table(("category", "questions", *(column.replace("hit@", "any@") for column in columns)), rows)
        + f"\n\nretrieve_memory p50 {latency['p50']:.1f} ms, p95 {latency['p95']:.1f} ms (warm){embedding}.",
        "recall@k: the share of a question's evidence turns among the first k of `retrieved_pages` (the ranked "
        "exchanges), averaged over questions; any@k: the share of questions with at least one of them there. One "
        "user per conversation, short_term_capacity 1. The data set is read in place from "
        "../shared/data/locomo (CC BY-NC); nothing of it is kept here.",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"locomo JSON (default {DEFAULT_DATA})")
    parser.add_argument("--ks", default="1,5,10", help="comma-separated cut-offs (default 1,5,10)")
    parser.add_argument("--json", action="store_true", help="also print the results as one JSON object")
    parser.add_argument("--limit-conversations", type=int, help="use only the first N conversations")
    parser.add_argument(
        "--settings-json",
        default="{}",
        help="extra Settings fields as a JSON object, e.g. '{\"short_term_capacity\": 1}'",
    )
    add_results_option(parser)
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)
    try:
        ks = sorted({int(k) for k in args.ks.split(",") if k.strip()})
        if not ks or ks[0] < 1 or ks[-1] > 100:
            raise ValueError("--ks must be integers between 1 and 100")
        extra = json.loads(args.settings_json)
        if not isinstance(extra, dict):
            raise ValueError("--settings-json must be a JSON object")
        conversations = load_conversations(args.data, args.limit_conversations)
        report = run(conversations, ks, extra)
    except Exception as exc:  # a report, not a test: say what went wrong and still exit 0
        print(f"locomo_recall: could not run: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 0
    print_report(report, args.data)
    if not args.no_results:
        write_results(report, extra, args)
    if args.json:
        print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
