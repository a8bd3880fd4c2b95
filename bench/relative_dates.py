#!/usr/bin/env python
"""Recall of questions that name a time ("where did I hike last week?"), on a synthetic memory.

The set: one user who did the same few things again and again over two years (hiking, concerts,
restaurants, books, ...), each time somewhere else, plus unrelated chatter at random times. Every
question names one of those times in words, relative to now ("yesterday", "last week", "last
month", "three months ago", "last year", "two years ago", "in March", and the Chinese forms for
the Chinese pages); its gold answer is the one exchange from that time. Words alone cannot tell
the occurrences apart: only the time can.

Compared: the lexical ranking with no use of the time words; the soft lift recall gives pages
from the period a query names (memory_mcp/recall/periods.py) at several weights; and a hard filter on the
same periods (as if they were passed as since / until), which loses what people date loosely:
each question has a one-in-four chance to be asked about an exchange dated a little outside the
period named (a "last week" said of eight or nine days ago).

With --embeddings, every exchange also has a local vector (multilingual-e5-small), and the
rankings are the fused ones `embeddings.backend: local` gives.

Usage: .venv/bin/python bench/relative_dates.py [--weights 0.5,1,2] [--seed 5] [--embeddings]
Exits 0: it is a report.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from memory_mcp.base.clock import format_timestamp
from memory_mcp.base.settings import Settings
from memory_mcp.models import AddMemoryRequest, RetrieveMemoryRequest
from memory_mcp.recall import bm25 as retrieval
from memory_mcp.recall import scope_recall as recall
from memory_mcp.recall.periods import periods_in
from memory_mcp.service.memory_service import MemoryService

ACTIVITIES = [
    ("hike", "We went hiking in {place}; the trail was steep", "Where did I go hiking {when}?"),
    ("concert", "Saw a concert by {place} at the arena", "Which concert did I see {when}?"),
    ("dinner", "Had dinner at {place}, the pasta was great", "Where did I have dinner {when}?"),
    ("book", "Finished reading {place}, what a book", "Which book did I finish {when}?"),
    ("visit", "Visited my cousin in {place} for the weekend", "Where did I visit my cousin {when}?"),
    ("class", "Took a pottery class at {place}", "Where did I take a pottery class {when}?"),
]
CHINESE_ACTIVITIES = [
    ("徒步", "我们在{place}徒步，山路很陡", "我{when}在哪里徒步？"),
    ("吃饭", "在{place}吃了晚饭，意大利面很好吃", "我{when}在哪里吃的晚饭？"),
]
PLACES = ["Alder", "Birch", "Cedar", "Dover", "Elgin", "Fairview", "Glenrock", "Hollis", "Ivybridge", "Juniper",
          "Kestrel", "Larkspur", "Mayfield", "Norwood", "Oakham", "Pinecrest", "Quarry", "Redwood", "Stanton",
          "Thornbury", "Upton", "Verona", "Westbury", "Yardley"]  # fmt: skip
CHINESE_PLACES = ["黄山", "泰山", "华山", "峨眉", "庐山", "衡山", "嵩山", "武夷", "雁荡", "九华", "普陀", "崂山"]
FILLER = ["Can you help me with an email to my landlord?", "What's a good stretch for back pain?",
          "Remind me how compound interest works", "Draft a birthday message for my aunt",
          "How do I fix a squeaky door?", "Summarise the news about the election"]  # fmt: skip


@dataclass
class Moment:
    """A time said in words, and when an exchange it names took place."""

    english: str
    chinese: str | None
    at: Callable[[datetime, random.Random], datetime]


def _last_week(now: datetime, rng: random.Random) -> datetime:
    monday = (now - timedelta(days=now.weekday() + 7)).replace(hour=12)
    return monday + timedelta(days=rng.randint(0, 6))


def _last_month(now: datetime, rng: random.Random) -> datetime:
    first = now.replace(day=1, hour=12) - timedelta(days=1)
    return first.replace(day=rng.randint(1, 28))


def _march(now: datetime, rng: random.Random) -> datetime:
    return now.replace(year=now.year if now.month > 3 else now.year - 1, month=3, day=rng.randint(1, 28), hour=12)


MOMENTS = [
    Moment("yesterday", "昨天", lambda now, rng: now - timedelta(days=1, hours=rng.randint(0, 6))),
    Moment("last week", "上周", _last_week),
    Moment("last month", "上个月", _last_month),
    Moment("three months ago", "三个月前", lambda now, rng: now - timedelta(days=91 + rng.randint(-6, 6))),
    Moment("in March", None, _march),
    Moment("last year", "去年", lambda now, rng: now.replace(year=now.year - 1, month=rng.randint(2, 11), day=15)),
    Moment("two years ago", "两年前", lambda now, rng: now - timedelta(days=730 + rng.randint(-40, 40))),
]
LOOSE = 0.25  # the share of questions about an exchange dated a little outside the period named
LOOSE_BY = {"yesterday": 1, "last week": 3, "last month": 6, "in March": 6}  # days beyond, where it makes sense


@dataclass
class Question:
    text: str
    gold: int  # page number


def build(service: MemoryService, now: datetime, rng: random.Random) -> list[Question]:
    """Store the memory; return the questions."""
    pages: list[tuple[datetime, str, str]] = []
    questions: list[tuple[str, str]] = []  # (question, the gold exchange's text)
    for activities, places, chinese in ((ACTIVITIES, PLACES, False), (CHINESE_ACTIVITIES, CHINESE_PLACES, True)):
        for _, said, asked in activities:
            chosen = rng.sample(places, len(MOMENTS))
            for moment, place in zip(MOMENTS, chosen, strict=True):
                words = moment.chinese if chinese else moment.english
                if words is None:
                    continue
                at = moment.at(now, rng)
                if rng.random() < LOOSE and moment.english in LOOSE_BY:
                    at -= timedelta(days=LOOSE_BY[moment.english])
                text = said.format(place=place)
                pages.append((at, text, "Noted." if not chinese else "好的。"))
                questions.append((asked.format(when=words), text))
    for _ in range(300):
        pages.append((now - timedelta(days=rng.uniform(0, 800)), rng.choice(FILLER), "Sure, here you go."))
    pages.sort()
    number_of = {}
    for number, (at, said, answered) in enumerate(pages):
        service.add_memory(
            AddMemoryRequest.build(user_input=said, agent_response=answered, timestamp=format_timestamp(at))
        )
        number_of[said] = number
    return [Question(question, number_of[text]) for question, text in questions]


def measure(service: MemoryService, questions: list[Question], hard: bool) -> tuple[float, float]:
    """recall@1 and recall@5 of the gold exchange."""
    texts = [page.user_input for page in service.latest_pages("default", None, 10_000)]
    at1 = at5 = 0
    for question in questions:
        window = {}
        if hard:
            periods = periods_in(question.text, datetime.now(UTC))
            if periods:
                window = {"since": min(p.start for p in periods), "until": max(p.end for p in periods)}
        result = service.retrieve_memory(RetrieveMemoryRequest.build(query=question.text, max_results=5, **window))
        ranked = [texts.index(page.user_input) for page in result.retrieved_pages]
        at1 += ranked[:1] == [question.gold]
        at5 += question.gold in ranked
    return at1 / len(questions), at5 / len(questions)


def report(ranking: str, recalls: tuple[float, float]) -> None:
    print(f"{ranking:<34} {recalls[0]:>9.3f} {recalls[1]:>9.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default="0.5,1,2")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--embeddings", action="store_true", help="fuse local vectors with the words")
    args = parser.parse_args()
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="relative-dates-") as data:
        # short_term_capacity 1 and no heat: every exchange is ranked, by words (and vectors) and time alone.
        embeddings = {"backend": "local" if args.embeddings else "none"}
        settings = Settings(
            data_storage_path=Path(data), short_term_capacity=1, heat_ranking_weight=0, embeddings=embeddings
        )
        service = MemoryService(settings)
        questions = build(service, now, random.Random(args.seed))
        if args.embeddings:
            service.embed_missing("default", None)
        print(f"{len(questions)} questions over {len(service.latest_pages('default', None, 10_000))} exchanges")
        print(f"{'ranking':<34} {'recall@1':>9} {'recall@5':>9}")
        names_periods = recall.periods_in
        recall.periods_in = lambda query, now: []
        report("words only (time words unused)", measure(service, questions, hard=False))
        recall.periods_in = names_periods
        for weight in (float(part) for part in args.weights.split(",")):
            retrieval.PERIOD_WEIGHT = weight
            report(f"soft lift, weight {weight:g}", measure(service, questions, hard=False))
        report("hard filter on the same periods", measure(service, questions, hard=True))
        service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
