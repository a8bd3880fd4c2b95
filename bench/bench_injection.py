#!/usr/bin/env python
"""Tokens a coding session is given by the hooks, and whether what it needed was among them.

A realistic scripted history: three projects (a web shop, a Python API, infrastructure), two
earlier Claude Code sessions in each, in which the person said things a later session needs
("we use pnpm, never npm", "the staging host is kestrel"), then a session of routine work in each
(so the latest exchanges, which a session's digest shows, are not those answers). Then one 40-turn session that moves
between the three projects: coding prompts, bare acknowledgements ("ok", "continue"), and
RECALL questions whose answers were said in an earlier session. Every hook runs as Claude Code
runs it, a process per event with the documented JSON on stdin: SessionStart (where the
checkout has that hook), UserPromptSubmit before each prompt, Stop after each reply (the
transcript grows as Claude Code writes it).

Printed per checkout: tokens injected (cl100k) over the session, per prompt kind, and recall:
for each question, whether its answer was in what the session had been given so far (Claude
Code keeps every block in the conversation). `--baseline PATH` runs the same session through
another checkout's hooks (e.g. a `git worktree` of the commit before), so both are measured in
one run on one machine.

Usage: .venv/bin/python bench/bench_injection.py [--baseline PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT / "tests" / "support"))
sys.path.insert(0, str(PROJECT_ROOT / "bench"))

from claude_code_session import Transcript, text
from result_files import add_results_option, markdown_table, write

from memory_mcp.recall.token_count import TokenCounter

COUNTER = TokenCounter("tiktoken")
TARGET_SHARE = 0.15

# What was said in earlier sessions, per project: (prompt, reply).
HISTORY: dict[str, list[list[tuple[str, str]]]] = {
    "webshop": [
        [
            (
                "Set up the repo tooling. In this repo we use pnpm, never npm, and the tests run with vitest.",
                "Done: pnpm workspace configured, vitest added as the test runner.",
            ),
            (
                "The checkout page flickers when the cart updates. Can you look?",
                "The cart store re-renders the whole page; I memoised the line items component.",
            ),
            (
                "Our design system colours live in tokens.css; the brand blue is #1d4ed8.",
                "Noted: brand blue #1d4ed8 from tokens.css, used for the primary buttons.",
            ),
            (
                "Add a discount code field to the checkout form.",
                "Added DiscountCodeInput with validation against /api/discounts.",
            ),
            (
                "The product images should lazy load below the fold.",
                "Images below the fold now use loading=lazy and a blurred placeholder.",
            ),
        ],
        [
            (
                "Payments go through Stripe in test mode until launch; never call the live keys from dev.",
                "Understood: dev uses STRIPE_TEST_KEY only; a guard refuses live keys outside production.",
            ),
            (
                "Write a vitest test for the cart total with three items.",
                "Added cart.test.ts: three items, quantities 1, 2 and 3, total 42.50.",
            ),
            ("The footer links are wrong on mobile.", "Fixed the footer grid: links wrap in two columns under 640px."),
            (
                "Rename the ProductTile component to ProductCard everywhere.",
                "Renamed in 14 files and updated the stories.",
            ),
        ],
    ],
    "python-api": [
        [
            (
                "This API is FastAPI on Python 3.12; we run tests with pytest and never with unittest.",
                "Noted: pytest only; FastAPI app in api/main.py.",
            ),
            (
                "Invoice totals must be rounded half-even to the cent, as accounting asked.",
                "Changed invoice_total to use Decimal.quantize with ROUND_HALF_EVEN.",
            ),
            ("The /health endpoint is slow under load.", "It queried the database; now it returns a cached status."),
            ("Add pagination to /invoices.", "Added limit/offset with a default of 50 and a maximum of 500."),
        ],
        [
            (
                "Our staging database is called ledger-staging and migrations run with alembic.",
                "Noted: alembic migrations against ledger-staging before each deploy.",
            ),
            (
                "Customers in the EU must get VAT on invoices; the rate table is in vat.py.",
                "Invoices now add VAT from vat.py for EU billing addresses.",
            ),
            ("Log every failed login with the client IP.", "Failed logins are logged with the IP at WARNING."),
            ("Use ruff for linting, line length 100.", "ruff configured in pyproject.toml with line-length 100."),
        ],
    ],
    "infra": [
        [
            (
                "The staging host is called kestrel and production runs on falcon.",
                "Noted: kestrel for staging, falcon for production.",
            ),
            (
                "Terraform state lives in the S3 bucket acme-tf-state, region eu-west-1.",
                "Backend configured: s3://acme-tf-state in eu-west-1 with DynamoDB locking.",
            ),
            ("Set up a nightly backup of the database.", "Added a CronJob at 02:00 UTC dumping to the backups bucket."),
        ],
        [
            (
                "Deploys happen only on Tuesdays and Thursdays, never on Fridays.",
                "Noted: the deploy pipeline refuses to run on other days.",
            ),
            (
                "Bump the ingress controller to the latest minor.",
                "Bumped ingress-nginx to 1.11 and ran the smoke tests.",
            ),
            (
                "Grafana dashboards are in the monitoring repo, folder dashboards/.",
                "Noted: dashboards live in monitoring/dashboards.",
            ),
        ],
    ],
}


# A later session of routine work in each project: the latest exchanges (what a digest shows) are
# these, so the answers above must be found for the prompt that needs them.
ROUTINE = [
    ("Fix the typo in the {thing} docstring.", "Fixed the typo in the {thing} docstring."),
    ("Rename the {thing} helper to something clearer.", "Renamed it to {thing}_helper and updated the callers."),
    ("Add a log line when the {thing} step starts.", "Added an INFO log at the start of the {thing} step."),
    ("Bump the {thing} dependency to the latest patch.", "Bumped it; the changelog lists only bug fixes."),
    ("Split the {thing} module into two files.", "Split it into {thing}_core and {thing}_io."),
    ("Remove the dead code in {thing}.", "Removed three unused functions from {thing}."),
    ("Add type hints to the {thing} functions.", "Added type hints; the type checker is clean."),
    ("Make the {thing} error message clearer.", "The message now names the missing field."),
    ("Write a docstring for the {thing} entry point.", "Added a docstring describing its arguments."),
    ("Sort the imports in {thing}.", "Sorted them; nothing else changed."),
]
THINGS = {"webshop": "cart", "python-api": "billing", "infra": "backup"}
for project, thing in THINGS.items():
    HISTORY[project].append([(said.format(thing=thing), done.format(thing=thing)) for said, done in ROUTINE])


@dataclass
class Turn:
    project: str
    prompt: str
    kind: str  # "recall", "work" or "ack"
    answer: str = ""  # for recall: words that must reach the model


SESSION: list[Turn] = [
    Turn("webshop", "Let's continue on the web shop. Add a wishlist button to the product card.", "work"),
    Turn("webshop", "ok", "ack"),
    Turn("webshop", "Which package manager and test runner does this repo use?", "recall", "pnpm"),
    Turn("webshop", "Write a test for the wishlist toggle.", "work"),
    Turn("webshop", "continue", "ack"),
    Turn("webshop", "What is our brand blue again?", "recall", "#1d4ed8"),
    Turn("webshop", "Make the wishlist button use it.", "work"),
    Turn("webshop", "yes do it", "ack"),
    Turn("webshop", "Can I call the live Stripe keys from my dev machine to test the checkout?", "recall", "test mode"),
    Turn("webshop", "Thanks. Now lazy load the wishlist thumbnails too.", "work"),
    Turn("python-api", "Switching to the API. Add an endpoint that exports invoices as CSV.", "work"),
    Turn("python-api", "How must invoice totals be rounded?", "recall", "half-even"),
    Turn("python-api", "ok", "ack"),
    Turn("python-api", "Which test framework do we use here?", "recall", "pytest"),
    Turn("python-api", "Write the tests for the CSV export.", "work"),
    Turn("python-api", "continue", "ack"),
    Turn("python-api", "What is the staging database called, and how do migrations run?", "recall", "ledger-staging"),
    Turn("python-api", "Add an index on invoices.customer_id in a migration.", "work"),
    Turn("python-api", "go ahead", "ack"),
    Turn("python-api", "Where is the VAT rate table?", "recall", "vat.py"),
    Turn("python-api", "Add the Swiss rate to it.", "work"),
    Turn("python-api", "looks good", "ack"),
    Turn("infra", "Now infra. Add a readiness probe to the API deployment.", "work"),
    Turn("infra", "What is the staging host called?", "recall", "kestrel"),
    Turn("infra", "ok", "ack"),
    Turn("infra", "Where does the Terraform state live?", "recall", "acme-tf-state"),
    Turn("infra", "Add an alarm when the backup job fails.", "work"),
    Turn("infra", "continue", "ack"),
    Turn("infra", "Can we deploy the new ingress on Friday?", "recall", "Fridays"),
    Turn("infra", "Schedule it for Thursday then.", "work"),
    Turn("infra", "yes", "ack"),
    Turn("infra", "Where do the Grafana dashboards live?", "recall", "dashboards"),
    Turn("infra", "Add a panel for the backup duration.", "work"),
    Turn("webshop", "Back to the shop: the wishlist count should show in the header.", "work"),
    Turn("webshop", "ok", "ack"),
    Turn("webshop", "Remind me where the design tokens are defined.", "recall", "tokens.css"),
    Turn("webshop", "Add a wishlist colour token there.", "work"),
    Turn("webshop", "continue", "ack"),
    Turn("webshop", "Run the tests the way this repo does.", "recall", "pnpm"),
    Turn("webshop", "Great, that's all for today.", "ack"),
]


@dataclass
class Outcome:
    tokens_by_kind: dict[str, int] = field(default_factory=lambda: {"start": 0, "recall": 0, "work": 0, "ack": 0})
    recalled: list[bool] = field(default_factory=list)
    blocks: int = 0

    @property
    def tokens(self) -> int:
        return sum(self.tokens_by_kind.values())


def command(checkout: Path, home: Path, arguments: list[str], cwd: Path, stdin: str = "") -> str:
    """`memory-mcp ARGUMENTS` of `checkout`, as a process of its own; its stdout."""
    environment = {**os.environ, "MEMORY_MCP_HOME": str(home), "PYTHONPATH": str(checkout)}
    for variable in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        environment.pop(variable, None)
    done = subprocess.run(
        [sys.executable, "-m", "memory_mcp", *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd,
        timeout=600,
        check=False,
    )
    # A hook says what went wrong on stderr and exits 0; other commands may report progress there.
    failed = done.returncode != 0 or (arguments[0] == "hook" and done.stderr.strip() != "")
    if failed:
        raise SystemExit(f"{' '.join(arguments)} of {checkout} failed: {done.stderr.strip()[:500]}")
    return done.stdout


def hook(checkout: Path, home: Path, event: str, payload: dict[str, Any], cwd: Path) -> str:
    """Run one hook as Claude Code does; the additional context it printed ("" for none)."""
    printed = command(checkout, home, ["hook", event], cwd, json.dumps(payload))
    if not printed.strip():
        return ""
    return str(json.loads(printed)["hookSpecificOutput"]["additionalContext"])


def has_hook(checkout: Path, event: str) -> bool:
    parser = subprocess.run(
        [sys.executable, "-m", "memory_mcp", "hook", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(checkout)},
        cwd=checkout,  # `python -m` looks in the working folder first
        check=False,
    )
    return event in parser.stdout


def run_session(checkout: Path, workspace: Path, embeddings: bool) -> Outcome:
    home = workspace / "memory"
    home.mkdir(parents=True)
    config: dict[str, Any] = {"hook_helper_idle_minutes": 0}
    if embeddings:
        config["embeddings"] = {"backend": "local"}
    (home / "config.json").write_text(json.dumps(config), encoding="utf-8")
    folders = {name: workspace / "code" / name for name in HISTORY}
    for folder in folders.values():
        (folder / ".git").mkdir(parents=True)
    for name, sessions in HISTORY.items():  # the earlier sessions, stored by their Stop hooks
        for number, exchanges in enumerate(sessions):
            transcript = Transcript(workspace / f"{name}-{number}.jsonl", f"{name}-{number}", str(folders[name]))
            for prompt, reply in exchanges:
                transcript.prompt(prompt)
                transcript.reply(text(reply))
            hook(checkout, home, "stop", transcript.stop_input(), folders[name])
    if embeddings:  # what a running server (or `memory-mcp embed`) computes for what the hooks stored
        command(checkout, home, ["embed"], workspace)
    outcome = Outcome()
    session = Transcript(workspace / "today.jsonl", "today", str(folders["webshop"]))
    given = ""
    if has_hook(checkout, "session-start"):
        given = hook(checkout, home, "session-start", session.start_input(), folders["webshop"])
        outcome.tokens_by_kind["start"] += COUNTER.count(given) if given else 0
        outcome.blocks += bool(given)
    for number, turn in enumerate(SESSION):
        session.cwd = str(folders[turn.project])
        context = hook(checkout, home, "prompt", session.prompt_input(turn.prompt), folders[turn.project])
        outcome.tokens_by_kind[turn.kind] += COUNTER.count(context) if context else 0
        outcome.blocks += bool(context)
        given += "\n" + context
        if turn.kind == "recall":
            outcome.recalled.append(turn.answer.lower() in given.lower())
        session.prompt(turn.prompt)
        reply = f"Reply {number}: done." if turn.kind != "recall" else f"Reply {number}: looked it up."
        session.reply(text(reply))
        hook(checkout, home, "stop", session.stop_input(last_message=reply), folders[turn.project])
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout (e.g. a git worktree of the commit before)")
    parser.add_argument("--embeddings", action="store_true", help="local embeddings on (vectors computed once stored)")
    parser.add_argument(
        "--baseline-label",
        default="baseline",
        help="what the result file calls the baseline, e.g. 'one full block per prompt (commit 1a2b3c4)'",
    )
    parser.add_argument("--json", action="store_true")
    add_results_option(parser)
    args = parser.parse_args(argv)
    checkouts = {"this checkout": PROJECT_ROOT}
    if args.baseline:
        checkouts = {"baseline": args.baseline.resolve(), **checkouts}
    results = {}
    for label, checkout in checkouts.items():
        with tempfile.TemporaryDirectory(prefix="bench-injection-") as workspace:
            results[label] = run_session(checkout, Path(workspace), args.embeddings)
    report = {
        label: {
            "tokens": outcome.tokens,
            "tokens_by_kind": outcome.tokens_by_kind,
            "blocks": outcome.blocks,
            "recall": sum(outcome.recalled) / len(outcome.recalled),
            "recalled": outcome.recalled,
        }
        for label, outcome in results.items()
    }
    if not args.no_results and "baseline" in report:
        write_results(report, args)
    elif not args.no_results:
        print("bench/results/ left as it is: its figures compare with a baseline (--baseline PATH)")
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    recall_questions = sum(turn.kind == "recall" for turn in SESSION)
    print(
        f"A {len(SESSION)}-turn coding session across 3 projects ({recall_questions} questions answered in "
        f"earlier sessions); embeddings {'local' if args.embeddings else 'off'}"
    )
    for label, figures in report.items():
        kinds = ", ".join(f"{kind} {tokens}" for kind, tokens in figures["tokens_by_kind"].items())
        print(
            f"  {label:<14} tokens injected {figures['tokens']:>6} ({kinds}); blocks {figures['blocks']}; "
            f"recall {figures['recall']:.2f} ({sum(figures['recalled'])}/{recall_questions})"
        )
    if "baseline" in report:
        share = report["this checkout"]["tokens"] / max(1, report["baseline"]["tokens"])
        met = share <= TARGET_SHARE and report["this checkout"]["recall"] >= report["baseline"]["recall"]
        print(
            f"  share of the baseline's tokens: {share:.1%} (target <= {TARGET_SHARE:.0%}, recall not lower): "
            f"{'met' if met else 'NOT met'}"
        )
    return 0


def write_results(report: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    recall_questions = sum(turn.kind == "recall" for turn in SESSION)
    baseline_tokens = report.get("baseline", {}).get("tokens")
    rows = []
    for label, figures in report.items():
        tokens = f"{figures['tokens']:,}"
        if baseline_tokens and label != "baseline":
            tokens += f" ({figures['tokens'] / baseline_tokens:.1%})"
        kinds = ", ".join(f"{kind} {count:,}" for kind, count in figures["tokens_by_kind"].items())
        name = args.baseline_label if label == "baseline" else "this release"
        rows.append((name, tokens, kinds, figures["blocks"], f"{sum(figures['recalled'])} / {recall_questions}"))
    header = (
        "hooks",
        "tokens injected (cl100k)",
        "by prompt kind",
        "blocks",
        "questions answered by what was injected",
    )
    write(
        "bench_injection-embeddings" if args.embeddings else "bench_injection",
        f"Tokens a {len(SESSION)}-turn Claude Code session is given, "
        + ("local embeddings on" if args.embeddings else "words alone"),
        markdown_table(header, rows),
        f"One scripted session across three projects: coding prompts, bare acknowledgements and {recall_questions} "
        "questions whose answers were said in earlier sessions, every hook run as Claude Code runs it. A question "
        "counts as answered when its answer is in what the session was given so far.",
    )


if __name__ == "__main__":
    raise SystemExit(main())
