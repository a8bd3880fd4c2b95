"""How well secrets are kept out of memory: precision and recall of redaction over the labelled
set (tests/data/redaction/labelled.json: real-shaped secrets, and look-alikes that must be kept),
and what it costs an add.

A secret counts as caught when no ten-character run of it survives; a look-alike counts as a false
alarm when anything in it changed. Cost: redaction of prose without candidates, of a coding
exchange, and of 100,000 characters (the largest exchange add_memory takes), best of five runs,
and the one-off load of the detectors.

Usage: .venv/bin/python bench/bench_redaction.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from memory_mcp.memory.redaction import redact

LABELLED = PROJECT_ROOT / "tests" / "data" / "redaction" / "labelled.json"
PROSE = "I would like to plan a trip to Kyoto next spring with my family; which temples open early?"
CODING = (
    "The parser drops the last line of the CSV when the file has no trailing newline. Use splitlines() "
    "instead of split('\\n')[:-1], and add a test in tests/test_parser.py for a file without one.\n"
    "def read_rows(path: Path) -> list[str]:\n    return path.read_text().splitlines()\n"
)


def caught(secret: str, redacted: str) -> bool:
    runs = [secret[n : n + 10] for n in range(max(1, len(secret) - 9))]
    return secret not in redacted and not any(run in redacted for run in runs)


def best_ms(text: str, runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        began = time.perf_counter()
        redact(text)
        best = min(best, (time.perf_counter() - began) * 1e3)
    return best


def main() -> int:
    labelled = json.loads(LABELLED.read_text(encoding="utf-8"))
    began = time.perf_counter()
    redact("warm up: password=abc12345")
    load_ms = (time.perf_counter() - began) * 1e3
    secrets, keep = labelled["secrets"], labelled["keep"]
    missed = [
        case["label"]
        for case in secrets
        if not caught(case["secret"], redact(case["before"] + case["secret"] + case["after"]))
    ]
    alarms = [text for text in keep if redact(text) != text]
    true_positives = len(secrets) - len(missed)
    precision = true_positives / max(1, true_positives + len(alarms))
    recall = true_positives / len(secrets)
    print(f"labelled set: {len(secrets)} secrets, {len(keep)} look-alikes")
    print(
        f"recall    {recall:.3f} ({true_positives}/{len(secrets)} caught){': missed ' + ', '.join(missed) if missed else ''}"
    )
    print(f"precision {precision:.3f} ({len(alarms)} look-alikes changed){': ' + '; '.join(alarms) if alarms else ''}")
    big = (CODING * (100_000 // len(CODING) + 1))[:100_000]
    print(
        f"cost: detectors loaded once {load_ms:.0f} ms; prose {best_ms(PROSE) * 1e3:.0f} µs; "
        f"a coding exchange {best_ms(CODING):.2f} ms; 100,000 characters {best_ms(big):.0f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
