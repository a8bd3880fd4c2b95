"""The README's tools table, made from the tool definitions so that it cannot drift from them.

`python -m memory_mcp.mcp.tools_table` prints it: each tool's name, the first sentence of the
description its host model reads, and its parameters (from its request model). `--into PATH` prints
that file with the table between its `<!-- tools:start -->` and `<!-- tools:end -->` markers
replaced (this module writes no file: only the store does); tests/test_docs.py fails when the
README's table is not the one printed here, naming COMMAND.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from pydantic.fields import FieldInfo

from memory_mcp.mcp.server import TOOLS, ToolSpec

START = "<!-- tools:start -->"
END = "<!-- tools:end -->"
COMMAND = "python -m memory_mcp.mcp.tools_table --into README.md > README.new && mv README.new README.md"
# Whose memory a call reaches: listed once under the table rather than in nearly every row.
SCOPE = ("user_id", "agent_name")


def first_sentence(text: str) -> str:
    """The description up to its first full stop followed by a new sentence."""
    return re.split(r"(?<=[.!?])\s+(?=[A-Z])", text.strip(), maxsplit=1)[0]


def cell(text: str) -> str:
    """Text safe inside a markdown table cell: tags shown as code, pipes and brackets escaped."""
    parts = re.split(r"(<\w+>)", text)
    return "".join(
        f"`{part}`"
        if re.fullmatch(r"<\w+>", part)
        else part.replace("|", r"\|").replace("<", "&lt;").replace(">", "&gt;")
        for part in parts
    )


def shown_default(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parameter(name: str, field: FieldInfo) -> str:
    """`name` when required, `name?` when leaving it out is the same as an empty value, else `name=default`."""
    if field.is_required():
        return f"`{name}`"
    if field.default in (None, "", False):
        return f"`{name}?`"
    return f"`{name}={shown_default(field.default)}`"


def folds_scope(spec: ToolSpec) -> bool:
    fields = spec.request.model_fields
    return all(name in fields and not fields[name].is_required() for name in SCOPE)


def parameters(spec: ToolSpec) -> str:
    fields = spec.request.model_fields
    shown = [parameter(name, field) for name, field in fields.items() if not (folds_scope(spec) and name in SCOPE)]
    return ", ".join(shown) or "none"


def table() -> str:
    """The markdown table of every tool, then the line about `user_id` and `agent_name`."""
    lines = ["| tool | what it does | parameters (`?` optional) |", "| --- | --- | --- |"]
    lines += [
        f"| `{name}` | {cell(first_sentence(spec.description))} | {parameters(spec)} |" for name, spec in TOOLS.items()
    ]
    others = [f"`{name}`" for name, spec in TOOLS.items() if not folds_scope(spec)]
    listed = ", ".join(others[:-1]) + f" and {others[-1]}" if len(others) > 1 else "".join(others)
    lines += [
        "",
        f"Every tool but {listed} also takes `user_id?` and `agent_name?`: whose memory it acts on "
        "(by default, the configured user's own).",
    ]
    return "\n".join(lines)


def between_markers(text: str) -> str:
    """What a file holds between the tools markers, without the blank lines around it."""
    if START not in text or END not in text:
        raise ValueError(f"no {START} ... {END} markers")
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n")


def with_table(text: str) -> str:
    """`text` with the current table between its markers."""
    between_markers(text)  # both markers are there
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    return f"{before}{START}\n{table()}\n{END}{after}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the tools table, or a file with its table brought up to date.")
    parser.add_argument(
        "--into", type=Path, metavar="PATH", help=f"print PATH with what is between {START} and {END} replaced"
    )
    args = parser.parse_args(argv)
    if args.into is None:
        print(table())
        return 0
    try:
        sys.stdout.write(with_table(args.into.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        print(f"{args.into}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
