"""The Claude Desktop bundle: valid for the official MCP Bundle CLI, carrying the package and
nothing local, and its server command, run as the host runs it (uv in the unpacked bundle),
serves memory in the folder the user chose."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from project import PROJECT_ROOT, network_environment
from stdio_helpers import connect_command, ok, run

sys.path.insert(0, str(PROJECT_ROOT / "packaging"))
from build_bundle import build  # noqa: E402

from memory_mcp.mcp.server import TOOLS  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

MCPB_PACKAGE = "@anthropic-ai/mcpb@2.1.2"
# .ci/run installs the CLI here once; a run without it installs it into the test's own folder.
MCPB_PREFIX = os.environ.get("MEMORY_MCP_MCPB_PREFIX")


@pytest.fixture(scope="module")
def mcpb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prefix = Path(MCPB_PREFIX) if MCPB_PREFIX else tmp_path_factory.mktemp("mcpb")
    cli = prefix / "node_modules" / ".bin" / "mcpb"
    if not cli.exists():
        if not shutil.which("npm"):
            reason = "no npm to fetch the MCP Bundle CLI with (install Node.js; .ci/run does)"
            if os.environ.get("MEMORY_MCP_REQUIRE_NODE"):
                pytest.fail(f"MEMORY_MCP_REQUIRE_NODE is set but there is {reason}", pytrace=False)
            pytest.skip(reason)
        subprocess.run(
            ["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(prefix), MCPB_PACKAGE],
            check=True,
            capture_output=True,
            timeout=600,
        )
    return cli


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("bundle")
    bundle = build(work / "memory-mcp-store.mcpb")
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(work / "unpacked")
    return work / "unpacked"


def validate(mcpb: Path, manifest: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(mcpb), "validate", str(manifest)], capture_output=True, text=True, timeout=120)


def test_the_official_cli_validates_the_manifest_and_refuses_a_broken_one(
    mcpb: Path, unpacked: Path, tmp_path: Path
) -> None:
    valid = validate(mcpb, unpacked / "manifest.json")
    assert valid.returncode == 0 and "validation passes" in valid.stdout, valid.stdout + valid.stderr

    broken = json.loads((unpacked / "manifest.json").read_text(encoding="utf-8"))
    del broken["server"]["mcp_config"]
    (tmp_path / "manifest.json").write_text(json.dumps(broken), encoding="utf-8")
    refused = validate(mcpb, tmp_path / "manifest.json")
    assert refused.returncode != 0 and "mcp_config" in refused.stdout + refused.stderr


def test_the_bundle_carries_the_package_and_nothing_local(unpacked: Path) -> None:
    names = {path.relative_to(unpacked).as_posix() for path in unpacked.rglob("*") if path.is_file()}
    assert {
        "manifest.json",
        "pyproject.toml",
        "server.py",
        "memory_mcp/cli/main.py",
        "memory_mcp/store/files/backend.py",
    } <= names
    assert not [name for name in names if ".venv" in name or "__pycache__" in name or name.endswith("config.json")]
    manifest = json.loads((unpacked / "manifest.json").read_text(encoding="utf-8"))
    assert [tool["name"] for tool in manifest["tools"]] == list(TOOLS)
    assert manifest["user_config"]["llm_api_key"]["sensitive"] is True


def _host_command(
    manifest: dict[str, Any], bundle: Path, user_config: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The server command and environment a host makes of the manifest's mcp_config."""

    def substitute(value: str) -> str:
        value = value.replace("${__dirname}", str(bundle))
        for key, given in user_config.items():
            value = value.replace(f"${{user_config.{key}}}", given)
        return value

    config = manifest["server"]["mcp_config"]
    command = [substitute(part) for part in [config["command"], *config["args"]]]
    return command, {name: substitute(value) for name, value in config["env"].items()}


def test_the_bundles_server_command_serves_memory_in_the_chosen_folder(unpacked: Path, tmp_path: Path) -> None:
    manifest = json.loads((unpacked / "manifest.json").read_text(encoding="utf-8"))
    chosen = tmp_path / "My Memory"
    command, env = _host_command(
        manifest, unpacked, {"data_dir": str(chosen), "llm_base_url": "", "llm_model": "", "llm_api_key": ""}
    )
    assert command[0] == "uv"
    command[0] = str(Path(sys.executable).with_name("uv"))  # the test extra's uv, as the host's own
    env["UV_CACHE_DIR"] = str(Path(sys.prefix) / "uv-cache")  # kept between runs of this environment
    # The machine's way out to the package index (certificates, proxies), as a host's environment has it.
    env.update(network_environment())

    async def session() -> str:
        async with connect_command(command, env, cwd=tmp_path) as client:
            ok(await client.call_tool("add_memory", {"user_input": "I run on Tuesdays", "agent_response": "Nice"}))
            return str(ok(await client.call_tool("retrieve_memory", {"query": "when do I run?"}))["context"])

    assert "I run on Tuesdays" in run(session, timeout=600)
    assert (chosen / "users" / "default" / "pages.jsonl").exists(), "memory lives in the folder the user chose"
