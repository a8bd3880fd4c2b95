"""server.json, what the MCP Registry lists: valid against the registry's published schema, and
naming the package, version and command this project really ships."""

from __future__ import annotations

import json
import tomllib
from typing import Any

import jsonschema
import pytest
from project import PROJECT_ROOT

from memory_mcp import __version__

SCHEMA = json.loads((PROJECT_ROOT / "tests" / "data" / "mcp_registry" / "server.schema.2025-12-11.json").read_text())
SERVER = json.loads((PROJECT_ROOT / "server.json").read_text(encoding="utf-8"))
PROJECT = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def problems(document: dict[str, Any]) -> list[str]:
    validator = jsonschema.validators.validator_for(SCHEMA)
    checker = validator(SCHEMA, format_checker=validator.FORMAT_CHECKER)
    return [error.message for error in checker.iter_errors(document)]


def test_server_json_is_valid_against_the_registry_schema() -> None:
    assert SERVER["$schema"] == SCHEMA["$id"]
    assert problems(SERVER) == []


@pytest.mark.parametrize(
    "breakage",
    [
        lambda doc: doc.update(name="no-namespace"),
        lambda doc: doc.update(description="x" * 101),
        lambda doc: doc["packages"][0].update(version="latest"),
        lambda doc: doc["packages"][0].pop("transport"),
    ],
    ids=["name without namespace", "description too long", "version latest", "no transport"],
)
def test_the_schema_check_refuses_what_the_registry_refuses(breakage: Any) -> None:
    broken = json.loads(json.dumps(SERVER))
    breakage(broken)
    assert problems(broken) != []


def test_server_json_names_what_this_project_ships() -> None:
    [package] = SERVER["packages"]
    assert (package["registryType"], package["identifier"]) == ("pypi", PROJECT["name"])
    assert SERVER["version"] == package["version"] == __version__
    assert package["transport"] == {"type": "stdio"}
    assert package["runtimeHint"] == "uvx" and PROJECT["name"] in PROJECT["scripts"], "uvx runs the package's command"
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    assert f"mcp-name: {SERVER['name']}" in readme, "PyPI's page must name the server for the registry to accept it"
