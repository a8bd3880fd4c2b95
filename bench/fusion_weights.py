#!/usr/bin/env python
"""How much the words weigh against the vectors (embeddings.lexical_weight), chosen on the LoCoMo
dev split with one conversation left out at a time.

Ingests the dev split once with embeddings on (bench/locomo_recall.py's protocol), then asks every
question at each weight. For each conversation, the weight with the best recall@10 on the other
four is applied to it; the table shows each weight's recall over all five, and the leave-one-out
figure is what choosing by this procedure gives on conversations it never saw.

Usage: .venv/bin/python bench/fusion_weights.py [--backend local] [--weights 0.3,0.4,0.5,0.6,0.7,1]
Exits 0: it is a report.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from locomo_recall import CATEGORIES, DEFAULT_DATA, Ranked, ask, ingest, load_conversations, open_service, score

KS = (5, 10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="local", choices=["local", "openai"])
    parser.add_argument("--weights", default="0.3,0.4,0.5,0.6,0.7,1")
    args = parser.parse_args()
    weights = [float(part) for part in args.weights.split(",")]
    conversations = load_conversations(DEFAULT_DATA)
    by_weight: dict[float, list[list[Ranked]]] = {}
    with tempfile.TemporaryDirectory(prefix="fusion-weights-") as data_dir:
        service = open_service(data_dir, {"embeddings": {"backend": args.backend}})
        try:
            _, embed_s = ingest(service, conversations)
            print(f"{sum(len(c.exchanges) for c in conversations)} exchanges embedded in {embed_s:.0f} s")
            for weight in weights:
                service.settings.embeddings.lexical_weight = weight
                by_weight[weight] = ask(service, conversations, max(KS))[0]
        finally:
            service.close()

    print(
        f"{'lexical_weight':>14} {'recall@5':>9} {'recall@10':>10}  "
        + " ".join(f"{n:>11}" for n in CATEGORIES.values())
    )
    for weight, results in by_weight.items():
        metrics = score([ranked for each in results for ranked in each], KS)
        categories = " ".join(f"{metrics[str(c)]['recall@10']:>11.3f}" for c in CATEGORIES)
        print(
            f"{weight:>14g} {metrics['overall']['recall@5']:>9.3f} {metrics['overall']['recall@10']:>10.3f}  {categories}"
        )

    chosen, held_out = [], []
    for left_out in range(len(conversations)):

        def recall_without(weight: float, left_out: int = left_out) -> float:
            others = [r for n, each in enumerate(by_weight[weight]) if n != left_out for r in each]
            return score(others, KS)["overall"]["recall@10"]

        best = max(weights, key=recall_without)
        chosen.append(best)
        held_out += by_weight[best][left_out]
    metrics = score(held_out, KS)
    print(
        f"leave one conversation out: weights chosen {chosen}; recall@5 {metrics['overall']['recall@5']:.3f}, "
        f"recall@10 {metrics['overall']['recall@10']:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
