#!/usr/bin/env python
"""Choosing relevance's floors on data: which exchanges and facts are worth a model's tokens.

LoCoMo's dev split (5 conversations) through the real MemoryService. Each conversation is one
user; its `observation` lists become that user's facts (each names the turn it was drawn from).
Every question of categories 1-4 is asked twice, `retrieve_memory(max_results=10)`:
  own memory       the conversation it is about: its evidence turns (and the facts drawn from
                   them) are what a block should carry;
  another memory   the next conversation's: nothing there is relevant, so whatever clears the
                   floor is tokens spent for nothing.
For a floor f, on a set of questions:
  kept      evidence turns of the top 10 that clear f / evidence turns in the top 10 (facts alike);
  precise   of all items clearing f (own and other questions), the share that is evidence;
  quiet     questions asked of another memory for which nothing clears f;
  shown     exchanges (facts) clearing f per question, own and other.
The floor chosen on a training set maximises F-beta of kept and precise with BETA = 3: a
missed memory is taken to cost nine times a needless line. It is chosen leaving one
conversation out (five folds), and each fold is reported on the conversation left out. The
product's floors (memory_mcp/recall/relevance.py) are the median of the fold choices; a gain that does
not hold on the held-out conversations is not one. With --vectors, the exchanges are ranked with
local vectors too, and the meaning floor is chosen the same way beside the product's word floor.

Usage: .venv/bin/python bench/injection_floor.py [--data PATH] [--vectors] [--json]
Reads the data set in place (CC BY-NC) and writes nothing into this repository. Always exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
for path in (PROJECT_ROOT, PROJECT_ROOT / "bench"):
    sys.path.insert(0, str(path))

from locomo_recall import DEFAULT_DATA, Conversation, ingest, load_conversations

from memory_mcp.recall import relevance

BETA = 3.0
WORD_FLOORS = [round(0.05 * n, 2) for n in range(21)]
MEANING_FLOORS = [round(0.05 * n, 2) for n in range(17)]
FACT_FLOORS = [round(0.05 * n, 2) for n in range(13)]


@dataclass
class Asked:
    """One question asked of one memory: each ranked hit's relevance and whether it is evidence,
    and each fact's similarity and whether it was drawn from the evidence."""

    conversation: str
    own: bool
    worth: bool
    hits: list[tuple[float, float | None, bool]]  # (words, meaning, is evidence)
    facts: list[tuple[float, bool]]  # (similarity, drawn from the evidence)


def observations(raw: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """The conversation's observations as (statement, dia_ids it was drawn from)."""
    found = []
    for per_session in raw["observation"].values():
        for statements in per_session.values():
            for statement, *evidence in statements:
                ids = evidence[0] if evidence and isinstance(evidence[0], list) else evidence
                found.append((statement, [str(dia_id) for dia_id in ids]))
    return found


def collect(data: Path, vectors: bool) -> list[Asked]:
    from memory_mcp.base.settings import MemorySettings, Settings
    from memory_mcp.models import AddFactRequest, RetrieveMemoryRequest
    from memory_mcp.service.memory_service import MemoryService

    conversations: list[Conversation] = load_conversations(data)
    raw = {sample["sample_id"]: sample for sample in json.loads(data.read_text(encoding="utf-8"))}
    asked: list[Asked] = []
    with tempfile.TemporaryDirectory(prefix="injection-floor-") as home:
        settings = Settings(
            data_storage_path=home,
            short_term_capacity=1,
            memory=MemorySettings(max_facts=500),
            embeddings={"backend": "local" if vectors else "none"},  # type: ignore[arg-type]
        )
        service = MemoryService(settings)
        try:
            ingest(service, conversations)
            fact_sources: dict[str, dict[str, list[str]]] = {}
            for conversation in conversations:
                sources = fact_sources.setdefault(conversation.sample_id, {})
                for statement, dia_ids in observations(raw[conversation.sample_id]):
                    added = service.add_fact(
                        AddFactRequest.build(content=statement[:2000], user_id=conversation.sample_id)
                    )
                    sources[added.fact.id] = dia_ids
            for number, conversation in enumerate(conversations):
                other = conversations[(number + 1) % len(conversations)].sample_id
                for question in conversation.questions:
                    gold = set(question.evidence)
                    for user, own in ((conversation.sample_id, True), (other, False)):
                        request = RetrieveMemoryRequest.build(query=question.question, max_results=10, user_id=user)
                        found = service.find(request)
                        hits = [
                            (hit.words, hit.meaning, own and bool(gold & set((page.meta_data or {})["dia_ids"])))
                            for page, hit in found.ranked
                        ]
                        facts = [
                            (
                                found.fact_similarity.get(fact.id, 0.0),
                                own and bool(gold & set(fact_sources[user][fact.id])),
                            )
                            for fact in found.facts
                        ]
                        asked.append(Asked(conversation.sample_id, own, found.worth_recalling, hits, facts))
        finally:
            service.close()
    return asked


def measure(
    asked: list[Asked], floor: float, facts: bool = False, meaning_floor: float | None = None
) -> dict[str, float]:
    """kept / precise / F-beta / quiet / shown at `floor`, for the exchanges (or the facts); with
    `meaning_floor`, an exchange also clears by its similarity by meaning."""
    evidence = kept = quiet = shown_own = shown_other = 0
    own_questions = other_questions = 0
    for each in asked:
        if facts:
            items = [(value >= floor, gold) for value, gold in each.facts]
        else:
            items = [
                (w >= floor or (meaning_floor is not None and m is not None and m >= meaning_floor), gold)
                for w, m, gold in each.hits
            ]
        clearing = [gold for clears, gold in items if each.worth and clears]
        if each.own:
            own_questions += 1
            evidence += sum(gold for _, gold in items)
            kept += sum(clearing)
            shown_own += len(clearing)
        else:
            other_questions += 1
            quiet += not clearing
            shown_other += len(clearing)
    recall, precision = kept / max(1, evidence), kept / max(1, shown_own + shown_other)
    f_beta = (1 + BETA**2) * precision * recall / max(1e-9, BETA**2 * precision + recall)
    return {
        "kept": recall,
        "precise": precision,
        "f_beta": f_beta,
        "quiet": quiet / max(1, other_questions),
        "shown_own": shown_own / max(1, own_questions),
        "shown_other": shown_other / max(1, other_questions),
    }


def cross_validate(asked: list[Asked], floors: list[float], facts: bool, by_meaning: bool = False) -> dict[str, Any]:
    """Five folds, each conversation left out in turn. `by_meaning`: the floor chosen is the
    meaning floor, beside the product's word floor (what vectors add to the default)."""

    def measured(group: list[Asked], floor: float) -> dict[str, float]:
        if by_meaning:
            return measure(group, relevance.WORD_FLOOR, meaning_floor=floor)
        return measure(group, floor, facts)

    folds = []
    for held_out in sorted({each.conversation for each in asked}):
        training = [each for each in asked if each.conversation != held_out]
        testing = [each for each in asked if each.conversation == held_out]
        floor = max(floors, key=lambda candidate: (measured(training, candidate)["f_beta"], candidate))
        folds.append({"held_out": held_out, "floor": floor, **measured(testing, floor)})
    chosen = statistics.median(fold["floor"] for fold in folds)
    return {
        "folds": folds,
        "median_floor": chosen,
        "held_out_mean": {
            key: statistics.mean(fold[key] for fold in folds)
            for key in ("kept", "precise", "quiet", "shown_own", "shown_other")
        },
        "no_floor": measure(asked, 0.0, facts),
        "product_floor": measured(
            asked,
            relevance.MEANING_FLOOR if by_meaning else relevance.FACT_FLOOR if facts else relevance.WORD_FLOOR,
        ),
    }


def _figures(row: dict[str, float]) -> str:
    return (
        f"{row['kept']:.3f}  {row['precise']:.3f}  {row['quiet']:.3f}  {row['shown_own']:>8.2f}  "
        f"{row['shown_other']:>10.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--vectors", action="store_true", help="rank with local vectors too (slow: embeds ~3,000)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(f"no data at {args.data}: nothing measured")
        return 0
    asked = collect(args.data, args.vectors)
    report = {
        "beta": BETA,
        "questions": sum(each.own for each in asked),
        "exchanges": cross_validate(asked, WORD_FLOORS, facts=False),
        "facts": cross_validate(asked, FACT_FLOORS, facts=True),
        "product": {
            "WORD_FLOOR": relevance.WORD_FLOOR,
            "FACT_FLOOR": relevance.FACT_FLOOR,
            "MEANING_FLOOR": relevance.MEANING_FLOOR,
        },
    }
    if args.vectors:
        report["meaning"] = cross_validate(asked, MEANING_FLOORS, facts=False, by_meaning=True)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"LoCoMo dev, {report['questions']} questions, each asked of its own memory and of another's; F-beta, beta {BETA:g}"
    )
    for kind in ("exchanges", "facts", "meaning"):
        if kind not in report:
            continue
        part = report[kind]
        what = "meaning floor, beside the word floor," if kind == "meaning" else "floor"
        print(f"\n{kind}: {what} chosen leaving one conversation out")
        print("  held out   floor   kept  precise  quiet  shown/own  shown/other")
        for fold in part["folds"]:
            print(f"  {fold['held_out']:<9} {fold['floor']:>5.2f}  {_figures(fold)}")
        mean = part["held_out_mean"]
        print(f"  held-out mean     {_figures(mean)}; median floor {part['median_floor']:.2f}")
        print(f"  no floor (all)    {_figures(part['no_floor'])}")
        print(f"  product's (all)   {_figures(part['product_floor'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
