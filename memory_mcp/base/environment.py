"""The one place that reads the process environment. Standard library only: the command's first
step (`launch`) uses it before anything heavy is imported."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DEFAULT_CONFIG_NAME = "config.json"
# The variables settings are read from (base.settings says how each is used).
HOME_VARIABLE = "MEMORY_MCP_HOME"  # the data folder
DSN_VARIABLE = "MEMORY_MCP_DSN"
API_KEY_VARIABLE = "OPENAI_API_KEY"
BASE_URL_VARIABLE = "OPENAI_BASE_URL"
LLM_MODEL_VARIABLE = "MEMORY_MCP_LLM_MODEL"
SERVER_URL_VARIABLE = "MEMORY_MCP_SERVER_URL"
SERVER_TOKEN_VARIABLE = "MEMORY_MCP_SERVER_TOKEN"
SHARED_PROCESS_VARIABLE = "MEMORY_MCP_SHARED_PROCESS_IDLE_MINUTES"
# All of them: a host that passes its servers only the variables it is told to (Codex) is told
# these, and sessions that differ in them are served by different shared processes.
SETTINGS_VARIABLES = (
    HOME_VARIABLE,
    DSN_VARIABLE,
    API_KEY_VARIABLE,
    BASE_URL_VARIABLE,
    LLM_MODEL_VARIABLE,
    SERVER_URL_VARIABLE,
    SERVER_TOKEN_VARIABLE,
    SHARED_PROCESS_VARIABLE,
)


def process_environment() -> dict[str, str]:
    """A copy of this process's environment."""
    return dict(os.environ)


def default_data_path(environ: Mapping[str, str] | None = None) -> Path:
    """$MEMORY_MCP_HOME wins; otherwise ~/.memory-mcp."""
    home = (os.environ if environ is None else environ).get(HOME_VARIABLE)
    return Path(home).expanduser() if home else Path("~/.memory-mcp").expanduser()


def default_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The config read when no --config is given (if it exists): config.json in the data folder."""
    return default_data_path(environ) / DEFAULT_CONFIG_NAME


def claude_project_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """The project folder Claude Code gives its hooks ($CLAUDE_PROJECT_DIR), if it gives one."""
    return (os.environ if environ is None else environ).get("CLAUDE_PROJECT_DIR") or None


def let_idle_threads_sleep() -> None:
    """Have OpenMP threads sleep when idle instead of spinning (unless the user chose otherwise):
    set before a library that uses OpenMP loads."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
