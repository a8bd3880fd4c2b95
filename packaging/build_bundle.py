"""Build the MCP Bundle (.mcpb) that Claude Desktop installs with a double-click.

The bundle is the package's sources, pyproject.toml and a manifest.json of the `uv` server type:
the host runs `uv run` in the unpacked bundle, which installs the dependencies pyproject.toml
names into a virtual environment of its own, so the user needs no Python set up. The manifest's
user_config fields become the server's environment: where memory lives, and optionally the LLM
endpoint, model and key (the key is stored by the host as a secret).

Usage: python packaging/build_bundle.py [--output dist/memory-mcp-store.mcpb]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from memory_mcp import __version__  # noqa: E402  # from this checkout, whatever is installed
from memory_mcp.mcp.server import TOOLS  # noqa: E402

MANIFEST_VERSION = "0.4"  # the first with the `uv` server type
INCLUDED = ("pyproject.toml", "README.md", "server.py", "memory_mcp/")


def manifest() -> dict[str, Any]:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {
        "manifest_version": MANIFEST_VERSION,
        "name": project["name"],
        "display_name": "memory-mcp",
        "version": __version__,
        "description": project["description"],
        "long_description": "Stores every exchange on your own disk and recalls it in later conversations: "
        "recent exchanges, the older ones that matter to the question, and what is known about you, as one "
        "<memory> block. With an OpenAI-compatible endpoint (Ollama, LM Studio, OpenAI...) it also extracts "
        "facts and a profile in the background; without one, Claude sends what it learned itself.",
        "author": {"name": "memory-mcp contributors"},
        "license": project["license"],
        "keywords": ["memory", "long-term memory", "recall", "profile"],
        "server": {
            "type": "uv",
            "entry_point": "server.py",
            "mcp_config": {
                "command": "uv",
                "args": ["run", "--directory", "${__dirname}", "memory-mcp"],
                "env": {
                    "MEMORY_MCP_HOME": "${user_config.data_dir}",
                    "OPENAI_BASE_URL": "${user_config.llm_base_url}",
                    "OPENAI_API_KEY": "${user_config.llm_api_key}",
                    "MEMORY_MCP_LLM_MODEL": "${user_config.llm_model}",
                },
            },
        },
        "tools": [{"name": name, "description": spec.title} for name, spec in TOOLS.items()],
        "user_config": {
            "data_dir": {
                "type": "directory",
                "title": "Memory folder",
                "description": "Where memory is stored, one folder per user.",
                "default": "${HOME}/.memory-mcp",
                "required": False,
            },
            "llm_base_url": {
                "type": "string",
                "title": "LLM endpoint (optional)",
                "description": "An OpenAI-compatible endpoint for background extraction, e.g. "
                "http://127.0.0.1:11434/v1 for Ollama. Empty: Claude sends what it learned itself.",
                "default": "",
                "required": False,
            },
            "llm_model": {
                "type": "string",
                "title": "LLM model (optional)",
                "description": "The endpoint's chat model used for extraction, e.g. llama3.1:8b.",
                "default": "",
                "required": False,
            },
            "llm_api_key": {
                "type": "string",
                "title": "LLM API key (optional)",
                "description": "The endpoint's API key, if it needs one (stored as a secret).",
                "sensitive": True,
                "default": "",
                "required": False,
            },
        },
        "compatibility": {
            "platforms": ["darwin", "win32", "linux"],
            "runtimes": {"python": project["requires-python"]},
        },
    }


def bundled_files() -> list[str]:
    """The tracked files the bundle carries (never a local venv, cache or config)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", *INCLUDED], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    ).stdout
    return sorted(name for name in listed.split("\0") if name)


def build(output: Path) -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(output, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr("manifest.json", json.dumps(manifest(), indent=2) + "\n")
        for name in bundled_files():
            bundle.write(PROJECT_ROOT / name, name)
    return output


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=PROJECT_ROOT / "dist" / "memory-mcp-store.mcpb")
    built = build(parser.parse_args().output)
    print(f"built {built} ({built.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
