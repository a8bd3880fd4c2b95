"""Security review, as tests: secrets stay out of logs and tool results, keys come only from the
config or the environment, the data tree is private, the package has no code-execution or
deserialisation hazards, ids are validated before any path is built (statically and by trying
traversal on every tool), and what a planted symlink makes the server do.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import secrets
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import stdio_helpers
from mcp.shared.exceptions import MCPError
from project import PACKAGE
from scripted_llm import SCRIPTED_MODEL, ScriptedLLM, Step, reply
from stdio_helpers import RawServer, connect, ok, run, snapshot, write_config

from memory_mcp.base.settings import ConfigError, Settings, load_settings
from memory_mcp.models import (
    AddFactRequest,
    AddMemoryRequest,
    ForgetRequest,
    RetrieveMemoryRequest,
)
from memory_mcp.service.memory_service import MemoryService

SOURCES = sorted(PACKAGE.rglob("*.py"))
EMPTY_UPDATE = {"user": {}, "history": {}, "newFacts": [], "factsToRemove": []}


def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def relative(path: Path) -> str:
    return str(path.relative_to(PACKAGE))


# --- secrets ------------------------------------------------------------------------------------


@contextlib.contextmanager
def with_server_env(extra: dict[str, str]) -> Iterator[None]:
    """RawServer scrubs OPENAI_* from the server's environment; give some back on purpose."""
    original = stdio_helpers.server_env

    def server_env(home: Path | None = None, more: dict[str, str] | None = None) -> dict[str, str]:
        return original(home, {**extra, **(more or {})})

    stdio_helpers.server_env = server_env  # type: ignore[assignment]
    try:
        yield
    finally:
        stdio_helpers.server_env = original  # type: ignore[assignment]


def echoing(status: int, key: str) -> Step:
    """An error reply whose body repeats the key, as OpenAI's 'Incorrect API key provided: ...' does."""
    body = {"error": {"message": f"Incorrect API key provided: {key}", "type": "invalid_request_error"}}
    return Step(status=status, raw=json.dumps(body).encode())


@pytest.mark.integration
def test_the_api_key_never_appears_in_logs_or_tool_results(tmp_path: Path, data_dir: Path) -> None:
    """The key in OPENAI_API_KEY (a key from the config file takes the same path from Settings on:
    see the test below); an endpoint whose every answer repeats it; the server logging at DEBUG."""
    key = f"sk-test-SECRET-{secrets.token_hex(12)}"
    llm = ScriptedLLM().start()
    failures = [
        echoing(401, key),
        echoing(403, key),
        echoing(429, key),
        echoing(500, key),
        Step(raw=f"<html>proxy error for key {key}</html>".encode()),
        reply(f"Sorry, I cannot do that with the key {key}"),
        reply(json.dumps({"error": f"bad key {key}"})),
    ]
    llm.enqueue(*failures)
    memory = {"debounce_seconds": 60, "llm_max_attempts": 1, "llm_timeout_seconds": 5, "shutdown_flush_seconds": 0}
    env = {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": key, "MEMORY_MCP_LLM_MODEL": SCRIPTED_MODEL}
    config = write_config(tmp_path / "config.json", {"memory": memory})
    results = []
    try:
        with with_server_env(env):
            server = RawServer(data_dir, tmp_path / "server.stderr", config=config, extra_args=["--log-level", "DEBUG"])
        with server:
            server.initialize()
            results.append(server.call_tool("add_memory", {"user_input": "I live in Lyon", "agent_response": "ok"}))
            for _ in failures:
                results.append(server.call_tool("flush_memory", {}))
            for tool, arguments in [
                ("memory_status", {}),
                ("get_user_profile", {}),
                ("retrieve_memory", {"query": "Lyon"}),
                ("search_facts", {}),
                ("export_memory", {}),
                ("add_memory", {"user_input": "x", "agent_response": "y", "user_id": "../key"}),  # a refused call
            ]:
                results.append(server.call_tool(tool, arguments))
            assert server.close_stdin_and_wait() == 0
            stdout = b"".join(server.stdout_lines).decode("utf-8", errors="replace")
            stderr = server.stderr_text()
    finally:
        llm.stop()

    assert len(llm.requests) == len(failures), "every failure was sent to the LLM"
    flushes = [r["result"]["structuredContent"] for r in results[1 : 1 + len(failures)]]
    assert all(flush["errors"] for flush in flushes), "each flush failed and said so"
    status = results[1 + len(failures)]["result"]["structuredContent"]
    assert status["llm_configured"] is True and status["last_update_errors"], status
    distinctive = key.removeprefix("sk-test-")
    for where, text in (("tool results (stdout)", stdout), ("server log (stderr)", stderr)):
        assert key not in text and distinctive not in text, f"the API key appears in the {where}"
    assert "DEBUG" in stderr, "the log level was DEBUG, the most verbose there is"


# Regression test. Found by this suite and fixed in 64737a3; before that: service.py memory_status (line 345) returns
# openai_base_url verbatim as llm_base_url: credentials in the URL (http://user:password@host/v1, accepted by the
# openai client) reach the agent in every memory_status result
def test_memory_status_does_not_show_credentials_held_in_the_base_url(data_dir: Path) -> None:
    password = f"SECRET{secrets.token_hex(6)}"
    service = MemoryService(
        Settings(data_storage_path=data_dir, openai_base_url=f"http://llmuser:{password}@127.0.0.1:9/v1")
    )
    status = service.memory_status().model_dump_json()
    assert password not in status, status


class RecordingLLM:
    """A chat-completions endpoint recording each request's Authorization header."""

    def __init__(self) -> None:
        self.authorizations: list[str | None] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                recorder.authorizations.append(self.headers.get("Authorization"))
                body = {
                    "id": "x",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "m",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": json.dumps(EMPTY_UPDATE)},
                            "finish_reason": "stop",
                        }
                    ],
                }
                payload = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_api_key_comes_only_from_the_config_or_the_environment_and_goes_only_to_the_endpoint(
    tmp_path: Path, data_dir: Path
) -> None:
    from_env = f"sk-env-{secrets.token_hex(8)}"
    from_file = f"sk-file-{secrets.token_hex(8)}"
    config = write_config(tmp_path / "config.json", {"openai_api_key": from_file})
    assert load_settings(None, environ={}).openai_api_key is None
    assert load_settings(None, environ={"OPENAI_API_KEY": from_env}).openai_api_key == from_env
    assert load_settings(config, environ={"OPENAI_API_KEY": from_env}).openai_api_key == from_file
    assert load_settings(None, environ={"SOME_OTHER_KEY": from_env}).openai_api_key is None

    # A config error never repeats what the file holds.
    for bad in ({"openai_api_key": from_file, "typo_setting": 1}, {"openai_api_key": [from_file]}):
        with pytest.raises(ConfigError) as caught:
            load_settings(write_config(tmp_path / "bad.json", bad), environ={})
        assert from_file not in str(caught.value), caught.value

    # The key reaches the endpoint as the bearer token, and nothing else of it goes anywhere.
    endpoint = RecordingLLM()
    try:
        service = MemoryService(
            load_settings(
                None,
                environ={
                    "OPENAI_API_KEY": from_env,
                    "OPENAI_BASE_URL": endpoint.base_url,
                    "MEMORY_MCP_LLM_MODEL": SCRIPTED_MODEL,
                    "MEMORY_MCP_HOME": str(data_dir),
                },
            )
        )
        service.add_memory(AddMemoryRequest.build(user_input="I live in Lyon", agent_response="ok"))
        from memory_mcp.models import FlushRequest

        assert service.flush_memory(FlushRequest.build()).errors == []
        service.close()
    finally:
        endpoint.stop()
    assert endpoint.authorizations == [f"Bearer {from_env}"]


KEY_LIKE = re.compile(
    r"\bsk-[A-Za-z0-9_-]{8,}|\bBearer\s+\S{8,}|AKIA[0-9A-Z]{16}|\bgh[pousr]_[A-Za-z0-9]{20,}|\bxox[abp]-[A-Za-z0-9-]{10,}"
)


def test_no_key_is_written_into_the_code_and_only_one_module_reads_the_environment() -> None:
    hard_coded, env_reads, api_key_values = [], [], []
    for path in SOURCES:
        tree = parsed(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and KEY_LIKE.search(node.value):
                hard_coded.append(f"{relative(path)}:{node.lineno}")
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb", "putenv"):
                env_reads.append(relative(path))
            if isinstance(node, ast.keyword) and node.arg == "api_key":
                api_key_values.append((relative(path), ast.unparse(node.value)))
    assert hard_coded == [], f"strings that look like credentials: {hard_coded}"
    assert set(env_reads) <= {"base/environment.py"}, (
        f"the environment is read outside environment.py: {sorted(set(env_reads))}"
    )
    # The one client is given the configured key, or a placeholder the local endpoints ignore.
    assert sorted(api_key_values) == [
        ("extraction/llm_client.py", "self._api_key or 'not-needed'"),
        ("extraction/runner.py", "settings.openai_api_key"),
        ("recall/embedders.py", "self._api_key or 'not-needed'"),
    ], api_key_values


# --- the data tree is private ----------------------------------------------------------------------


@pytest.mark.integration
def test_every_directory_and_file_the_server_creates_is_private_whatever_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "missing" / "parents" / "data"
    llm = ScriptedLLM().start()
    llm.default = reply(
        {**EMPTY_UPDATE, "newFacts": [{"content": "Lives in Lyon", "category": "context", "confidence": 0.9}]}
    )
    memory = {"debounce_seconds": 60, "llm_max_attempts": 1, "shutdown_flush_seconds": 1}
    config = write_config(
        tmp_path / "config.json", {"openai_base_url": llm.base_url, "llm_model": SCRIPTED_MODEL, "memory": memory}
    )
    previous = os.umask(0)  # the most permissive umask: every mode must come from the server itself
    try:
        server = RawServer(home, tmp_path / "server.stderr", config=config)
    finally:
        os.umask(previous)
    try:
        with server:
            server.initialize()

            def call(tool: str, **arguments: Any) -> dict[str, Any]:
                result = server.call_tool(tool, arguments)["result"]
                assert not result.get("isError"), result
                return result["structuredContent"]

            for user, agent in (("alice", None), ("alice", "coder"), ("bob", None)):
                call(
                    "add_memory",
                    user_input=f"I live in Lyon ({user} {agent})",
                    agent_response="ok",
                    user_id=user,
                    **({"agent_name": agent} if agent else {}),
                )
                call("flush_memory", user_id=user, **({"agent_name": agent} if agent else {}))  # the updater writes
            fact = call("add_fact", content="Likes tea", user_id="alice")["fact"]
            call("update_fact", fact_id=fact["id"], content="Likes green tea", user_id="alice")
            for number in range(2):
                call("retrieve_memory", query=f"Lyon {number}", user_id="alice")  # session visits get saved

            before = snapshot(tmp_path)
            exported = call("export_memory", user_id="alice")
            after = snapshot(tmp_path)
            assert set(after) - set(before) <= {"server.stderr"}, "export_memory wrote a file"
            call("import_memory", data=exported, user_id="carol", mode="replace")
            assert server.close_stdin_and_wait() == 0  # at exit unsaved visits are written too
    finally:
        llm.stop()

    directories = [tmp_path / "missing", tmp_path / "missing" / "parents"]
    files = []
    for directory, _subdirs, names in os.walk(home):
        directories.append(Path(directory))
        files += [Path(directory, name) for name in names]
    loose_dirs = [str(d) for d in directories if stat.S_IMODE(d.stat().st_mode) != 0o700]
    loose_files = [
        f"{f} {oct(stat.S_IMODE(f.stat().st_mode))}" for f in files if stat.S_IMODE(f.stat().st_mode) != 0o600
    ]
    assert loose_dirs == [] and loose_files == [], (loose_dirs, loose_files)
    names = {f.name for f in files}
    assert {"pages.jsonl", "memory.json", "alice.log.lock", "alice.doc.lock", "alice.update.lock"} <= names, names
    assert {"alice", "bob", "carol"} <= {d.name for d in directories}
    assert not [f for f in files if f.name.endswith(".tmp")]


# Opened, not for writing: what each is and why it writes nothing.
REVIEWED_OPENS = {
    ("mcp/http_limits.py", "os.open(os.devnull, os.O_RDONLY)"): "Listener: a descriptor kept spare on /dev/null, "
    "read-only, freed to answer a caller when the process has none left",
}


def test_only_the_durable_file_primitives_write_files() -> None:
    """Exports, logs and everything else go to the caller: no module but store/durable.py opens a
    file for writing (the lock files are created there too, with mode 0600)."""
    writers = []
    for path in SOURCES:
        for node in ast.walk(parsed(path)):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            mode = next((ast.unparse(a) for a in node.args[1:2]), "") + "".join(
                ast.unparse(k.value) for k in node.keywords if k.arg == "mode"
            )
            if name.endswith(("write_text", "write_bytes", "os.open", "os.write", "shutil.copy", "shutil.move")) or (
                name.endswith("open") and re.search(r"[wax+]", mode)
            ):
                if (relative(path), ast.unparse(node)) not in REVIEWED_OPENS:
                    writers.append(f"{relative(path)}:{node.lineno} {name}")
    assert all(entry.startswith("store/durable.py:") for entry in writers), writers


# --- no code-execution or deserialisation hazards ----------------------------------------------------

DANGEROUS_CALLS = {"eval", "exec", "compile", "__import__", "os.system", "os.popen", "os.exec", "pty.spawn"}
DANGEROUS_MODULES = {"pickle", "cPickle", "marshal", "shelve", "dill", "yaml", "subprocess", "pty", "ctypes"}
# Where one is needed, reviewed: what it does and why it is safe.
REVIEWED_IMPORTS = {
    "hosts/helper.py import subprocess": "spawn_detached: starts this installation's own Python (sys.executable -m "
    "memory_mcp.<module>) with a list of arguments, never a shell; a new process, since a fork of a hook that "
    "ran the embedding model hangs",
    "hosts/helper.py import ctypes": "_return_freed_memory: calls glibc's malloc_trim(0) by name, with one integer "
    "and no pointer, after an idle helper let go of its memory; nothing else of the C library is touched",
    "cli/stdio_relay.py import subprocess": "Launcher._start: starts this installation's own Python (sys.executable "
    "-m memory_mcp.mcp.daemon SOCKET [CONFIG]) with a list of arguments, never a shell; its exit status says "
    "whether it serves, so the handle is kept (spawn_detached lets it go)",
}


def test_no_eval_exec_pickle_marshal_yaml_load_or_shell_anywhere_in_the_package() -> None:
    found = []
    for path in SOURCES:
        for node in ast.walk(parsed(path)):
            where = f"{relative(path)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                found += [
                    f"{where} import {a.name}"
                    for a in node.names
                    if a.name.split(".")[0] in DANGEROUS_MODULES
                    and f"{relative(path)} import {a.name}" not in REVIEWED_IMPORTS
                ]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in DANGEROUS_MODULES:
                found.append(f"{where} from {node.module} import ...")
            elif isinstance(node, ast.Call):
                name = ast.unparse(node.func)
                if name in DANGEROUS_CALLS or name.startswith("os.exec") or name.endswith(("yaml.load", "unsafe_load")):
                    found.append(f"{where} {name}(...)")
                if any(
                    k.arg == "shell" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
                    for k in node.keywords
                ):
                    found.append(f"{where} {name}(shell=...)")
                if name.endswith(("pickle.loads", "pickle.load", "marshal.loads")):
                    found.append(f"{where} {name}(...)")
    assert found == [], found


# --- ids are validated before any path is built ----------------------------------------------------------

PATHLIKE = re.compile(r"root|dir|path|home|parent|assistants", re.IGNORECASE)

# Components joined onto a path that are neither constants nor validate_identifier(...), each
# with why it is safe. A new entry here is a security decision: review it before adding it.
REVIEWED_JOINS = {
    (
        "base/settings.py",
        "value",
    ): "_from_config_folder: data_storage_path and http.tokens_file from the operator's config",
    (
        "cli/hook_command.py",
        "config",
    ): "_hook_call: a hook's own --config, taken from the folder it runs in as a shell would",
    ("base/projects.py", "(gitdir / 'commondir').read_text(encoding='utf-8').strip()"): "project_of: the pointer git "
    "keeps in a worktree's git folder, read to name the repository (nothing is ever written there)",
    (
        "service/session_ledger.py",
        "_digest(user_id)",
    ): "_user_folder: a hex digest of the user id (ids never name files)",
    ("hosts/relay.py", "f'hook-helper-{name}.sock'"): "helper_socket: a hex digest of the package's version and folder",
    ("store/files/tombstones.py", "directory_name(entry.name)"): "_tidy: a directory already in users/ whose name is a "
    "valid identifier (checked just before), renamed to its marked form",
    ("store/files/layout.py", "f'{staged.name}.lock'"): "staging_lock_file: named after a staging directory "
    "the store itself named (a prefix, a directory_name and random hex) or found under users/",
    ("store/files/tombstones.py", "directory_name(owner)"): "_finish_replacing: the directory a replacement cut short "
    "stands for, named by the id identifier_of validated in the staging's name",
    (
        "portability/memoryos.py",
        "name",
    ): "CLI import --from-memoryos: the operator's own MemoryOS folder and --user/--assistant "
    "arguments (a MemoryOS user id is validated before it becomes ours)",
    (
        "portability/host_sessions.py",
        "'.claude/projects' if kind == CLAUDE_CODE else '.codex/sessions'",
    ): "default_folder: one of two constant folders under the home of the operator who runs import",
    ("dashboard/past_conversations.py", "name"): "read_upload: an uploaded file's base name, used only when it is "
    "a plain name (PLAIN_NAME), for its copy in a fresh temporary folder of its own",
}


def _path_join_components(tree: ast.Module, constants: set[str]) -> Iterator[ast.expr]:
    """The right-hand side of every `/` that joins paths (an operand names a path or is a string)."""

    def pathish(node: ast.expr) -> bool:
        while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            node = node.left
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str)
        if isinstance(node, ast.Call):
            return "path" in ast.unparse(node.func).lower() or ast.unparse(node.func).endswith("scope_dir")
        return bool(PATHLIKE.search(ast.unparse(node)))

    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and (pathish(node.left) or pathish(node.right)):
            yield node.right


def test_every_path_component_from_outside_is_a_validated_identifier() -> None:
    unreviewed = []
    for path in SOURCES:
        tree = parsed(path)
        constants = {
            target.id
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for component in _path_join_components(tree, constants):
            if isinstance(component, ast.Constant) and isinstance(component.value, str):
                continue
            if isinstance(component, ast.Name) and component.id in constants:
                continue
            if isinstance(component, ast.Call) and ast.unparse(component.func) == "validate_identifier":
                continue
            if (relative(path), ast.unparse(component)) in REVIEWED_JOINS:
                continue
            unreviewed.append(f"{relative(path)}:{component.lineno} / {ast.unparse(component)}")
    assert unreviewed == [], f"path components not validated: {unreviewed}"

    # Every scope becomes a path in one place, which validates both of its ids.
    store = parsed(PACKAGE / "store" / "files" / "layout.py")
    [scope_dir] = [n for n in ast.walk(store) if isinstance(n, ast.FunctionDef) and n.name == "scope_dir"]
    validated = {
        ast.unparse(call.args[1])
        for call in ast.walk(scope_dir)
        if isinstance(call, ast.Call) and ast.unparse(call.func) == "validate_identifier"
    }
    assert validated == {"scope.user_id", "scope.agent_name"}, validated
    inside = range(scope_dir.lineno, (scope_dir.end_lineno or scope_dir.lineno) + 1)
    uses = [
        f"{relative(p)}:{n.lineno}"
        for p in SOURCES
        for n in ast.walk(parsed(p))
        if isinstance(n, ast.BinOp)
        and isinstance(n.op, ast.Div)
        and re.search(r"\.(user_id|agent_name)\b", ast.unparse(n))
        and not (relative(p) == "store/files/layout.py" and n.lineno in inside)
    ]
    assert uses == [], f"a scope's ids joined onto a path outside scope_dir: {uses}"


# Absolute targets are made inside the test's temp dir (ABSOLUTE below), so that a regression
# writes there, never into /etc.
TRAVERSALS = [
    "..",
    ".",
    "ABSOLUTE",
    "a/../../b",
    "..\\evil",
    "%2e%2e%2fevil",
    "evil\x00",
    "alice/",
    " alice",
    "alice\r",
    "\uff41lice",  # fullwidth a
    "~root",
    ".alice@x.org",
]


@pytest.mark.integration
def test_traversal_attempts_on_every_tool_prompt_and_resource_are_refused_and_write_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home" / "data"
    absolute = tmp_path / "abs-target"
    payloads = [str(absolute) if bad == "ABSOLUTE" else bad for bad in TRAVERSALS]

    async def body() -> tuple[list[tuple[str, str, Any]], dict[str, Any], dict[str, Any], list[str]]:
        outcomes: list[tuple[str, str, Any]] = []
        async with connect(home) as client:
            ok(await client.call_tool("add_memory", {"user_input": "seed", "agent_response": "ok", "user_id": "alice"}))
            fact = ok(await client.call_tool("add_fact", {"content": "Likes tea", "user_id": "alice"}))["fact"]
            export = ok(await client.call_tool("export_memory", {"user_id": "alice"}))
            deerflow = {"user": {}, "history": {}, "facts": []}
            before_home, before_tmp = snapshot(home), snapshot(tmp_path)
            for bad in payloads:
                as_user = {"user_id": bad}
                as_agent = {"user_id": "alice", "agent_name": bad}
                for who in (as_user, as_agent):
                    for tool, arguments in [
                        ("add_memory", {"user_input": "x", "agent_response": "y"}),
                        ("retrieve_memory", {"query": "seed"}),
                        ("get_user_profile", {}),
                        ("flush_memory", {}),
                        ("search_facts", {}),
                        ("add_fact", {"content": "evil"}),
                        ("update_fact", {"fact_id": fact["id"], "content": "evil"}),
                        ("delete_fact", {"fact_id": fact["id"]}),
                        ("export_memory", {}),
                        ("forget", {"confirm": who["user_id"]}),
                    ]:
                        result = await client.call_tool(tool, {**arguments, **who})
                        outcomes.append((tool, repr(who), result))
                for label, arguments in [
                    ("import user_id argument", {"data": export, "user_id": bad}),
                    ("import deerflow user_id", {"data": deerflow, "user_id": bad}),
                    ("import document user_id", {"data": {**export, "user_id": bad}}),
                    ("import document agent_name", {"data": {**export, "agent_name": bad}}),
                    ("import agents key", {"data": {**export, "agents": {bad: {"memory": {}, "pages": []}}}}),
                    (
                        "import replace agents key",
                        {"data": {**export, "agents": {bad: {"memory": {}, "pages": []}}}, "mode": "replace"},
                    ),
                ]:
                    outcomes.append(("import_memory", label, await client.call_tool("import_memory", arguments)))
                for kind, call in [
                    (
                        "prompt user_id",
                        lambda bad=bad: client.get_prompt("memory_context", {"query": "seed", "user_id": bad}),
                    ),
                    (
                        "prompt agent_name",
                        lambda bad=bad: client.get_prompt("memory_context", {"query": "seed", "agent_name": bad}),
                    ),
                    ("profile resource", lambda bad=bad: client.read_resource(f"memory://users/{bad}/profile")),
                    ("facts resource", lambda bad=bad: client.read_resource(f"memory://users/{bad}/facts")),
                ]:
                    try:
                        outcome: Any = await call()
                    except (MCPError, ValueError) as exc:  # ValueError: a URI the client itself refuses
                        outcome = exc
                    outcomes.append((kind, repr(bad), outcome))
            status = ok(await client.call_tool("memory_status", {}))
            return (
                outcomes,
                {"home": before_home, "tmp": before_tmp},
                status,
                [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")],
            )

    outcomes, before, status, listing = run(body, timeout=90)
    accepted = []
    for what, who, outcome in outcomes:
        if isinstance(outcome, Exception):
            continue
        if getattr(outcome, "is_error", False):
            text = " ".join(getattr(block, "text", "") for block in outcome.content)
            assert "Traceback" not in text, text
            continue
        if what in ("prompt user_id", "prompt agent_name"):
            # A prompt that answered must have answered for nobody's memory but alice's own.
            accepted.append((what, who, "prompt answered"))
            continue
        accepted.append((what, who, outcome))
    assert accepted == [], f"calls with a traversal id were accepted: {accepted[:5]}"
    assert snapshot(home) == before["home"], "a refused call changed the data dir"
    assert snapshot(tmp_path) == before["tmp"], "a refused call wrote beside the data dir"
    assert [u["user_id"] for u in status["users"]] == ["alice"]
    assert not [p for p in listing if "evil" in p or p.endswith("/b") or "abs-target" in p], listing


# --- symlinks planted in the data dir -----------------------------------------------------------------


@pytest.fixture
def planted(tmp_path: Path) -> Iterator[tuple[Path, Path, MemoryService]]:
    """A data dir (with one real user) and a directory outside it, holding a file of its own."""
    data, outside = tmp_path / "data", tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("not memory-mcp's\n")
    service = MemoryService(Settings(data_storage_path=data))
    service.add_memory(AddMemoryRequest.build(user_input="seed", agent_response="ok", user_id="alice"))
    yield data, outside, service
    service.close()


def outside_listing(outside: Path) -> dict[str, Any]:
    return snapshot(outside)


# Regression test. Found by this suite and fixed in 64737a3; before that: store/json_store.py scope_dir/_locked and
# store/durable.py ensure_directory/append_records follow symlinks: a symlink planted at users/<id> (or
# users/<id>/agents/<name>) pointing outside the data dir makes add_memory and add_fact write pages.jsonl, memory.json
# and lock files there, and memory_status lists the user
@pytest.mark.parametrize("where", ["users/<id>", "users/<id>/agents/<name>"])
def test_a_symlinked_scope_directory_is_not_followed_out_of_the_data_dir(
    planted: tuple[Path, Path, MemoryService], where: str
) -> None:
    data, outside, service = planted
    agent = "coder" if "agents" in where else None
    link = data / "users" / "mallory" / "agents" / "coder" if agent else data / "users" / "mallory"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    before = outside_listing(outside)

    for call in (
        lambda: service.add_memory(
            AddMemoryRequest.build(user_input="secret", agent_response="ok", user_id="mallory", agent_name=agent)
        ),
        lambda: service.add_fact(AddFactRequest.build(content="Likes tea", user_id="mallory", agent_name=agent)),
    ):
        with contextlib.suppress(Exception):  # refusing is fine; writing outside is not
            call()

    assert outside_listing(outside) == before, f"written outside the data dir: {sorted(os.listdir(outside))}"
    if agent:
        assert service.store.list_agents("mallory") == [], "a linked directory is not an agent"
    else:
        assert [u.user_id for u in service.memory_status().users] == ["alice"], "a linked directory is not a user"


# Regression test. Found by this suite and fixed in 64737a3; before that: store/durable.py append_records (os.open
# without O_NOFOLLOW, line 53): a symlink planted at users/<id>/pages.jsonl makes add_memory append the exchange to
# whatever file it points to
def test_a_symlinked_page_log_is_not_appended_through(planted: tuple[Path, Path, MemoryService]) -> None:
    data, outside, service = planted
    victim = outside / "precious.txt"
    (data / "users" / "eve").mkdir()
    (data / "users" / "eve" / "pages.jsonl").symlink_to(victim)

    with contextlib.suppress(Exception):
        service.add_memory(AddMemoryRequest.build(user_input="secret", agent_response="ok", user_id="eve"))

    assert victim.read_text() == "not memory-mcp's\n"


def test_a_symlinked_memory_document_is_replaced_not_written_through(planted: tuple[Path, Path, MemoryService]) -> None:
    data, outside, service = planted
    victim = outside / "precious.txt"
    (data / "users" / "eve").mkdir()
    (data / "users" / "eve" / "memory.json").symlink_to(victim)

    with contextlib.suppress(Exception):
        service.add_fact(AddFactRequest.build(content="Likes tea", user_id="eve"))

    assert victim.read_text() == "not memory-mcp's\n"
    assert sorted(os.listdir(outside)) == ["precious.txt"]


def test_forgetting_a_symlinked_user_never_deletes_outside_the_data_dir(
    planted: tuple[Path, Path, MemoryService],
) -> None:
    data, outside, service = planted
    (data / "users" / "mallory").symlink_to(outside, target_is_directory=True)

    with contextlib.suppress(Exception):
        service.forget(ForgetRequest.build(user_id="mallory", confirm="mallory"))

    assert (outside / "precious.txt").read_text() == "not memory-mcp's\n"
    # The real user is untouched.
    recalled = service.retrieve_memory(RetrieveMemoryRequest.build(query="seed", user_id="alice"))
    assert [p.user_input for p in recalled.short_term_memory] == ["seed"]


def test_a_data_home_another_account_could_write_to_is_refused_and_left_alone(tmp_path: Path) -> None:
    from command_line import cli

    home = tmp_path / "shared-home"
    planted = home / "users" / "default"
    planted.mkdir(parents=True)
    (planted / "pages.jsonl").write_text('{"page_id":"p","user_input":"obey me","agent_response":"ok"}\n')
    home.chmod(0o700)
    before = snapshot(home)
    home.chmod(0o777)
    refused = cli(home, "users")
    assert refused.code != 0 and "writable by other accounts" in refused.error_line()
    home.chmod(0o700)
    if os.getuid() == 0:  # only root can give a folder away
        os.chown(home, 65534, -1)
        other = cli(home, "users")
        assert other.code != 0 and "belongs to another account" in other.error_line()
        os.chown(home, 0, -1)
    assert snapshot(home) == before, "nothing read into memory, nothing written"
    assert cli(home, "users").code == 0
