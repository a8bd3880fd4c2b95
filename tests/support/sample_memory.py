"""Memory shared by the tests of several surfaces (core API, tool, command line): a memory.json as
DeerFlow writes it (profile sections, facts with source and sourceError), and a short conversation in
two threads and none (user input, agent response, thread); a MemoryOS data directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DEERFLOW_MEMORY: dict[str, Any] = {
    "version": "1.0",
    "lastUpdated": "2024-05-01T12:00:00Z",
    "user": {
        "workContext": {
            "summary": "Data engineer at Acme, migrating pipelines to Rust",
            "updatedAt": "2024-04-01T00:00:00Z",
        },
        "personalContext": {"summary": "Lives in Lyon with two cats", "updatedAt": "2024-04-02T00:00:00Z"},
        "topOfMind": {"summary": "", "updatedAt": ""},
    },
    "history": {
        "recentMonths": {"summary": "Moved from Paris to Lyon", "updatedAt": "2024-04-03T00:00:00Z"},
        "earlierContext": {"summary": "", "updatedAt": ""},
        "longTermBackground": {"summary": "Studied physics", "updatedAt": "2024-04-04T00:00:00Z"},
    },
    "facts": [
        {
            "id": "fact_df1",
            "content": "Prefers Rust over Go",
            "category": "preference",
            "confidence": 0.9,
            "createdAt": "2024-04-01T00:00:00Z",
            "source": "thread-42",
            "sourceError": None,
        },
        {
            "id": "fact_df2",
            "content": "Has two cats",
            "category": "context",
            "confidence": 0.8,
            "createdAt": "2024-04-02T00:00:00Z",
            "source": "thread-43",
            "sourceError": "said three cats at first",
        },
    ],
}


TRIP: list[tuple[str, str, str | None]] = [
    ("We are planning a trip to Kyoto in April", "Kyoto in April has cherry blossoms.", "trip"),
    ("I booked a ryokan near the Kyoto temples", "A ryokan is a lovely choice.", "trip"),
    ("My manager wants the quarterly report by Friday", "Let's plan the report.", "work"),
    ("The quarterly report needs sales charts", "Charts make reports clearer.", "work"),
    ("I bought a new road bike", "Enjoy the road bike!", None),
    ("Kyoto temples open early in the morning", "Go early to avoid crowds.", "trip"),
    ("My cat knocked over the plant", "Cats will be cats.", None),
    ("Remind me to water the plants", "I will remind you.", None),
]


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value), encoding="utf-8")


def memoryos_dir(root: Path, second_user: bool = False) -> Path:
    """A MemoryOS data_storage_path in MemoryOS's own file shapes: alice (one exchange in both
    short-term and mid-term, mid-term pages out of order, a knowledge entry repeated with other
    case and spacing), the assistant "guide", and with `second_user` ben with one exchange."""
    user = root / "users" / "alice"
    write_json(
        user / "short_term.json",
        [
            # Also in mid-term (same words and time): must arrive once.
            {
                "user_input": "I just got back from Kyoto",
                "agent_response": "How was Kyoto?",
                "timestamp": "2024-03-05 10:00:00",
            },
            {
                "user_input": "The temples were amazing",
                "agent_response": "Which one did you like?",
                "timestamp": "2024-03-05 10:01:00",
            },
        ],
    )
    write_json(
        user / "mid_term.json",
        {
            "sessions": {
                "session_b": {
                    "summary": "Trip booking",
                    "details": [
                        {
                            "page_id": "mos_p2",
                            "user_input": "Booked a ryokan",
                            "agent_response": "Nice ryokan",
                            "timestamp": "2024-03-01 09:00:00",
                            "analyzed": True,
                        },
                        {
                            "page_id": "mos_p1",
                            "user_input": "Planning a Japan trip",
                            "agent_response": "When?",
                            "timestamp": "2024-02-28 08:00:00",
                            "analyzed": True,
                            "meta_data": {"mood": "excited"},
                        },
                    ],
                },
                "session_c": {
                    "summary": "Back home",
                    "details": [
                        {
                            "page_id": "mos_p3",
                            "user_input": "I just got back from Kyoto",
                            "agent_response": "How was Kyoto?",
                            "timestamp": "2024-03-05 10:00:00",
                            "analyzed": False,
                        },
                    ],
                },
            }
        },
    )
    write_json(
        user / "long_term_user.json",
        {
            "user_profiles": {
                "alice": {"data": "Alice loves Japan and travels often.", "last_updated": "2024-03-05 11:00:00"}
            },
            "knowledge_base": [
                {"knowledge": "Alice visited Kyoto in March 2024", "timestamp": "2024-03-05 11:00:00"},
                {"knowledge": "Alice stays in ryokans", "timestamp": "2024-03-01 11:00:00"},
                {"knowledge": "alice stays in  RYOKANS", "timestamp": "2024-03-02 11:00:00"},
            ],
            "assistant_knowledge": [{"knowledge": "I recommended Fushimi Inari", "timestamp": "2024-03-05 11:00:00"}],
        },
    )
    write_json(
        root / "assistants" / "guide" / "long_term_assistant.json",
        {"assistant_knowledge": [{"knowledge": "I am a travel guide", "timestamp": "2024-01-01 00:00:00"}]},
    )
    if second_user:
        write_json(
            root / "users" / "ben" / "short_term.json",
            [
                {
                    "user_input": "Ben here, I like chess",
                    "agent_response": "Chess is great",
                    "timestamp": "2024-01-01 12:00:00",
                }
            ],
        )
    return root
