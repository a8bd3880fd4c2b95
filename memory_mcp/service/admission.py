"""What may be stored: an exchange's sizes, and a whole import checked before anything is written.

add_memory and import_memory apply the same rules, so that an imported exchange is one that
add_memory would have accepted; an import that breaks one writes nothing at all.
"""

from __future__ import annotations

import json
from typing import Any

from memory_mcp.base.errors import InvalidInput
from memory_mcp.base.settings import Settings
from memory_mcp.memory.redaction import ModelT, without_secrets
from memory_mcp.models import AddMemoryRequest, ExportDocument, ImportRequest, MemoryDocument, Page
from memory_mcp.models.stored import without_nul
from memory_mcp.portability import documents
from memory_mcp.portability.documents import parse_import
from memory_mcp.store import Scope

ImportPart = tuple[Scope, MemoryDocument, list[Page]]  # a scope, its memory, its admitted pages


def secrets_out(settings: Settings, model: ModelT) -> ModelT:
    """What is about to be stored, without secrets or private spans (unless memory.redaction is off)."""
    return without_secrets(model) if settings.memory.redaction else model


def check_sizes(settings: Settings, request: AddMemoryRequest) -> None:
    """InvalidInput naming the setting an exchange's text or meta_data exceeds, or saying it is empty."""
    limit = settings.max_text_chars
    for name in ("user_input", "agent_response"):
        if len(getattr(request, name)) > limit:
            raise InvalidInput(f"{name} is longer than {limit} characters (max_text_chars); store less of it")
    if not request.user_input.strip() and not request.agent_response.strip():
        raise InvalidInput("user_input and agent_response are both empty: there is nothing to remember")
    if request.meta_data is not None:
        size = len(json.dumps(request.meta_data, ensure_ascii=False, separators=(",", ":")).encode())
        if size > settings.max_meta_data_bytes:
            raise InvalidInput(
                f"meta_data is {size} bytes as JSON, over the {settings.max_meta_data_bytes} allowed "
                "(max_meta_data_bytes)"
            )


def import_parts(settings: Settings, request: ImportRequest) -> tuple[ExportDocument, Scope, list[ImportPart]]:
    """The import's document, its scope, and each scope's memory and admitted pages; InvalidInput
    for anything that could not be written."""
    document = parse_import(request.data, request.user_id, settings.user_id)
    scope = Scope(document.user_id, document.agent_name)
    named = [("", scope, document.memory, document.pages)] + [
        (f"agents.{name}.", Scope(document.user_id, name), agent.memory, agent.pages)
        for name, agent in document.agents.items()
    ]
    parts = []
    for where, part_scope, memory, pages in named:
        documents.check_imported(where, memory, pages)
        admitted = _admitted(settings, pages)
        try:  # what cannot be written must fail now, before anything is erased
            clean = secrets_out(settings, memory)
            _refuse_nul(f"{where}memory", clean.model_dump(mode="json"))
            clean_pages = [secrets_out(settings, page) for page in admitted]
            clean.model_dump_json()
        except ValueError as exc:
            raise InvalidInput(f"data cannot be stored ({exc}); nothing was imported") from None
        parts.append((part_scope, clean, clean_pages))
    return document, scope, parts


def _admitted(settings: Settings, pages: list[Page]) -> list[Page]:
    """Imported exchanges pass the rules add_memory applies (sizes, meta_data, thread ids,
    valid text), and are stored with timestamps in the one stored form."""
    admitted = []
    for number, page in enumerate(pages):
        fields = page.model_dump(exclude={"page_id"})
        try:
            request = AddMemoryRequest.build(**fields)
            check_sizes(settings, request)
        except InvalidInput as exc:
            raise InvalidInput(f"pages[{number}] ({page.page_id}): {exc}; nothing was imported") from None
        admitted.append(page.model_copy(update={"timestamp": request.timestamp}))
    return admitted


def _refuse_nul(where: str, value: Any) -> None:
    """ValueError naming the first string in `value` (structured memory, as JSON) holding U+0000."""
    if isinstance(value, str):
        without_nul(value)
    elif isinstance(value, list | dict):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            try:
                _refuse_nul(f"{where}.{key}", item)
            except ValueError as exc:
                raise ValueError(f"{where}.{key}: {exc}" if isinstance(item, str) else str(exc)) from None
