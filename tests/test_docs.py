"""The documentation is held to the code: the README stays a short user guide whose tools table is made
from the tool definitions; the configuration reference and config.example.json match the settings
models; every file and link the documentation names exists; the measured figures it shows are those the
benchmarks wrote to bench/results/."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from project import PROJECT_ROOT as ROOT
from pydantic import BaseModel

from bench import result_files
from memory_mcp.base.settings import Settings
from memory_mcp.mcp import tools_table

README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 300

# Settings grouped in a nested object ("memory": {...}), by key.
SECTIONS = {
    name: field.annotation
    for name, field in Settings.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
}


def documents() -> list[Path]:
    """The README and every page of docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def readme_section(heading: str) -> str:
    return read(README).split(f"\n## {heading}\n")[1].split("\n## ")[0]


def settings_defaults(model: type[BaseModel] = Settings, prefix: str = "") -> dict[str, Any]:
    """Every setting by dotted name, with its default as JSON would show it."""
    defaults: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if field.annotation in SECTIONS.values():
            defaults.update(settings_defaults(field.annotation, f"{name}."))
        elif name != "data_storage_path":
            defaults[prefix + name] = field.get_default(call_default_factory=True)
    return defaults


def setting_rows(table: str) -> dict[str, str]:
    """(setting, default as written) of each row of a markdown table whose first two cells are code."""
    return dict(re.findall(r"^\| `([\w.]+)`[^|]*\| `([^`]*)` \|", table, flags=re.MULTILINE))


def configuration_reference() -> dict[str, str]:
    text = read(DOCS / "configuration.md")
    table = text.split("<!-- config-reference:start -->")[1].split("<!-- config-reference:end -->")[0]
    return setting_rows(table)


def test_the_configuration_reference_lists_every_setting_with_its_default() -> None:
    documented = configuration_reference()
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


def test_the_readme_is_a_short_user_guide() -> None:
    lines = read(README).count("\n")
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines, at most {MAX_README_LINES}: move detail to docs/ and link to it"
    )


def test_the_readme_tools_table_is_made_from_the_tool_definitions() -> None:
    assert tools_table.between_markers(read(README)) == tools_table.table(), (
        f"README.md's tools table differs from the tool definitions: run `.venv/bin/{tools_table.COMMAND}`"
    )


def test_the_tools_table_names_every_tool_and_parameter() -> None:
    table = tools_table.table()
    for name, spec in tools_table.TOOLS.items():
        [row] = [line for line in table.splitlines() if line.startswith(f"| `{name}` |")]
        folded = set(tools_table.SCOPE) if tools_table.folds_scope(spec) else set()
        for parameter in spec.parameters - folded:
            assert re.search(rf"`{parameter}(\?|=[^`]+)?`", row), (name, parameter)
        assert re.search(r"(?<!`)<\w+>", row) is None, "a tag outside code would vanish from the rendered page"
    assert "`user_id?` and `agent_name?`" in table, "the parameters left out of the rows are named under the table"


def test_the_readme_settings_table_agrees_with_the_settings() -> None:
    shown = setting_rows(readme_section("Settings"))
    defaults = settings_defaults()
    assert len(shown) == 5
    for name, default in shown.items():
        assert name in defaults and json.loads(default) == defaults[name], name


def test_the_quickstart_is_make_demo_then_make_test() -> None:
    """CI runs what the README says: `make demo`, then `make test` (.ci/run)."""
    commands = re.findall(r"^(make \w+)", readme_section("Quickstart"), flags=re.MULTILINE)
    assert commands == ["make demo", "make test"]
    ci = read(ROOT / ".ci" / "run")
    assert ci.index("\nmake demo\n") < ci.index("\nmake test\n")


def test_the_readme_installs_from_the_package_name() -> None:
    install = readme_section("Install")
    project = read(ROOT / "pyproject.toml")
    assert 'name = "memory-mcp-store"' in project and 'memory-mcp-store = "' in project
    assert "pip install memory-mcp-store" in install and "uvx memory-mcp-store" in install


def test_every_file_the_documentation_names_exists() -> None:
    """The guarantees, the performance figures and the development guide point readers at tests,
    benchmarks and modules; a module named alone is one of the package's."""
    modules = {path.name for path in (ROOT / "memory_mcp").rglob("*.py")}
    named: set[str] = set()
    for path in documents():
        text = read(path)
        named |= set(
            re.findall(r"\b((?:tests|bench|memory_mcp|examples|\.ci|packaging)/[\w./-]+\.(?:py|sh|json))\b", text)
        )
        for name in re.findall(r"`((?:store/|models/)?\w+\.py)`", text):
            named.add(name if "/" in name or name not in modules else f"memory_mcp/**/{name}")
    missing = sorted(
        path
        for path in named
        if "**" not in path and not (ROOT / path).exists() and not (ROOT / "memory_mcp" / path).exists()
    )
    assert len(named) > 40 and missing == []


def test_every_test_the_guarantees_name_exists() -> None:
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", read(DOCS / "guarantees.md"))
    assert named and [(path, name) for path, name in named if f"def {name}(" not in read(ROOT / path)] == []


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings (outside code blocks)."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", re.sub(r"```.*?```", "", text, flags=re.DOTALL), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_every_relative_link_leads_somewhere() -> None:
    broken = []
    for path in documents():
        text = read(path)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists():
                broken.append(f"{path.name}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(read(linked)):
                broken.append(f"{path.name}: {target} (no such heading)")
    assert broken == []


def test_every_page_of_docs_is_linked_from_the_readme() -> None:
    readme = read(README)
    assert [page.name for page in sorted(DOCS.glob("*.md")) if f"(docs/{page.name})" not in readme] == []


def test_the_figures_the_documentation_shows_are_those_of_the_result_files() -> None:
    shown = [(path.name, name, figures) for path in documents() for name, figures in result_files.embedded(read(path))]
    differing = [f"{page}: {name}" for page, name, figures in shown if figures != result_files.figures_of(name)]
    assert differing == [], "run `.venv/bin/python bench/result_files.py` to copy the result files into the docs"
    quoted = {name for _, name, _ in shown}
    for headline in ("bench_store", "bench_hooks", "bench_injection", "locomo_recall", "bench_startup"):
        assert headline in quoted, f"docs/ shows no figures of {headline}"
    for result in sorted(result_files.RESULTS.glob("*.md")):
        text = read(result)
        assert result.stem in quoted, f"{result.name} is shown nowhere"
        assert re.search(r"\bcommit [0-9a-f]{7,40}\b", text) and re.search(r"\d+ CPUs|\d-core", text), (
            f"{result.name} says at which commit and on which machine it was measured"
        )
        assert re.search(r"^`.*\bpython bench/\S+\.py", text, re.MULTILINE), f"{result.name} names its command"


def test_copying_figures_fills_each_table_alone(tmp_path: Path, monkeypatch: Any) -> None:
    """An empty table the documentation shows takes its own file's figures and never reaches past its end."""
    monkeypatch.setattr(result_files, "RESULTS", tmp_path)
    for name, figure in (("one", "| a |"), ("two", "| b |")):
        (tmp_path / f"{name}.md").write_text(f"# {name}\n\n{result_files.START}\n{figure}\n{result_files.END}\n")
    page = "<!-- figures: one -->\n<!-- figures end -->\n\nbetween\n\n<!-- figures: two -->\n| old |\n<!-- figures end -->\n"
    missing: set[str] = set()
    copied = result_files.synced(page, missing)
    assert copied == page.replace("one -->\n", "one -->\n| a |\n").replace("| old |", "| b |") and not missing
    assert list(result_files.embedded(copied)) == [("one", "| a |"), ("two", "| b |")]


def test_the_readme_quotes_figures_from_the_result_files() -> None:
    costs = readme_section("What the model is given, and what it costs").split("What it costs:")[1].split("\n\n")[0]
    figures = re.findall(r"\d+(?:,\d{3})+|\d+\.\d+|\d+-\d+", costs)
    results = "\n".join(read(path) for path in result_files.RESULTS.glob("*.md"))
    assert len(figures) >= 5
    assert [figure for figure in figures if figure not in results] == []
