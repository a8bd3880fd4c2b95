"""The README's config reference and config.example.json are checked against the settings models."""

from __future__ import annotations

import json
import re
from typing import Any

from project import PROJECT_ROOT as ROOT
from pydantic import BaseModel

from memory_mcp.base.settings import Settings

# Settings grouped in a nested object ("memory": {...}), by key.
SECTIONS = {
    name: field.annotation
    for name, field in Settings.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
}


def settings_defaults(model: type[BaseModel] = Settings, prefix: str = "") -> dict[str, Any]:
    """Every setting by dotted name, with its default as JSON would show it."""
    defaults: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if field.annotation in SECTIONS.values():
            defaults.update(settings_defaults(field.annotation, f"{name}."))
        elif name != "data_storage_path":
            defaults[prefix + name] = field.get_default(call_default_factory=True)
    return defaults


def readme_reference() -> dict[str, str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text.split("<!-- config-reference:start -->")[1].split("<!-- config-reference:end -->")[0]
    rows = re.findall(r"^\| `([\w.]+)`[^|]*\| `([^`]*)` \|", table, flags=re.MULTILINE)
    return dict(rows)


def test_readme_lists_every_setting_with_its_default() -> None:
    documented = readme_reference()
    defaults = settings_defaults()
    assert set(documented) == set(defaults) | {"data_storage_path"}
    for name, default in defaults.items():
        assert json.loads(documented[name]) == default, name


def test_example_config_holds_every_setting_at_its_default() -> None:
    example = json.loads((ROOT / "config.example.json").read_text(encoding="utf-8"))
    sections = tuple(SECTIONS)
    flat = {k: v for k, v in example.items() if k not in sections} | {
        f"{section}.{k}": v for section in sections for k, v in example[section].items()
    }
    flat.pop("data_storage_path")
    assert flat == settings_defaults()
    assert example["openai_api_key"] is None, "the example config must not carry a key"


def test_every_file_the_readme_names_exists() -> None:
    """The guarantees table and the layout section point readers at tests, benchmarks and modules."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"\b((?:tests|bench|memory_mcp|examples|\.ci)/[\w./-]+\.(?:py|sh|json))\b", text))
    named |= {f"memory_mcp/{name}" for name in re.findall(r"`(?:memory_mcp/)?((?:store/|models/)?\w+\.py)`", text)}
    missing = sorted(
        path for path in named if not (ROOT / path).exists() and not (ROOT / path.split("/", 1)[1]).exists()
    )
    assert len(named) > 20 and missing == []
