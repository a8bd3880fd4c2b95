"""load_settings: defaults, environment, config file, and one-line errors naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from project import PROJECT_ROOT

from memory_mcp.base.settings import ConfigError, MemorySettings, Settings, load_settings

EXAMPLE_CONFIG = PROJECT_ROOT / "config.example.json"


def write_config(folder: Path, content: object, name: str = "config.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def test_defaults_without_file_or_environment() -> None:
    settings = load_settings(None, environ={})

    assert settings.user_id == "default"
    assert settings.assistant_id is None
    assert settings.data_storage_path == Path("~/.memory-mcp").expanduser().absolute()
    assert settings.openai_api_key is None and settings.openai_base_url is None
    assert settings.llm_configured is False
    assert settings.short_term_capacity == 10
    assert settings.max_text_chars == 100_000
    assert settings.max_meta_data_bytes == 65_536
    assert settings.memory == MemorySettings()
    assert settings.memory.enabled is True
    assert settings.memory.debounce_seconds == 30
    assert settings.memory.token_counting == "tiktoken"


def test_memory_mcp_home_sets_the_data_directory(tmp_path: Path) -> None:
    home = tmp_path / "elsewhere"

    settings = load_settings(None, environ={"MEMORY_MCP_HOME": str(home)})

    assert settings.data_storage_path == home


def test_default_environment_is_the_process_environment(isolated_home: Path) -> None:
    # conftest points MEMORY_MCP_HOME at a temp dir; with no environ argument that is what is used.
    assert load_settings().data_storage_path == isolated_home


def test_config_file_data_path_wins_over_memory_mcp_home(tmp_path: Path) -> None:
    target = tmp_path / "explicit"
    path = write_config(tmp_path / "cfg", {"data_storage_path": str(target)})

    settings = load_settings(path, environ={"MEMORY_MCP_HOME": str(tmp_path / "env-home")})

    assert settings.data_storage_path == target


def test_environment_fills_empty_llm_fields() -> None:
    environ = {"OPENAI_API_KEY": "sk-from-env", "OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"}

    settings = load_settings(None, environ=environ)

    assert settings.openai_api_key == "sk-from-env"
    assert settings.openai_base_url == "http://127.0.0.1:11434/v1"
    assert settings.llm_configured is False, "no model is guessed"
    named = load_settings(None, environ={**environ, "MEMORY_MCP_LLM_MODEL": "qwen2.5:7b"})
    assert (named.llm_model, named.llm_configured) == ("qwen2.5:7b", True)


def test_environment_does_not_override_values_in_the_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"openai_api_key": "sk-file", "openai_base_url": ""})
    environ = {"OPENAI_API_KEY": "sk-env", "OPENAI_BASE_URL": "http://env/v1"}

    settings = load_settings(path, environ=environ)

    assert settings.openai_api_key == "sk-file"
    assert settings.openai_base_url == "http://env/v1"  # empty in the file counts as not set


def test_relative_data_path_is_resolved_against_the_config_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_folder = tmp_path / "conf"
    path = write_config(config_folder, {"data_storage_path": "data/memory"})
    monkeypatch.chdir(tmp_path)  # any other working directory

    settings = load_settings(path, environ={})

    assert settings.data_storage_path == config_folder / "data" / "memory"
    assert settings.data_storage_path.is_absolute()


def test_relative_config_path_still_gives_an_absolute_data_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(tmp_path / "conf", {"data_storage_path": "store"})
    monkeypatch.chdir(tmp_path)

    settings = load_settings(Path("conf/config.json"), environ={})

    assert settings.data_storage_path == tmp_path / "conf" / "store"


def test_file_values_are_applied(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        {
            "user_id": "alice",
            "assistant_id": "coder",
            "short_term_capacity": 3,
            "memory": {"debounce_seconds": 300, "token_counting": "char", "enabled": False},
        },
    )

    settings = load_settings(path, environ={})

    assert (settings.user_id, settings.assistant_id, settings.short_term_capacity) == ("alice", "coder", 3)
    assert settings.memory.debounce_seconds == 300
    assert settings.memory.token_counting == "char"
    assert settings.memory.enabled is False
    assert settings.memory.max_facts == 100  # unspecified keys of a section keep their defaults


def test_empty_assistant_id_means_none(tmp_path: Path) -> None:
    assert load_settings(write_config(tmp_path, {"assistant_id": ""}), environ={}).assistant_id is None


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ({"usre_id": "alice"}, "usre_id"),
        ({"memory": {"debounce": 5}}, "memory.debounce"),
    ],
)
def test_unknown_key_is_an_error_naming_the_key(tmp_path: Path, content: dict, field: str) -> None:
    path = write_config(tmp_path, content)

    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ={})

    message = str(caught.value)
    assert f": {field}: " in message
    assert "unknown setting" in message
    assert str(path) in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ({"memory": {"debounce_seconds": 301}}, "memory.debounce_seconds"),
        ({"memory": {"debounce_seconds": -1}}, "memory.debounce_seconds"),
        ({"short_term_capacity": 0}, "short_term_capacity"),
        ({"user_id": "a/b"}, "user_id"),
        ({"user_id": ""}, "user_id"),
        ({"assistant_id": "../up"}, "assistant_id"),
        ({"memory": {"token_counting": "x"}}, "memory.token_counting"),
        ({"memory": {"fact_confidence_threshold": 1.5}}, "memory.fact_confidence_threshold"),
        ({"max_meta_data_bytes": 1}, "max_meta_data_bytes"),
        ({"llm_model": ""}, "llm_model"),
    ],
)
def test_bad_value_is_an_error_naming_the_dotted_field(tmp_path: Path, content: dict, field: str) -> None:
    path = write_config(tmp_path, content)

    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ={})

    message = str(caught.value)
    assert f": {field}: " in message
    assert "\n" not in message


def test_several_bad_values_are_counted_on_the_one_line(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"short_term_capacity": 0, "max_text_chars": 0, "nope": 1})

    with pytest.raises(ConfigError, match=r"\(and 2 more\)$"):
        load_settings(path, environ={})


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"user_id": "alice",', "not valid JSON"),
        ("", "not valid JSON"),
        ('["user_id"]', "must hold a JSON object"),
    ],
)
def test_unreadable_json_is_a_config_error(tmp_path: Path, content: str, expected: str) -> None:
    path = write_config(tmp_path, content)

    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ={})

    assert expected in str(caught.value)
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "absent.json"

    with pytest.raises(ConfigError, match="cannot be read") as caught:
        load_settings(path, environ={})

    assert str(path) in str(caught.value)


def test_example_config_loads_and_documents_every_setting(tmp_path: Path) -> None:
    raw = json.loads(EXAMPLE_CONFIG.read_text(encoding="utf-8"))

    assert set(raw) == set(Settings.model_fields)
    assert set(raw["memory"]) == set(MemorySettings.model_fields)

    settings = load_settings(EXAMPLE_CONFIG, environ={})

    # The example shows the defaults, so copying it changes nothing but what the user edits.
    defaults = Settings()
    for name in Settings.model_fields:
        if name not in ("data_storage_path", "http"):
            assert getattr(settings, name) == getattr(defaults, name), name
    assert settings.data_storage_path == Path("~/.memory-mcp").expanduser()
    # Paths left null are resolved against the data directory.
    assert settings.http.tokens_file == settings.data_storage_path / "tokens.json"
    assert settings.http.model_copy(update={"tokens_file": None}) == defaults.http


def test_a_relative_tokens_file_is_taken_from_the_config_files_folder(tmp_path: Path) -> None:
    config = tmp_path / "conf" / "memory.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"http": {"tokens_file": "secrets/tokens.json"}}), encoding="utf-8")

    settings = load_settings(config, environ={"MEMORY_MCP_HOME": str(tmp_path / "data")})

    assert settings.http.tokens_file == tmp_path / "conf" / "secrets" / "tokens.json"
    assert load_settings(None, environ={"MEMORY_MCP_HOME": str(tmp_path / "data")}).http.tokens_file == (
        tmp_path / "data" / "tokens.json"
    )


def test_the_example_config_leaves_the_data_dir_to_memory_mcp_home(tmp_path: Path) -> None:
    home = tmp_path / "home-from-env"

    settings = load_settings(EXAMPLE_CONFIG, environ={"MEMORY_MCP_HOME": str(home)})

    assert settings.data_storage_path == home
