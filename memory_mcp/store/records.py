"""Pages and vectors as records: one line of JSON each, as the JSON log keeps them and PostgreSQL's
page column holds them, and read back from one."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from memory_mcp.models import Page, StoredPage


@dataclass(frozen=True)
class PageVector:
    """A page's embedding as stored: int8 components that times `scale` give the vector."""

    page_id: str
    model: str
    scale: float
    components: bytes


def page_record(page: Page) -> str:
    """A page as one log record (JSON): its host memory too, when it carries some."""
    return page.record() if isinstance(page, StoredPage) else page.model_dump_json()


def vector_record(vector: PageVector) -> str:
    """A vector as one JSON record (its components in base64)."""
    components = base64.b64encode(vector.components).decode("ascii")
    return json.dumps({"page_id": vector.page_id, "model": vector.model, "scale": vector.scale, "v": components})


def vector_from_record(record: str | bytes) -> PageVector:
    """A vector read back from its record; ValueError (or KeyError) when it is not one."""
    fields = json.loads(record)
    return PageVector(fields["page_id"], fields["model"], float(fields["scale"]), base64.b64decode(fields["v"]))


_ALL_FIELDS = {kind: set(kind.model_fields) for kind in (Page, StoredPage)}


def page_from_record(record: str | bytes) -> Page:
    """A page read back from its record: a StoredPage only when it carries host memory, so that
    the pages of the log compare equal to the Page the caller stored.

    A page whose record names every field (as every record written here does) shares one set of
    their names with the others, where pydantic keeps one per instance (728 bytes, 44% of a page
    in memory): a model copy copies it before changing it, and nothing here assigns to a page's
    fields, the one thing that would change it in place."""
    carries = b'"host_memory"' in record if isinstance(record, bytes) else '"host_memory"' in record
    page = StoredPage.model_validate_json(record) if carries else Page.model_validate_json(record)
    every_field = _ALL_FIELDS[type(page)]
    if len(page.__pydantic_fields_set__) == len(every_field):  # a subset of them: the same set
        object.__setattr__(page, "__pydantic_fields_set__", every_field)
    return page
