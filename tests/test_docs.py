"""The README's config reference and config.example.json are checked against the settings models."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from memory_mcp.config import Settings

ROOT = Path(__file__).resolve().parent.parent
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
