"""The dashboard's templates: Jinja2 with the filters and globals its pages are written with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import pass_context
from starlette.datastructures import URL
from starlette.templating import Jinja2Templates

from memory_mcp.base.phrases import extraction_said, waiting_said
from memory_mcp.dashboard.context import Memory, path
from memory_mcp.dashboard.filters import FILTERS
from memory_mcp.dashboard.uploads import MAX_UPLOAD_BYTES, MEGABYTE

TEMPLATES = Path(__file__).parent / "templates"


def build_templates(tokens_on: bool) -> Jinja2Templates:
    """The templates of one dashboard; `tokens_on`: its pages send a bearer token with each request."""
    templates = Jinja2Templates(directory=TEMPLATES)
    templates.env.filters.update(FILTERS)
    templates.env.globals["url_for"] = url_for
    templates.env.globals["tokens_on"] = tokens_on
    templates.env.globals["at"] = at
    templates.env.globals["extraction_said"] = extraction_said
    templates.env.globals["waiting_said"] = waiting_said
    templates.env.globals["max_upload_mb"] = MAX_UPLOAD_BYTES // MEGABYTE
    return templates


@pass_context
def url_for(context: Any, name: str, **params: Any) -> URL:
    """In a template: the root-relative address of page or asset `name`."""
    return path(context["request"], name, **params)


@pass_context
def at(context: Any, name: str, **params: Any) -> URL:
    """In a template: the address of page `name` of the memory the page is about."""
    memory: Memory = context["memory"]
    return memory.url(context["request"], name, **params)
