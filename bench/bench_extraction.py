#!/usr/bin/env python3
"""Extraction quality and cost against a real LLM endpoint: what facts the updater stores from
short conversations, how often the LLM's reply is usable, how long updates take and how big
their prompts are.

Only the public core API is used (Settings, MemoryService.add_memory / flush_memory /
get_user_profile / close, models from memory_mcp.models), so the bench keeps working while the
updater's prompt and reply format change. For each conversation of the labelled set
(bench/extraction_set.json): a fresh temporary data directory, its exchanges added, one
flush_memory, then the stored facts read back with get_user_profile and scored by the set's
matchers. The LLM traffic goes through a recording proxy on 127.0.0.1, whose URL path carries
the conversation's tag, so every call (retries included) is attributed to its conversation
without looking inside the product.

Figures:
  valid replies  flushes whose update reached the endpoint (the proxy saw at least one call)
                 and that report llm_calls > 0 and no errors, over those flushes.
  precision      stored facts matching some expected matcher (content and category) / stored facts.
  recall         expected matchers met by some stored fact / expected matchers. Both micro-averaged.
  must_not       stored facts matching a must_not matcher (counted apart from precision).
  latency        p50/p95 of each proxied call's wall time (all statuses) and of each whole flush.
  prompt tokens  per call: the endpoint's usage.prompt_tokens when it reports a positive number,
                 else tiktoken cl100k_base over the message texts (chat-template overhead not counted).

Usage:  .venv/bin/python bench/bench_extraction.py --base-url http://127.0.0.1:11434/v1 --model qwen2.5:7b
        [--api-key KEY (default $OPENAI_API_KEY)] [--set PATH] [--limit N] [--timeout S] [--json]
Exits 0 with a report; 1 with one line if the set cannot be read or the endpoint is unreachable.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import re
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from bench.stats import percentile
from memory_mcp.base.settings import Settings
from memory_mcp.models import AddMemoryRequest, Fact, FlushRequest, FlushResult, ProfileRequest
from memory_mcp.recall.token_count import TokenCounter
from memory_mcp.service.memory_service import MemoryService

# The proxy is on 127.0.0.1: make sure no proxy setting in the environment reroutes the product's calls to it.
for _name in ("NO_PROXY", "no_proxy"):
    os.environ[_name] = ",".join(filter(None, [os.environ.get(_name, ""), "127.0.0.1", "localhost"]))

DEFAULT_SET = Path(__file__).resolve().parent / "extraction_set.json"
USER_ID = "bench"
DEBOUNCE_SECONDS = 300  # the longest allowed: the bench's flush is the only update (no workers are started either)
REACHABILITY_TIMEOUT_S = 10.0
FORWARDED_HEADERS = ("Content-Type", "Authorization", "Accept")
PROXY_PATH = re.compile(r"/(?P<tag>[\w-]+)/v1/chat/completions")


# --- the labelled set -------------------------------------------------------------------------


def load_set(path: Path) -> list[dict[str, Any]]:
    """The conversations, checked up front so that a typo in the set fails before any LLM call."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"bench_extraction: cannot read the set {path}: {exc}") from None
    conversations = data.get("conversations") if isinstance(data, dict) else None
    if not isinstance(conversations, list) or not conversations:
        raise SystemExit(f"bench_extraction: {path}: needs a non-empty 'conversations' list")
    for number, conversation in enumerate(conversations):
        where = f"{path}: conversations[{number}]"
        exchanges = conversation.get("exchanges") if isinstance(conversation, dict) else None
        if not isinstance(exchanges, list) or not exchanges or not isinstance(conversation.get("id"), str):
            raise SystemExit(f"bench_extraction: {where}: needs an 'id' and a non-empty 'exchanges' list")
        if any(not isinstance(e, dict) or {"user_input", "agent_response"} - e.keys() for e in exchanges):
            raise SystemExit(f"bench_extraction: {where}: each exchange needs user_input and agent_response")
        for matcher in [*conversation.get("expected", []), *conversation.get("must_not", [])]:
            groups = matcher.get("all_of") if isinstance(matcher, dict) else None
            if not groups or any(not group or not all(isinstance(word, str) for word in group) for group in groups):
                raise SystemExit(f"bench_extraction: {where}: bad matcher {matcher!r}")
    return conversations


def matches(matcher: dict[str, Any], fact: Fact, check_category: bool = True) -> bool:
    """Every group has an alternative in the fact's content (case-insensitive substring), and
    the category agrees when the matcher names one."""
    content = fact.content.casefold()
    if not all(any(word.casefold() in content for word in group) for group in matcher["all_of"]):
        return False
    return not check_category or matcher.get("category") in (None, fact.category)


def describe(matcher: dict[str, Any]) -> str:
    words = " + ".join("|".join(group) for group in matcher["all_of"])
    return f"{words} [{matcher['category']}]" if matcher.get("category") else words


# --- running one conversation -----------------------------------------------------------------


def run_conversation(
    number: int, conversation: dict[str, Any], proxy: RecordingProxy, args: argparse.Namespace
) -> Outcome:
    """Add the exchanges to a fresh memory, flush once, and read back the stored facts."""
    tag = f"c{number}"
    with tempfile.TemporaryDirectory(prefix="bench-extraction-") as tmp:
        settings = Settings(
            data_storage_path=Path(tmp),
            openai_base_url=proxy.base_url(tag),
            openai_api_key=args.api_key,
            llm_model=args.model,
            memory={"debounce_seconds": DEBOUNCE_SECONDS, "llm_timeout_seconds": args.timeout},
        )
        service = MemoryService(settings)
        try:
            for exchange in conversation["exchanges"]:
                service.add_memory(
                    AddMemoryRequest.build(
                        user_id=USER_ID,
                        user_input=exchange["user_input"],
                        agent_response=exchange["agent_response"],
                    )
                )
            began = time.perf_counter()
            flush = service.flush_memory(FlushRequest.build(user_id=USER_ID))
            flush_s = time.perf_counter() - began
            facts = service.get_user_profile(ProfileRequest.build(user_id=USER_ID)).facts or []
        finally:
            service.close()
    proxy.settle(tag, args.timeout + REACHABILITY_TIMEOUT_S)
    return Outcome(conversation, flush, flush_s, facts, proxy.calls(tag))


def prompt_tokens(call: Call, counter: TokenCounter) -> tuple[int, str]:
    """The endpoint's own count when it gives one, else tiktoken over the message texts."""
    if call.prompt_tokens:
        return call.prompt_tokens, "usage"
    messages = call.request.get("messages") or []
    return sum(counter.count(str(m.get("content") or "")) for m in messages if isinstance(m, dict)), counter.method


def check_reachable(base_url: str) -> None:
    """Fail early, in one line, when nothing answers at the endpoint (any HTTP answer will do)."""
    try:
        with urllib.request.urlopen(endpoint_url(base_url, "/models"), timeout=REACHABILITY_TIMEOUT_S):
            pass
    except urllib.error.HTTPError:
        pass  # it answered: unauthorised or no /models route is still reachable
    except (OSError, ValueError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise SystemExit(f"bench_extraction: endpoint {shown_url(base_url)} is unreachable: {reason}") from None


def endpoint_url(base_url: str, route: str) -> str:
    """A route under the base URL, appended to its path so that a query string stays a query string."""
    parts = urlsplit(base_url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + route))


def shown_url(url: str) -> str:
    """The endpoint as it may be printed: no user, password or query string (which may hold a key)."""
    parts = urlsplit(url)
    netloc = f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname or ""
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def _positive_int(value: object) -> int | None:
    """A token count worth reporting: some endpoints send 0 (or nothing) when they do not count."""
    return value if isinstance(value, int) and value > 0 else None


# --- figures ----------------------------------------------------------------------------------


def summarise(outcomes: Sequence[Outcome], counter: TokenCounter, args: argparse.Namespace) -> dict[str, Any]:
    """Every figure of the report, as one JSON-ready object."""
    called = [o for o in outcomes if o.calls]
    valid = [o for o in called if o.valid]
    calls = [call for o in outcomes for call in o.calls]
    tokens = [prompt_tokens(call, counter) for call in calls]
    completion = [call.completion_tokens for call in calls if call.completion_tokens]
    stored = sum(len(o.facts) for o in outcomes)
    precise = sum(o.precise for o in outcomes)
    expected = sum(len(o.expected) for o in outcomes)
    met = sum(o.met for o in outcomes)
    return {
        "model": args.model,
        "base_url": shown_url(args.base_url),
        "conversations": len(outcomes),
        "valid_replies": {
            **ratio(len(valid), len(called)),
            "counts": "flushes with llm_calls > 0 and no errors, over flushes that made at least one LLM call",
        },
        "precision": {**ratio(precise, stored), "counts": "stored facts matching an expected matcher / stored facts"},
        "recall": {**ratio(met, expected), "counts": "expected matchers met by a stored fact / expected matchers"},
        "must_not_violations": sum(len(o.violations) for o in outcomes),
        "category_misses": sum(len(o.category_misses) for o in outcomes),
        "llm_call_seconds": spread([call.wall_s for call in calls]),
        "flush_seconds": spread([o.flush_s for o in outcomes]),
        "prompt_tokens_per_call": {
            **spread([float(count) for count, _source in tokens]),
            "source": dict(Counter(source for _count, source in tokens)),
        },
        "completion_tokens_per_call": spread([float(count) for count in completion]),
        "http_statuses": dict(Counter(str(call.status) for call in calls)),
        "finish_reasons": dict(Counter(str(call.finish_reason) for call in calls if call.status == 200)),
        "per_conversation": [o.as_json(counter) for o in outcomes],
    }


def ratio(part: int, whole: int) -> dict[str, Any]:
    return {"count": part, "of": whole, "rate": round(part / whole, 4) if whole else None}


def spread(values: Sequence[float]) -> dict[str, Any]:
    """n, p50, p95 (nearest rank) and mean; the percentiles are None when there is nothing to rank."""
    if not values:
        return {"n": 0, "p50": None, "p95": None, "mean": None}
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), 3),
        "p95": round(percentile(values, 95), 3),
        "mean": round(sum(values) / len(values), 3),
    }


def print_report(outcomes: Sequence[Outcome], figures: dict[str, Any], counter: TokenCounter) -> None:
    header = f"{'conversation':<20} {'lang':<4} {'calls':>5} {'valid':>5} {'facts':>5} {'precise':>7} "
    header += f"{'recall':>6} {'must_not':>8} {'flush s':>8} {'LLM s':>7} {'prompt tok':>10}"
    print(header)
    print("-" * len(header))
    for outcome in outcomes:
        row = outcome.as_json(counter)
        tokens = sum(row["prompt_tokens"])
        print(
            f"{row['id']:<20} {row['language']:<4} {len(outcome.calls):>5} {'yes' if outcome.valid else 'no':>5} "
            f"{len(outcome.facts):>5} {f'{outcome.precise}/{len(outcome.facts)}':>7} "
            f"{f'{outcome.met}/{len(outcome.expected)}':>6} {len(outcome.violations):>8} {outcome.flush_s:>8.2f} "
            f"{sum(call.wall_s for call in outcome.calls):>7.2f} {tokens:>10}"
        )
        for fact in outcome.facts:
            mark = "!" if fact in outcome.violations else "+" if outcome.is_precise(fact) else "x"
            print(f"    {mark} [{fact.category}] {fact.content}")
        for matcher in outcome.missed:
            print(f"    - missed: {describe(matcher)}")
        for error in outcome.flush.errors:
            print(f"    error: {error}")
    print("    (+ matches an expected matcher, x matches none, ! matches a must_not matcher)")
    print()
    print(f"model {figures['model']} at {figures['base_url']}, {figures['conversations']} conversations")
    rows = [("valid replies", figures["valid_replies"]), ("fact precision", figures["precision"])]
    rows.append(("fact recall", figures["recall"]))
    for name, value in rows:
        rate = "n/a" if value["rate"] is None else f"{value['rate']:.1%}"
        print(f"  {name:<22} {value['count']:>3}/{value['of']:<3} {rate:>7}   {value['counts']}")
    violations = figures["must_not_violations"]
    print(f"  {'must_not violations':<22} {violations:>3}{'':13}stored facts matching a must_not matcher")
    print(
        f"  {'category misses':<22} {figures['category_misses']:>3}{'':13}"
        "expected matchers whose words matched only facts of another category"
    )
    for name, key, unit in (
        ("LLM call latency", "llm_call_seconds", "s per proxied call, all statuses"),
        ("flush latency", "flush_seconds", "s per flush_memory"),
        ("prompt tokens", "prompt_tokens_per_call", "per LLM call: one per update unless retried"),
        ("completion tokens", "completion_tokens_per_call", "per call, as the endpoint reports them"),
    ):
        value = figures[key]
        if not value["n"]:
            print(f"  {name:<22} none reported")
            continue
        print(
            f"  {name:<22} p50 {value['p50']:g}  p95 {value['p95']:g}  mean {value['mean']:g}  (n={value['n']}; {unit})"
        )
    sources = figures["prompt_tokens_per_call"]["source"]
    if sources:
        named = {"usage": "endpoint usage.prompt_tokens", "tiktoken": "tiktoken cl100k_base on message texts"}
        named["char"] = "character estimate on message texts (tiktoken unavailable)"
        print("  prompt tokens counted by: " + ", ".join(f"{named[k]} ({n} calls)" for k, n in sources.items()))
    print(f"  HTTP statuses: {figures['http_statuses'] or 'none'}")
    print(f"  finish reasons of 200 replies: {figures['finish_reasons'] or 'none'}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Extraction quality and cost of an LLM endpoint.")
    parser.add_argument("--base-url", required=True, metavar="URL", help="e.g. http://127.0.0.1:11434/v1")
    parser.add_argument("--model", required=True, metavar="NAME", help="chat model, e.g. qwen2.5:7b")
    parser.add_argument(
        "--api-key", metavar="KEY", default=os.environ.get("OPENAI_API_KEY"), help="default: $OPENAI_API_KEY"
    )
    parser.add_argument("--set", type=Path, default=DEFAULT_SET, metavar="PATH", help="labelled conversations (JSON)")
    parser.add_argument("--limit", type=int, metavar="N", help="run only the first N conversations")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="S", help="seconds per LLM call, (0, 600]")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    args = parser.parse_args(argv)
    if not 0 < args.timeout <= 600:
        parser.error("--timeout must be in (0, 600]")
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    conversations = load_set(args.set)[: args.limit]
    check_reachable(args.base_url)
    # Retries and leftovers are reported per conversation from flush_memory; the log lines would repeat them.
    logging.getLogger("memory_mcp").setLevel(logging.ERROR)
    preload_client()
    counter = TokenCounter("tiktoken")
    proxy = RecordingProxy(args.base_url, args.timeout)
    outcomes = []
    try:
        for number, conversation in enumerate(conversations):
            outcomes.append(run_conversation(number, conversation, proxy, args))
            if not args.json:
                print(f"  ran {conversation['id']} ({number + 1}/{len(conversations)})", file=sys.stderr)
    finally:
        proxy.stop()
    figures = summarise(outcomes, counter, args)
    if args.json:
        print(json.dumps(figures, ensure_ascii=False, indent=1))
    else:
        print_report(outcomes, figures, counter)
    return 0


def preload_client() -> None:
    """The product imports `openai` on its first call; importing it now keeps that second or so
    out of the first conversation's flush time."""
    try:
        import openai  # noqa: F401
    except ImportError:
        pass  # the first flush then reports the problem itself


# --- the recording proxy and the records ------------------------------------------------------


@dataclass
class Call:
    """One chat-completions call as the proxy saw it."""

    request: dict[str, Any]
    status: int
    wall_s: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


@dataclass
class Outcome:
    """One conversation's flush, stored facts and LLM calls, scored against its matchers."""

    conversation: dict[str, Any]
    flush: FlushResult
    flush_s: float
    facts: list[Fact]
    calls: list[Call]
    expected: list[dict[str, Any]] = field(init=False)
    violations: list[Fact] = field(init=False)

    def __post_init__(self) -> None:
        self.expected = list(self.conversation.get("expected", []))
        must_not = self.conversation.get("must_not", [])
        self.violations = [fact for fact in self.facts if any(matches(m, fact) for m in must_not)]

    @property
    def valid(self) -> bool:
        return bool(self.calls) and self.flush.llm_calls > 0 and not self.flush.errors

    def is_precise(self, fact: Fact) -> bool:
        return any(matches(matcher, fact) for matcher in self.expected)

    @property
    def precise(self) -> int:
        return sum(self.is_precise(fact) for fact in self.facts)

    @property
    def missed(self) -> list[dict[str, Any]]:
        return [m for m in self.expected if not any(matches(m, fact) for fact in self.facts)]

    @property
    def met(self) -> int:
        return len(self.expected) - len(self.missed)

    @property
    def category_misses(self) -> list[dict[str, Any]]:
        return [m for m in self.missed if any(matches(m, fact, check_category=False) for fact in self.facts)]

    def as_json(self, counter: TokenCounter) -> dict[str, Any]:
        return {
            "id": self.conversation["id"],
            "language": self.conversation.get("language", "?"),
            "llm_calls_seen": len(self.calls),
            "valid_reply": self.valid,
            "flush": {"llm_calls": self.flush.llm_calls, "errors": self.flush.errors},
            "facts": [
                {
                    "content": fact.content,
                    "category": fact.category,
                    "confidence": fact.confidence,
                    "matched": self.is_precise(fact),
                }
                for fact in self.facts
            ],
            "precise": self.precise,
            "expected": len(self.expected),
            "met": self.met,
            "missed": [describe(m) for m in self.missed],
            "must_not_violations": [f.content for f in self.violations],
            "flush_seconds": round(self.flush_s, 3),
            "llm_call_seconds": [round(call.wall_s, 3) for call in self.calls],
            "prompt_tokens": [prompt_tokens(call, counter)[0] for call in self.calls],
        }


class RecordingProxy:
    """Forwards POST /<tag>/v1/chat/completions to the real endpoint and records each call.

    The tag in the path names the conversation, so calls are attributed exactly even when a
    timed-out call is still running upstream after its flush has given up on it.
    """

    def __init__(self, upstream: str, timeout: float) -> None:
        self._upstream = endpoint_url(upstream, "/chat/completions")
        self._timeout = timeout
        self._calls: dict[str, list[Call]] = {}
        self._in_flight: Counter[str] = Counter()
        self._condition = threading.Condition()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                match = PROXY_PATH.fullmatch(self.path)
                if match is None:
                    self._send(404, b'{"error": {"message": "bench proxy: unknown path"}}')
                    return
                headers = {name: value for name in FORWARDED_HEADERS if (value := self.headers.get(name))}
                self._send(*proxy.forward(match["tag"], body, headers))

            def _send(self, status: int, payload: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the product gave up waiting (its timeout); the call is recorded all the same

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def base_url(self, tag: str) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/{tag}/v1"

    def forward(self, tag: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """Send one call upstream and record it; an upstream that fails to answer becomes a 502."""
        with self._condition:
            self._in_flight[tag] += 1
        try:
            call, payload = self._call_upstream(body, headers)
            with self._condition:
                self._calls.setdefault(tag, []).append(call)
            return call.status, payload
        finally:
            with self._condition:
                self._in_flight[tag] -= 1
                self._condition.notify_all()

    def _call_upstream(self, body: bytes, headers: dict[str, str]) -> tuple[Call, bytes]:
        began = time.perf_counter()
        try:
            request = urllib.request.Request(self._upstream, data=body, headers=headers, method="POST")
            # A little longer than the product waits, so a slow call is still measured to its end.
            with urllib.request.urlopen(request, timeout=self._timeout + 5) as response:
                status, payload = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, payload = exc.code, exc.read()
        except (OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            error = {"error": {"message": f"bench proxy: upstream failed: {reason}"}}
            status, payload = 502, json.dumps(error).encode()
        call = Call(request=_json_object(body), status=status, wall_s=time.perf_counter() - began)
        if status == 200:
            reply = _json_object(payload)
            usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
            call.prompt_tokens = _positive_int(usage.get("prompt_tokens"))
            call.completion_tokens = _positive_int(usage.get("completion_tokens"))
            choices = reply.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], dict):
                call.finish_reason = choices[0].get("finish_reason")
        return call, payload

    def settle(self, tag: str, timeout: float) -> None:
        """Wait until no call of `tag` is still running upstream, so its record is complete."""
        with self._condition:
            self._condition.wait_for(lambda: self._in_flight[tag] == 0, timeout)

    def calls(self, tag: str) -> list[Call]:
        with self._condition:
            return list(self._calls.get(tag, []))

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


if __name__ == "__main__":
    sys.exit(main())
