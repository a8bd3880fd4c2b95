"""Hostile input, fuzzed: bad input changes nothing and gets a clear error; no input crashes or hangs.

Two layers:

- In-process, through the MCP layer: every tool's arguments drawn by hypothesis (wrong types,
  text beyond max_text_chars, meta_data too deep or too big, control characters, NUL, lone
  surrogates, path-like ids, NaN and Infinity, odd timestamps, unknown arguments, deeply nested
  import documents) and sent with the SDK's in-process `Client`, so the ValidateArguments
  middleware and the SDK's own handling run as in production. Values the client cannot carry
  (NaN, which its JSON mode turns into null; anything it refuses to serialise) are also sent to
  `server.call_tool` directly. After every call: it returned (success or a deliberate error,
  never a crash), the data directory is valid, and a call that failed left it byte-identical.
- Over the real stdio server: the nastiest inputs, raw JSON-RPC lines included, sent to one
  process, which must still answer a normal add/retrieve correctly with nothing but JSON-RPC on
  stdout.

The bugs the fuzz found are pinned as regression tests at the end (they were xfail(strict=True)
until fixed).

`pytest tests/test_fuzz.py -q -s` (or -rP) prints how many examples each tool received.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client, MCPError
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from stdio_helpers import RawServer, snapshot, write_config

from memory_mcp.base.errors import InvalidInput, MemoryServiceError
from memory_mcp.base.settings import Settings
from memory_mcp.mcp.server import build_server
from memory_mcp.memory import sessions
from memory_mcp.models import (
    AddFactRequest,
    AddMemoryRequest,
    DeleteFactRequest,
    ExportRequest,
    ImportRequest,
    MemoryDocument,
    Page,
    UpdateFactRequest,
)
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope, durable
from memory_mcp.store.files.layout import identifier_of

pytestmark = pytest.mark.integration

MAX_TEXT = 300  # max_text_chars, small so that "beyond the limit" stays fast
MAX_META = 1024  # max_meta_data_bytes
CALL_TIMEOUT = 20.0  # seconds; a call taking longer counts as a hang
READ_ONLY_TOOLS = {
    "retrieve_memory",
    "get_user_profile",
    "search_facts",
    "export_memory",
    "memory_status",
    "flush_memory",
}
# Examples per tool: ~3000 calls in all, well under a minute. Reading tools cost more per call.
EXAMPLES = {
    "add_memory": 400,
    "retrieve_memory": 200,
    "get_user_profile": 250,
    "flush_memory": 200,
    "search_facts": 250,
    "add_fact": 300,
    "update_fact": 300,
    "delete_fact": 250,
    "forget": 250,
    "export_memory": 200,
    "import_memory": 250,
    "memory_status": 100,
}
TOOLS = sorted(EXAMPLES)
ALLOWED_FILES = {"memory.json", "pages.jsonl"}
LOCK_FILE = re.compile(r"(?P<user>[^@]+)(?:@(?P<agent>[^@]+))?\.(?:log|doc|update)\.lock")

COUNTS: Counter[tuple[str, str, str]] = Counter()  # (tool, path, outcome) -> calls


# --- hostile values -------------------------------------------------------------------------

SPECIAL_CHARS = [
    "\x00", "\x01", "\x08", "\x1b", "\x7f", "\n", "\r", "\r\n", "\t", "\x0b", "\x0c", "\x1c", "\x1e",
    "\x85", "\u2028", "\u2029", "\u200b", "\u200d", "\u202e", "\u2066", "\ufeff", "\ufffd", "\U0010ffff",
    "\ud800", "\udfff", "\udbff\udfff", "<", ">", "&", '"', "\\", "/", "..", "%", "{", "}", "é", "𝔘", "\u0301",
]  # fmt: skip
VALID_IDS = ["alice", "bob", "A-1_b", "a" * 128, "x", "_", "-", "bo@x.org", "Bo.Smith+tag@Corp.COM"]
HOSTILE_IDS = [
    "../x", "a/b", "C:\\x", "c:x", ".", "..", "", " ", "a" * 65, "alice\n", "alice\r\n", "alice ", " alice",
    "аlice", "ａlice", "alice\u200b", "al\x00ice", "alice/../bob", "~root", "%2e%2e", "a\ud800", "*", "alice;rm",
    "bob\t", "users", "agents", "ALICE\u0000", "con", "\\\\server\\share", "/etc/passwd", "alice/", "a.b",
    "a" * 129, ".hidden", "@x.org", "+x", "a@b/../c", "a%40b", "bo@x.org\n", "bo@x.org.",
]  # fmt: skip
TIMESTAMPS = [
    "2024-05-01T13:56:00Z", "2024-05-01 13:56:00", "2024-05-01", "2024-02-30T00:00:00Z", "0000-01-01T00:00:00Z",
    "0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00", "9999-12-31T23:59:59Z", "2024-05-01T25:00:00",
    "2024-05-01T13:56:00+24:00", "2024-05-01T13:56:00.123456789Z", "  2024-05-01T13:56:00Z\n", "\n2024-05-01",
    "2024-W18-3", "20240501T135600Z", "1714571760", "now", "", " ", "NaN", "2024-05-01T13:56:00Z\x00",
    "２０２４-05-01", "-2024-05-01", "+002024-05-01", "2024-05-01T13:56:00\u2028", "2024-05-01T13:56:00+05:30:15",
]  # fmt: skip
IMPORT_DEPTHS = [31, 32, 33, 34, 100, 150, 189, 199, 210, 250, 300, 1000, 3000]
META_DEPTHS = [31, 32, 33, 34, 100, 250, 1000, 3000]

chars = st.one_of(st.characters(), st.sampled_from([char for char in SPECIAL_CHARS if len(char) == 1]))
short_text = st.one_of(
    st.text(chars, max_size=40),
    st.lists(st.one_of(st.sampled_from(SPECIAL_CHARS), st.text(chars, max_size=5)), max_size=8).map("".join),
)
texts = st.one_of(
    short_text,
    st.sampled_from(["", " ", "\n\t", "hello world", "tea with milk"]),
    # At, just under and beyond max_text_chars; and far beyond it.
    st.builds(
        lambda char, size: char * size,
        st.sampled_from(["x", "é", "𝔘", "\x00", " ", "\n", "\ud800"]),
        st.sampled_from([MAX_TEXT - 1, MAX_TEXT, MAX_TEXT + 1, 10 * MAX_TEXT]),
    ),
)
wrong_types = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
ids = st.one_of(
    st.sampled_from(VALID_IDS),
    st.sampled_from(HOSTILE_IDS),
    st.text(chars, max_size=70),
    st.from_regex(r"[A-Za-z0-9_-]{60,70}", fullmatch=True),
    wrong_types,
)
json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    short_text,
)
json_values = st.recursive(
    json_leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(short_text, children, max_size=4),
    max_leaves=15,
)


class _Shown:
    """Printed as how it was made: hypothesis's pretty printer (and repr) would recurse through
    thousands of levels, and fail, when reporting an example."""

    made: str

    def __repr__(self) -> str:
        return self.made

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.made)


class DeepDict(_Shown, dict):  # type: ignore[type-arg]
    pass


class DeepList(_Shown, list):  # type: ignore[type-arg]
    pass


def nested(depth: int, shape: str) -> Any:
    """A value `depth` levels deep: objects, arrays, or both by turns."""
    value: Any = "bottom"
    for level in range(depth):
        as_list = shape == "list" or (shape == "mixed" and level % 2)
        value = [value] if as_list else {"a": value}
    shown = DeepList(value) if isinstance(value, list) else DeepDict(value)
    shown.made = f"nested({depth}, {shape!r})"
    return shown


def deep_values(depths: list[int]) -> st.SearchStrategy[Any]:
    return st.builds(nested, st.sampled_from(depths), st.sampled_from(["dict", "list", "mixed"]))


def big_meta(size: int, char: str) -> dict[str, Any]:
    """meta_data whose compact JSON is `size` bytes (given a 1- or 2-byte `char`)."""
    width = len(char.encode())
    return {"k": char * max(0, (size - len('{"k":""}')) // width)}


anything = st.one_of(wrong_types, texts, json_values, st.sampled_from(HOSTILE_IDS))
meta_data = st.one_of(
    st.dictionaries(short_text, json_values, max_size=5),
    deep_values(META_DEPTHS).map(lambda value: {"deep": value}),
    st.builds(
        big_meta, st.sampled_from([MAX_META - 1, MAX_META, MAX_META + 1, 50 * MAX_META]), st.sampled_from(["x", "é"])
    ),
    wrong_types,
    st.just({}),
)
timestamps = st.one_of(
    st.sampled_from(TIMESTAMPS),
    st.builds(
        lambda moment, offset: moment.isoformat() + offset,
        st.datetimes(),
        st.sampled_from(["", "Z", "+05:00", "-05:00", "+23:59", "-23:59"]),
    ),
    texts,
    wrong_types,
)
categories = st.one_of(
    st.sampled_from(["preference", "knowledge", "context", "behavior", "goal", "correction"]),
    st.sampled_from(["", "Preference", "other", "correction ", "fact"]),
    wrong_types,
)
confidences = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 0.0, 1.0, -0.0, 1.0000001, -1e-300, 5e-324, 0.5]),
    st.sampled_from(["0.5", "NaN", "Infinity", "1e400", "", "high"]),
    wrong_types,
)
small_ints = st.one_of(
    st.integers(-5, 600),
    st.sampled_from([0, 1, 99, 100, 101, 500, 501, 8000, 8001, 2**63, -(2**63)]),
    st.sampled_from(["10", "1e2", "ten", ""]),
    st.floats(allow_nan=True, allow_infinity=True),
    wrong_types,
)
bools = st.one_of(st.booleans(), st.sampled_from(["true", "false", "yes", "0", "", "True "]), wrong_types)
modes = st.one_of(
    st.sampled_from(["merge", "replace"]), st.sampled_from(["", "MERGE", "overwrite", "merge "]), wrong_types
)
thread_ids = st.one_of(
    st.sampled_from(["t1", "thread-2", "x" * 256, "x" * 257, "a\nb", "tab\there"]), texts, wrong_types
)


# --- the live world: a service behind an MCP server, an in-process client, and what is stored ---


class World:
    """One data directory, its service and server, and an in-process client talking to it.

    State accumulates across the examples of a tool, so calls meet real users, agents and facts.
    """

    def __init__(self, base: Path, portal: BlockingPortal) -> None:
        self.base = base
        self.root = base / "data"
        self.portal = portal
        self.validated: set[str] = set()  # digests of files already checked
        self._connect()
        self._seed()

    def _connect(self) -> None:
        self.service = MemoryService(
            Settings(
                data_storage_path=self.root,
                max_text_chars=MAX_TEXT,
                max_meta_data_bytes=MAX_META,
                short_term_capacity=3,
            )
        )
        self.server = build_server(self.service)
        self._client_cm = self.portal.wrap_async_context_manager(Client(self.server))
        self.client = self._client_cm.__enter__()

    def close(self) -> None:
        self._client_cm.__exit__(None, None, None)
        self.service.close()

    def rebuild(self) -> None:
        """A fresh service and client over the same directory (after it was restored)."""
        self.close()
        self._connect()

    def _seed(self) -> None:
        for user, agent in (("alice", None), ("bob", None), ("alice", "helper")):
            for number in range(4):
                self.service.add_memory(
                    AddMemoryRequest.build(
                        user_input=f"{user} drinks tea, day {number}",
                        agent_response="Noted.",
                        user_id=user,
                        agent_name=agent,
                    )
                )
            for content, category in (("works at the harbour", "context"), ("never call me Al", "correction")):
                self.service.add_fact(
                    AddFactRequest.build(content=f"{user} {content}", category=category, user_id=user, agent_name=agent)
                )

    # -- live values for the strategies --

    def facts(self) -> list[tuple[Scope, str]]:
        found = []
        for scope in self.service.store.list_scopes():
            try:
                facts = self.service.store.read_document(scope).facts
                found += [(scope, fact.id) for fact in facts if fact.validTo is None]  # ones that still hold
            except MemoryServiceError:
                pass  # a damaged document: the fuzz reports it elsewhere
        return found

    def owned_fact(self, number: int) -> dict[str, Any]:
        """A fact id together with the user (and agent) that owns it."""
        facts = self.facts()
        if not facts:
            return {"fact_id": "fact_0000000000000000"}
        scope, fact_id = facts[number % len(facts)]
        owner: dict[str, Any] = {"fact_id": fact_id, "user_id": scope.user_id}
        if scope.agent_name is not None:
            owner["agent_name"] = scope.agent_name
        return owner

    def fact_id(self, number: int) -> str:
        return self.owned_fact(number)["fact_id"]

    def export(self, number: int) -> dict[str, Any]:
        """The export document of a stored user, as JSON: the base that import documents mutate."""
        users = self.service.store.list_users()
        if users:
            user = users[number % len(users)]
            with contextlib.suppress(MemoryServiceError):
                return self.service.export_memory(ExportRequest.build(user_id=user)).model_dump(mode="json")
        return {
            "format": "memory-mcp/export",
            "version": 1,
            "exported_at": "",
            "user_id": "carol",
            "memory": {},
            "pages": [],
        }

    # -- calling --

    def via_client(self, tool: str, arguments: dict[str, Any]) -> tuple[str, str]:
        """(outcome, text) of the call as a host makes it: ok, error, crash, or unsendable."""
        try:
            result = self.portal.call(_bounded, self.client.call_tool, tool, arguments)
        except MCPError as exc:
            return "crash", f"protocol error instead of a tool result: {exc}"
        except TimeoutError:
            raise AssertionError(f"{tool} hung for {CALL_TIMEOUT}s with {_short(arguments)}") from None
        except Exception as exc:  # noqa: BLE001  # the client could not serialise the request: it never left
            return "unsendable", f"{type(exc).__name__}: {exc}"
        text = "\n".join(block.text for block in result.content if getattr(block, "text", None))
        if not result.is_error:
            return "ok", text
        # The SDK says only "Error executing tool X" when the tool raised something unplanned.
        return ("crash" if text.strip() == f"Error executing tool {tool}" else "error"), text

    def direct(self, tool: str, arguments: dict[str, Any]) -> tuple[str, str]:
        """(outcome, text) of `server.call_tool`, which takes Python values as they are."""
        try:
            self.portal.call(_bounded, self.server.call_tool, tool, arguments)
        except TimeoutError:
            raise AssertionError(f"{tool} hung for {CALL_TIMEOUT}s with {_short(arguments)}") from None
        except UnexpectedToolError as exc:
            return "crash", f"{exc} <- {type(exc.__cause__).__name__}: {exc.__cause__}"
        except ToolError as exc:
            return "error", str(exc)
        except Exception as exc:  # noqa: BLE001  # anything else escaping the SDK is the worst crash
            return "crash", f"raised out of call_tool: {type(exc).__name__}: {exc}"
        return "ok", ""

    def exercise(self, tool: str, arguments: dict[str, Any]) -> None:
        if tool in ("forget", "delete_fact", "import_memory") and len(self.facts()) < 3:
            self._seed()  # these tools use up the state they need; give them more
        outcome = self._checked(tool, arguments, "client", self.via_client)
        if outcome == "unsendable" or _has_non_finite(arguments):
            known = set(self.server_parameters[tool])
            self._checked(tool, {k: v for k, v in arguments.items() if k in known}, "direct", self.direct)

    @property
    def server_parameters(self) -> dict[str, list[str]]:
        if not hasattr(self, "_parameters"):
            tools = self.portal.call(self.server.list_tools)
            self._parameters = {tool.name: list(tool.input_schema["properties"]) for tool in tools}
        return self._parameters

    def _checked(
        self, tool: str, arguments: dict[str, Any], path: str, call: Callable[[str, dict[str, Any]], tuple[str, str]]
    ) -> str:
        before = snapshot(self.root)
        outcome, text = call(tool, arguments)
        after = snapshot(self.root)
        COUNTS[(tool, path, outcome)] += 1
        where = f"{tool} via {path} with {_short(arguments)}\n-> {outcome}: {text[:500]}"
        problems = data_dir_problems(self.root, after, self.validated)
        changed = _diff(before, after)

        assert outcome != "crash", f"crash (an unplanned exception, or no clear message): {where}"
        assert not problems, f"data directory left invalid: {problems[:3]}\n{where}"
        if outcome == "error":
            assert text.removeprefix(f"Error executing tool {tool}").strip(": "), f"error without a message: {where}"
            assert "Traceback" not in text, where
            assert len(text) < 5000, f"error message of {len(text)} characters: {where}"
        if outcome in ("error", "crash"):
            assert not changed, f"a failed call changed the data directory: {changed[:5]}\n{where}"
        if outcome == "ok" and tool in READ_ONLY_TOOLS:
            assert not changed, f"a reading tool changed the data directory: {changed[:5]}\n{where}"
        return outcome


async def _bounded(function: Callable[..., Any], *args: Any) -> Any:
    with anyio.fail_after(CALL_TIMEOUT):
        return await function(*args)


def _short(value: Any, limit: int = 400) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _has_non_finite(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def json_depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _diff(before: dict[str, tuple[str, str]], after: dict[str, tuple[str, str]]) -> list[str]:
    return sorted(
        [f"+{path}" for path in after.keys() - before.keys()]
        + [f"-{path}" for path in before.keys() - after.keys()]
        + [f"~{path}" for path in before.keys() & after.keys() if before[path] != after[path]]
    )


# --- what a valid data directory is -----------------------------------------------------------


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def data_dir_problems(root: Path, listing: dict[str, tuple[str, str]], validated: set[str]) -> list[str]:
    """Why the directory is not one the server can serve from (empty when it is).

    Layout: users/<dir>/[agents/<dir>/]{memory.json, pages.jsonl}, every <dir> the directory of a
    valid id; locks/<dir>[@<dir>].{log,doc,update}.lock; memory.json strict JSON and a
    MemoryDocument; every pages.jsonl line strict JSON and a Page the store can read back
    (pydantic's JSON parser, as the store uses). Files already checked (by digest) are not parsed again.
    """
    problems = []
    for relative, (kind, digest) in listing.items():
        if relative == ".":
            continue
        parts = Path(relative).parts
        if parts[0] == "locks":
            lock = LOCK_FILE.fullmatch(parts[-1]) if len(parts) == 2 else None
            named = [lock["user"], *([lock["agent"]] if lock["agent"] else [])] if lock else []
            if len(parts) == 2 and (lock is None or any(identifier_of(name) is None for name in named)):
                problems.append(f"{relative}: not a lock file of a valid scope")
            continue
        if parts[0] != "users":
            problems.append(f"{relative}: outside users/ and locks/")
            continue
        names, leaf = parts[1:], None
        if kind == "file":
            names, leaf = parts[1:-1], parts[-1]
        ids_ok = len(names) in (0, 1, 3) and (len(names) < 3 or names[1] == "agents")
        for name in names[:1] + names[2:3]:
            if identifier_of(name) is None:
                ids_ok = False
        if kind == "dir" and len(names) == 2 and names[1] == "agents":
            ids_ok = True
        if not ids_ok:
            problems.append(f"{relative}: not in the layout users/<id>[/agents/<id>]")
            continue
        if leaf is None:
            continue
        if leaf not in ALLOWED_FILES or not names:
            problems.append(f"{relative}: unexpected file (a temp file left behind?)")
            continue
        if digest in validated:
            continue
        problem = _file_problem(root / relative, leaf)
        if problem:
            problems.append(f"{relative}: {problem}")
        else:
            validated.add(digest)
    return problems


def _file_problem(path: Path, name: str) -> str | None:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 ({exc})"
    if name == "memory.json":
        try:
            MemoryDocument.model_validate(json.loads(text, parse_constant=_reject_constant))
        except ValueError as exc:  # JSONDecodeError and ValidationError are ValueErrors
            return f"not a valid memory document: {str(exc)[:200]}"
        return None
    if data and not data.endswith(b"\n"):
        return "last line is unterminated"
    for number, line in enumerate(data.splitlines(), start=1):
        try:
            json.loads(line, parse_constant=_reject_constant)
        except ValueError as exc:
            return f"line {number} is not strict JSON: {exc}"
        try:
            Page.model_validate_json(line)
        except ValueError as exc:
            return f"line {number} cannot be read back as a page: {str(exc)[:200]}"
    return None


# --- the per-tool argument strategies --------------------------------------------------------


def _set_path(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    """`document` with `value` at `path`, creating what is missing on the way (a page or a fact
    where a list must hold one); gives up quietly where a mutation already replaced a container."""
    defaults = {"pages": _page("p-fuzz"), "facts": {"id": "fact_fuzz", "content": "fuzz", "confidence": 0.5}}
    node = document
    for position, key in enumerate(path[:-1]):
        following = path[position + 1]
        if isinstance(node, list) and isinstance(key, int):
            if not node:
                node.append(dict(defaults.get(str(path[position - 1]), {})))
            node = node[0]
            continue
        if not isinstance(node, dict):
            return document
        if not isinstance(node.get(key), dict | list):
            node[key] = [] if isinstance(following, int) else {}
        node = node[key]
    last = path[-1]
    if isinstance(node, dict):
        node[last] = value
    elif isinstance(node, list) and isinstance(last, int):
        node.insert(0, value)
    return document


def _page(page_id: str, **fields: Any) -> dict[str, Any]:
    return {"page_id": page_id, "user_input": "u", "agent_response": "a", "timestamp": "2024-05-01T00:00:00Z", **fields}


IMPORT_PATHS: list[tuple[Any, ...]] = [
    ("user_id",), ("format",), ("version",), ("exported_at",), ("agent_name",), ("pages",), ("memory",),
    ("agents",), ("extra",), ("memory", "facts"), ("memory", "user"), ("memory", "extra"),
    ("memory", "user", "workContext", "summary"), ("memory", "user", "workContext", "extra"),
    ("memory", "analysis", "allBefore"), ("memory", "sessions"), ("memory", "sessions", "s1"),
    ("pages", 0, "timestamp"), ("pages", 0, "page_id"), ("pages", 0, "meta_data"), ("pages", 0, "user_input"),
    ("pages", 0, "thread_id"), ("pages", 0), ("memory", "facts", 0, "confidence"), ("memory", "facts", 0, "content"),
    ("memory", "facts", 0, "id"), ("memory", "facts", 0, "category"), ("memory", "facts", 0, "validTo"),
    ("agents", "helper"), ("agents", "../x"), ("agents", "helper", "pages"), ("memory", "facts", 0),
]  # fmt: skip


def import_documents(world: World) -> st.SearchStrategy[Any]:
    mutation = st.tuples(
        st.sampled_from(IMPORT_PATHS),
        st.one_of(anything, deep_values(IMPORT_DEPTHS), timestamps, ids, st.just(_page("p-dup"))),
    )

    def mutate(base: dict[str, Any], changes: list[tuple[tuple[Any, ...], Any]]) -> dict[str, Any]:
        for path, value in changes:
            base = _set_path(base, path, value)
        return base

    exports = st.builds(mutate, st.integers(0, 100).map(world.export), st.lists(mutation, max_size=3))
    deep_pages = st.builds(
        lambda base, depth, shape: _set_path(base, ("pages", 0, "meta_data"), {"deep": nested(depth, shape)}),
        st.integers(0, 100).map(world.export),
        st.sampled_from(IMPORT_DEPTHS),
        st.sampled_from(["dict", "list", "mixed"]),
    )
    fact = st.fixed_dictionaries(
        {"id": st.one_of(st.text(chars, max_size=10), ids), "content": texts, "confidence": confidences},
        optional={"category": categories, "createdAt": timestamps, "validTo": timestamps, "supersededBy": ids},
    )
    deerflow = st.fixed_dictionaries(
        {
            "user": st.one_of(st.just({}), anything),
            "history": st.one_of(st.just({}), anything),
            "facts": st.lists(fact, max_size=3),
        },
        optional={"version": anything, "extra": st.one_of(anything, deep_values(IMPORT_DEPTHS))},
    )
    return st.one_of(
        exports, exports, deep_pages, deerflow, st.dictionaries(short_text, json_values, max_size=4), wrong_types
    )


def argument_strategies(world: World) -> dict[str, st.SearchStrategy[Any]]:
    return {
        "user_input": texts,
        "agent_response": texts,
        "timestamp": timestamps,
        "meta_data": meta_data,
        "user_id": ids,
        "agent_name": st.one_of(ids, st.just("helper")),
        "thread_id": thread_ids,
        "project": st.one_of(thread_ids, st.just("/home/alice/code/shop"), st.text(max_size=5000)),
        "query": st.one_of(texts, st.just("alice tea harbour")),
        "relationship_with_user": texts,
        "style_hint": texts,
        "max_results": small_ints,
        "max_tokens": small_ints,
        "current_context": texts,
        "include_archived": bools,
        "include_knowledge": bools,
        "include_assistant_knowledge": bools,
        "category": categories,
        "limit": small_ints,
        "include_superseded": bools,
        "content": st.one_of(texts, st.just("a" * 2000), st.just("a" * 2001)),
        "confidence": confidences,
        "fact_id": st.one_of(st.integers(0, 100).map(world.fact_id), ids, st.just("x" * 64), st.just("x" * 65)),
        "confirm": ids,
        "data": import_documents(world),
        "mode": modes,
        "facts": st.one_of(st.none(), st.lists(host_fact(world), max_size=4), anything),
        "profile": st.one_of(st.none(), st.dictionaries(st.one_of(sections, short_text), texts, max_size=3), anything),
        "retry_failed": bools,
        "pinned": st.one_of(bools, anything),
        "expires_at": st.one_of(timestamps, st.just("never")),
        "since": timestamps,
        "until": timestamps,
        "as_of": timestamps,
    }


sections = st.sampled_from(
    ["workContext", "personalContext", "topOfMind", "recentMonths", "earlierContext", "longTermBackground"]
)


def host_fact(world: World) -> st.SearchStrategy[dict[str, Any]]:
    """A fact as a host model might send it with add_memory, often broken somewhere."""
    return st.fixed_dictionaries(
        {"content": texts, "category": categories, "confidence": confidences},
        optional={
            "sourceError": texts,
            "replaces": st.one_of(st.integers(0, 100).map(world.fact_id), ids),
            "pinned": st.one_of(bools, anything),
            "expiresAt": timestamps,
            "extra": anything,
        },
    )


plain_text = st.text(st.characters(codec="utf-8", categories=["L", "N", "Zs", "P"]), min_size=1, max_size=60).filter(
    str.strip
)


def valid_strategies(world: World) -> dict[str, st.SearchStrategy[Any]]:
    """Values each argument accepts: calls built from these succeed, so state grows, and a call
    with just one hostile argument shows that one bad field is enough to change nothing."""
    finite = st.floats(0, 1, allow_nan=False)
    json_safe = st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-1000, 1000)
        | st.floats(allow_nan=False, allow_infinity=False)
        | plain_text,
        lambda children: st.lists(children, max_size=3) | st.dictionaries(plain_text, children, max_size=3),
        max_leaves=6,
    )
    valid_import = st.builds(
        lambda base, user: {**base, "user_id": user} if isinstance(base, dict) else base,
        st.integers(0, 100).map(world.export),
        st.sampled_from(["alice", "bob", "carol", "dave"]),
    )
    return {
        "user_input": plain_text,
        "agent_response": plain_text,
        "timestamp": st.one_of(st.none(), st.sampled_from(TIMESTAMPS[:3]), st.datetimes().map(lambda d: d.isoformat())),
        "meta_data": st.one_of(st.none(), st.dictionaries(plain_text, json_safe, max_size=3)),
        "user_id": st.sampled_from(["alice", "bob", "carol", "A-1_b", ""]),
        "agent_name": st.sampled_from(["helper", "bot", ""]),
        "thread_id": st.sampled_from(["t1", "thread-2", ""]),
        "project": st.sampled_from(["/home/alice/code/shop", "/srv/api", "", "C:\\work\\app"]),
        "query": plain_text,
        "relationship_with_user": plain_text,
        "style_hint": plain_text,
        "max_results": st.integers(1, 100),
        "max_tokens": st.one_of(st.none(), st.integers(100, 8000)),
        "current_context": plain_text,
        "include_archived": st.booleans(),
        "include_knowledge": st.booleans(),
        "include_assistant_knowledge": st.booleans(),
        "category": st.sampled_from(["preference", "knowledge", "context", "behavior", "goal", "correction"]),
        "limit": st.integers(1, 500),
        "include_superseded": st.booleans(),
        "content": plain_text,
        "confidence": finite,
        "fact_id": st.integers(0, 100).map(world.fact_id),
        "confirm": st.sampled_from(["alice", "bob", "carol"]),
        "data": valid_import,
        "mode": st.sampled_from(["merge", "replace"]),
        "facts": st.one_of(
            st.none(),
            st.lists(
                st.fixed_dictionaries(
                    {"content": plain_text, "category": st.sampled_from(["preference", "goal"]), "confidence": finite}
                ),
                max_size=3,
            ),
        ),
        "profile": st.one_of(st.none(), st.dictionaries(sections, plain_text, max_size=2)),
        "retry_failed": st.booleans(),
        "pinned": st.booleans(),
        "expires_at": st.one_of(st.none(), st.sampled_from([*TIMESTAMPS[:3], "never"])),
        "since": st.one_of(st.none(), st.sampled_from(TIMESTAMPS[:3])),
        "until": st.none(),
        "as_of": st.one_of(st.none(), st.sampled_from(TIMESTAMPS[:3])),
    }


UNKNOWN_NAMES = st.one_of(
    st.sampled_from(["userId", "user", "USER_ID", "user_id ", "agentName", "extra", "__proto__", "", "data2", "text"]),
    st.text(chars, max_size=8),
)


def tool_arguments(world: World, tool: str) -> st.SearchStrategy[dict[str, Any]]:
    tool_schema = world.portal.call(world.server.list_tools)
    schema = next(t.input_schema for t in tool_schema if t.name == tool)
    params, required = list(schema["properties"]), set(schema.get("required", []))
    values = argument_strategies(world)
    by_name = {name: values[name] for name in params}
    complete = st.fixed_dictionaries(
        {name: by_name[name] for name in params if name in required},
        optional={name: by_name[name] for name in params if name not in required},
    )
    anything_goes = st.fixed_dictionaries({}, optional=by_name)  # required ones may be missing
    with_unknown = st.builds(
        lambda arguments, extra: {**arguments, **{k: v for k, v in extra.items() if k not in params}},
        complete,
        st.dictionaries(UNKNOWN_NAMES, anything, min_size=1, max_size=2),
    )
    good = valid_strategies(world)
    valid = st.fixed_dictionaries(
        {name: good[name] for name in params if name in required},
        optional={name: good[name] for name in params if name not in required},
    )
    one_bad = (
        st.builds(
            lambda arguments, bad: {**arguments, bad[0]: bad[1]},
            valid,
            st.sampled_from(params).flatmap(lambda name: st.tuples(st.just(name), by_name[name])),
        )
        if params
        else valid
    )
    choices = [valid, one_bad, one_bad, one_bad, complete, complete, anything_goes, with_unknown]
    if tool in ("update_fact", "delete_fact"):  # the fact's real owner, so edits can succeed
        owned = st.builds(
            lambda args, n: {**args, **world.owned_fact(n)}, st.one_of(valid, one_bad), st.integers(0, 100)
        )
        choices += [owned] * 4
    if tool == "forget":  # a confirmation that matches, so erasing is reached
        choices += [st.one_of(valid, one_bad).map(lambda args: {**args, "confirm": args.get("user_id")})] * 3
    return st.one_of(*choices)


# --- the fuzz ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def portal() -> Iterator[BlockingPortal]:
    with start_blocking_portal() as running:
        yield running


@pytest.fixture(autouse=True)
def no_background_visit_saves(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retrieval saves session visits in a background thread now and then; a write landing during
    a later call would look like that call's doing. Saves are left to close() here."""
    monkeypatch.setattr(sessions, "RETRIEVALS_PER_SAVE", 10**9)
    monkeypatch.setattr(sessions, "SECONDS_PER_SAVE", 10.0**9)


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process only: what is written and in what order is unchanged, but it is not forced to
    the disk, which would make thousands of calls wait on the device. Durability has its own tests
    (test_crash.py, test_disk_faults.py); the stdio server below keeps its fsyncs."""
    monkeypatch.setattr(durable.os, "fsync", lambda fd: None)


@pytest.mark.parametrize("tool", TOOLS)
def test_fuzz_every_tool_through_the_mcp_layer(
    tool: str, tmp_path: Path, portal: BlockingPortal, capsys: pytest.CaptureFixture[str]
) -> None:
    world = World(tmp_path, portal)
    examples = 0
    started = time.monotonic()

    @settings(
        max_examples=EXAMPLES[tool],
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
        ],
    )
    @given(arguments=tool_arguments(world, tool))
    def fuzz(arguments: dict[str, Any]) -> None:
        nonlocal examples
        examples += 1
        world.exercise(tool, arguments)

    try:
        fuzz()
    finally:
        world.close()
    # Nothing was created outside the data directory.
    assert {entry.name for entry in tmp_path.iterdir()} == {"data"}
    assert not data_dir_problems(world.root, snapshot(world.root), set())
    outcomes = {f"{path}/{kind}": n for (name, path, kind), n in sorted(COUNTS.items()) if name == tool}
    with capsys.disabled():
        print(f"\n[fuzz] {tool}: {examples} examples in {time.monotonic() - started:.1f}s; calls {outcomes}")
    assert examples >= EXAMPLES[tool] // 2, "hypothesis ran far fewer examples than asked"


# --- over the real stdio server -------------------------------------------------------------------


def _request(request_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def _tool_line(request_id: int, tool: str, arguments: Any) -> bytes:
    params = {"name": tool, "arguments": arguments}
    return json.dumps(_request(request_id, "tools/call", params), ensure_ascii=True).encode()


def nasty_lines() -> tuple[list[bytes], set[int]]:
    """Raw lines for the wire, and the ids of those that are well-formed requests (they must be answered)."""
    lines: list[bytes] = []
    answered: set[int] = set()
    next_id = iter(range(100_000, 10**6))  # RawServer numbers its own from 1

    def call(tool: str, arguments: Any) -> None:
        request_id = next(next_id)
        lines.append(_tool_line(request_id, tool, arguments))
        answered.add(request_id)

    # Malformed JSON-RPC: nothing to answer (no id can be read), and nothing may break.
    lines += [
        b"{", b"}", b"[]", b"null", b"42", b'"text"', b"\x00\x01\x02", b"\xff\xfe\xfd not utf-8",
        b"\xef\xbb\xbf" + json.dumps(_request(900000, "ping")).encode(),  # a byte order mark first
        b'{"jsonrpc":"2.0","id":', b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":"add_memory"',
        b'{"jsonrpc":"1.0","id":900005,"method":"ping"}', b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}',
        b'{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{}}', b'{"id":900001,"id":900002,"method":"ping"}',
        b'[{"jsonrpc":"2.0","id":900007,"method":"ping"},{"jsonrpc":"2.0","id":900008,"method":"ping"}]',
        b'{"jsonrpc":"2.0","id":1e400,"method":"ping"}', b'{"jsonrpc":"2.0","method":"notifications/x","params":5}',
        b"[" * 100_000, b'{"a":' * 50_000,
        b'{"jsonrpc":"2.0","id":900009,"method":"tools/call","params":{"name":"add_memory","arguments":5}}',
        b'{"jsonrpc":"2.0","id":900010,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}',
        b'{"jsonrpc":"2.0","id":900011,"method":"tools/call","params":"not an object"}',
        b'{"jsonrpc":"2.0","id":900012,"method":"resources/read","params":{"uri":"memory://users/../etc/profile"}}',
        json.dumps(_request(900013, "resources/read", {"uri": "memory://users/alice%2F..%2Fbob/facts"})).encode(),
    ]  # fmt: skip
    # Lone surrogate escapes in JSON text, in values and in keys; and NaN and Infinity literals.
    for request_id, arguments in (
        (next(next_id), '{"user_input":"a\\ud800b","agent_response":"x"}'),
        (next(next_id), '{"user_input":"\\udfff","agent_response":"\\ud800\\ud800"}'),
        (next(next_id), '{"user_input":"a","agent_response":"b","meta_data":{"\\udc00":1}}'),
        (next(next_id), '{"user_input":"a","agent_response":"b","user_id":"\\ud800"}'),
        (next(next_id), '{"user_input":"a","agent_response":"b","meta_data":{"x":NaN,"y":-Infinity}}'),
    ):
        lines.append(
            b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"add_memory","arguments":%s}}'
            % (request_id, arguments.encode())
        )
    for literal in ("NaN", "Infinity", "-Infinity", "1e400", "-1e-400"):
        request_id = next(next_id)
        arguments = b'{"content":"c%d","confidence":%s}' % (request_id, literal.encode())
        lines.append(
            b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"add_fact","arguments":%s}}'
            % (request_id, arguments)
        )
    # Huge lines: far beyond max_text_chars and max_meta_data_bytes, and megabytes of garbage.
    call("add_memory", {"user_input": "x" * 2_000_000, "agent_response": "y"})
    call("add_memory", {"user_input": "x", "agent_response": "y", "meta_data": {"k": "v" * 1_000_000}})
    call("add_fact", {"content": "z" * 500_000})
    call("retrieve_memory", {"query": "q " * 500_000})
    lines.append(b"#" * 8_000_000)
    # Deep structures, beyond meta_data's 32 levels and near the wire parser's own limit.
    for depth in (33, 100, 180):
        call("add_memory", {"user_input": "x", "agent_response": "y", "meta_data": {"d": nested(depth, "mixed")}})
    for depth in (33, 150, 185):
        document = {"format": "memory-mcp/export", "version": 1, "exported_at": "", "user_id": "deepuser", "memory": {}}
        document["pages"] = [_page("p1", meta_data={"d": nested(depth, "dict")})]
        call("import_memory", {"data": document})
    # Every hostile id, in every tool that takes one; control characters and NUL in text.
    for bad in HOSTILE_IDS:
        if "\ud800" in bad:
            continue  # json.dumps would escape it; the raw escapes above cover it
        call("add_memory", {"user_input": "x", "agent_response": "y", "user_id": bad})
        call("retrieve_memory", {"query": "x", "agent_name": bad})
        call("forget", {"user_id": bad, "confirm": bad})
        call("export_memory", {"user_id": bad})
        call("delete_fact", {"fact_id": bad})
    for text in ("\x00", "a\x00b", "\x1b[31mred\x1b[0m", "\r\n\r\n", "\u2028\u2029\x85", "\ufeff", "\U0010ffff"):
        call("add_memory", {"user_input": text, "agent_response": text, "user_id": "ctl", "thread_id": text})
    # Wrong types, odd timestamps and unknown arguments.
    call("add_memory", {"user_input": ["list"], "agent_response": {"o": 1}})
    call(
        "add_memory",
        {"user_input": "x", "agent_response": "y", "timestamp": "9999-12-31T23:59:59-05:00"},
    )
    call("add_memory", {"user_input": "x", "agent_response": "y", "timestamp": "2024-13-45T99:99:99Z"})
    call("add_memory", {"user_input": "x", "agent_response": "y", "userId": "mallory"})
    call("retrieve_memory", {"query": None, "max_results": "many", "max_tokens": -1})
    call("import_memory", {"data": "not an object"})
    call("import_memory", {"data": {"format": "memory-mcp/export"}, "mode": "obliterate"})
    call("update_fact", {"fact_id": "../../etc/passwd", "content": "x"})
    call("memory_status", {"verbose": True})
    return lines, answered


def test_nastiest_inputs_over_real_stdio_leave_the_server_serving(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = write_config(
        tmp_path / "config.json",
        {"data_storage_path": str(data), "max_text_chars": 100_000, "max_meta_data_bytes": 65_536},
    )
    lines, must_answer = nasty_lines()
    with RawServer(tmp_path / "home", tmp_path / "stderr.log", config=config) as server:
        server.initialize()
        added = server.call_tool("add_memory", {"user_input": "I keep bees on the roof", "agent_response": "Lovely."})
        assert added["result"]["isError"] is False
        for line in lines:
            server.send_line(line)
        server.request("ping", timeout=60)
        deadline = time.monotonic() + 60
        answered: dict[int, dict[str, Any]] = {}
        while time.monotonic() < deadline and not must_answer <= answered.keys():
            for raw in list(server.stdout_lines):
                try:
                    message = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(message, dict) and isinstance(message.get("id"), int):
                    answered[message["id"]] = message
            time.sleep(0.05)
        missing = sorted(must_answer - answered.keys())
        assert not missing, f"well-formed requests left unanswered: {missing[:10]}"
        for request_id in must_answer:
            reply = answered[request_id]
            assert "error" in reply or reply["result"]["isError"] is False or "content" in reply["result"]
        bare = {f"Error executing tool {tool}" for tool in EXAMPLES}
        crashed = {
            request_id
            for request_id in must_answer
            if "result" in answered[request_id]
            and answered[request_id]["result"].get("isError")
            and answered[request_id]["result"]["content"][0]["text"].strip() in bare
        }
        assert not crashed, f"tools crashed instead of refusing clearly: {sorted(crashed)}"
        assert server.process.poll() is None, "the server died"

        # Still serving, correctly.
        added = server.call_tool("add_memory", {"user_input": "My sister lives in Lisbon", "agent_response": "Nice."})
        assert added["result"]["isError"] is False, added
        recalled = server.call_tool("retrieve_memory", {"query": "where do I keep bees?"})
        result = recalled["result"]["structuredContent"]
        assert result["retrieved_pages"] or result["short_term_memory"]
        found = [p["user_input"] for p in result["short_term_memory"] + result["retrieved_pages"]]
        assert "I keep bees on the roof" in found and "My sister lives in Lisbon" in found
        assert "mallory" not in json.dumps(server.call_tool("memory_status", {})["result"])
        code = server.close_stdin_and_wait(timeout=15)
        stdout = list(server.stdout_lines)
        stderr = server.stderr_text()
    assert code == 0, f"exit code {code}; stderr tail: {stderr[-2000:]}"
    for raw in stdout:
        message = json.loads(raw)
        assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", raw[:200]
        assert "method" in message or ("id" in message and ("result" in message or "error" in message)), raw[:200]
    assert not data_dir_problems(data, snapshot(data), set())
    print(
        f"\n[fuzz] stdio: {len(lines)} nasty lines, {len(must_answer)} answered as required, {len(stdout)} stdout lines"
    )


# --- the bugs the fuzz found, pinned (each was xfail(strict=True) until fixed) --------------------


def _service(tmp_path: Path) -> MemoryService:
    return MemoryService(Settings(data_storage_path=tmp_path / "data"))


def test_failed_fact_edit_for_a_user_with_nothing_stored_creates_nothing(tmp_path: Path) -> None:
    """Was: json_store.update_document (via _locked -> ensure_directory) created users/<id>/ and its
    .memory.lock before update_fact/delete_fact found no such fact, leaving a phantom user that
    memory_status listed with 0 pages."""
    service = _service(tmp_path)
    root = service.settings.data_storage_path
    before = snapshot(root)
    for request in (
        DeleteFactRequest.build(fact_id="fact_0000", user_id="nobody"),
        UpdateFactRequest.build(fact_id="fact_0000", content="x", user_id="nobody2", agent_name="bot"),
    ):
        with pytest.raises(MemoryServiceError):
            (service.delete_fact if isinstance(request, DeleteFactRequest) else service.update_fact)(request)
    assert snapshot(root) == before
    assert [user.user_id for user in service.memory_status().users] == []


def test_a_timestamp_that_overflows_in_utc_is_a_clear_error(tmp_path: Path, portal: BlockingPortal) -> None:
    """Was: models.normalise_timestamp caught only ValueError; '9999-12-31T23:59:59-05:00' parses,
    then astimezone(UTC) raised OverflowError: a bare 'Error executing tool add_memory'."""
    service = _service(tmp_path)
    server = build_server(service)
    for timestamp in ("9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00"):
        with pytest.raises(ToolError) as caught:
            portal.call(
                server.call_tool, "add_memory", {"user_input": "x", "agent_response": "y", "timestamp": timestamp}
            )
        assert not isinstance(caught.value, UnexpectedToolError)
        assert "timestamp" in str(caught.value)
    with pytest.raises(InvalidInput, match="timestamp"):
        AddMemoryRequest.build(user_input="x", agent_response="y", timestamp="9999-12-31T23:59:59-05:00")


def _deep_import(user: str, depth: int) -> dict[str, Any]:
    return {
        "format": "memory-mcp/export",
        "version": 1,
        "exported_at": "",
        "user_id": user,
        "memory": {},
        "pages": [_page("p1", meta_data=nested(depth, "dict"))],
    }


def test_import_never_writes_a_page_the_store_cannot_read_back(tmp_path: Path) -> None:
    """A page nesting ~200-255 levels once passed import and was written, but pydantic's JSON
    parser could not read the line back: memory_status then failed for every user."""
    service = _service(tmp_path)
    service.add_memory(AddMemoryRequest.build(user_input="hello", agent_response="hi", user_id="bystander"))
    try:
        service.import_memory(ImportRequest.build(data=_deep_import("victim", 220)))
    except InvalidInput:
        pass  # refusing it is the fix
    assert not data_dir_problems(
        service.settings.data_storage_path, snapshot(service.settings.data_storage_path), set()
    )
    fresh = _service(tmp_path)  # as after a restart: nothing cached
    assert [user.user_id for user in fresh.memory_status().users][:1] == ["bystander"]


@pytest.mark.parametrize("where", ["section", "fact", "session"])
def test_a_too_deep_import_document_is_a_clear_error_and_erases_nothing(
    tmp_path: Path, portal: BlockingPortal, where: str
) -> None:
    """Was: a memory-document field nesting past pydantic's serialisation limit (~255 levels, in an
    extra key of a section, fact or session) passed validation, then the write raised: a bare
    'Error executing tool import_memory', and with mode='replace' the user's memory was already
    erased, pages and all."""
    service = _service(tmp_path)
    service.add_memory(AddMemoryRequest.build(user_input="keep me", agent_response="ok", user_id="victim"))
    service.add_fact(AddFactRequest.build(content="keep this fact", user_id="victim"))
    server = build_server(service)
    root = service.settings.data_storage_path
    deep = nested(300, "dict")
    memory = {
        "section": {"user": {"workContext": {"summary": "s", "extra": deep}}},
        "fact": {"facts": [{"id": "f1", "content": "c", "confidence": 0.5, "extra": deep}]},
        "session": {"sessions": {"s1": {"extra": deep}}},
    }[where]
    document = {"format": "memory-mcp/export", "version": 1, "exported_at": "", "user_id": "victim", "memory": memory}
    document["pages"] = []
    before = snapshot(root)
    wrong = []
    for mode in ("replace", "merge"):
        try:
            portal.call(server.call_tool, "import_memory", {"data": document, "mode": mode})
            wrong.append(f"{mode}: accepted")
        except UnexpectedToolError as exc:
            wrong.append(f"{mode}: unclear error {str(exc)!r} ({exc.__cause__!r})")
        except ToolError:
            pass
        if snapshot(root) != before:
            stored = [user.pages for user in _service(tmp_path).memory_status().users]
            wrong.append(f"{mode}: the data directory changed (pages stored now: {stored})")
            return pytest.fail("; ".join(wrong))
    assert not wrong, "; ".join(wrong)


def test_an_unpaired_surrogate_deep_in_an_import_is_a_clear_error(tmp_path: Path, portal: BlockingPortal) -> None:
    """Was: the error message named the path through the surrogate key, and pydantic could not
    encode that message: a bare 'Error executing tool import_memory'."""
    server = build_server(_service(tmp_path))
    with pytest.raises(ToolError, match="unpaired surrogate") as caught:
        portal.call(server.call_tool, "import_memory", {"data": {"": {"\ud800": "\ud800"}}})
    assert not isinstance(caught.value, UnexpectedToolError)
    assert not (tmp_path / "data" / "users").exists()
