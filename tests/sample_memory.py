"""Memory shared by the tests of several surfaces (core API, tool, command line): a memory.json as
DeerFlow writes it (profile sections, facts with source and sourceError), and a short conversation in
two threads and none (user input, agent response, thread)."""

from __future__ import annotations

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
