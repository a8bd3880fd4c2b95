"""Commands that carry memory elsewhere and back: `export`, `import`, and `migrate` between backends."""

from __future__ import annotations

import argparse
import json
import sys

from memory_mcp.base.errors import InvalidInput
from memory_mcp.base.phrases import plural
from memory_mcp.base.settings import Settings
from memory_mcp.cli.commands.checks import confirmed, require_stored
from memory_mcp.cli.commands.output import console, emit, print_json
from memory_mcp.models import ExportRequest, ImportRequest
from memory_mcp.portability.documents import parse_import
from memory_mcp.portability.history import FOLDER_KINDS, History, merging_imports, read_history
from memory_mcp.portability.history import KINDS as HISTORY_KINDS
from memory_mcp.portability.host_sessions import default_folder
from memory_mcp.portability.memoryos import from_memoryos
from memory_mcp.recall.saved_index import SnapshotKeeper
from memory_mcp.service.memory_service import MemoryService, save_word_indexes


def export_memory(service: MemoryService, args: argparse.Namespace) -> int:
    require_stored(service, args.user, args.agent)
    return print_json(
        service.export_memory(ExportRequest.build(user_id=args.user, agent_name=args.agent)).model_dump(mode="json")
    )


def import_memory(service: MemoryService, args: argparse.Namespace) -> int:
    if not args.from_memoryos and args.format != "export":
        history = _past_conversations(args)
        if history is not None:
            return import_history(service, args, history)
    if args.source is None:
        raise InvalidInput("SOURCE is needed: a file or folder to import (only --format claude-code or codex has one)")
    if args.from_memoryos:
        converted = from_memoryos(args.source, args.memoryos_user, args.assistant, rename_to=args.user)
        documents = [document.model_dump(mode="json") for document in converted]
        target = None
    else:
        try:
            documents = [json.loads(args.source.read_text(encoding="utf-8"))]
        except (OSError, ValueError) as exc:
            raise InvalidInput(f"{args.source} could not be read as JSON ({exc})") from None
        if not isinstance(documents[0], dict):
            raise InvalidInput(f"{args.source} must hold a JSON object")
        target = args.user
    requests = [ImportRequest.build(data=document, mode=args.mode, user_id=target) for document in documents]
    # every document is checked before any is written
    users = [parse_import(request.data, request.user_id, service.settings.user_id).user_id for request in requests]
    if (
        args.mode == "replace"
        and not args.yes
        and not confirmed(f"Replace everything stored for {', '.join(users)}", users)
    ):
        print("memory-mcp import: not confirmed; nothing was changed", file=sys.stderr)
        return 1
    results = [service.import_memory(request) for request in requests]  # indexed as the command closes
    service.bulk_loaded()
    if args.json:
        return print_json([result.model_dump(mode="json") for result in results])
    for result in results:
        console().out.print(f"{result.user_id}: {result.message}")
    return 0


def _past_conversations(args: argparse.Namespace) -> History | None:
    source = args.source
    if source is None and args.format in FOLDER_KINDS:
        source = default_folder(args.format)
        if not source.is_dir():
            raise InvalidInput(f"{source} does not exist: name the folder of {HISTORY_KINDS[args.format]} to import")
    return read_history(source, args.format) if source is not None else None


def import_history(service: MemoryService, args: argparse.Namespace, history: History) -> int:
    """Store the conversations batch by batch, each an ordinary merging import (the admission
    rules, redaction and duplicate check of every add), saying on stderr how far it has come."""
    if args.mode == "replace":
        raise InvalidInput(
            "--mode replace does not apply to past conversations: they are added to what is stored "
            "(to start over, `memory-mcp forget USER` first)"
        )
    user = args.user or service.settings.user_id
    total, added, skipped = history.exchanges, 0, 0
    tty = sys.stderr.isatty()
    try:
        for batch, request in merging_imports(history, user, service.settings.max_text_chars):
            result = service.import_memory(request)
            added, skipped = added + result.pages_added, skipped + result.pages_skipped
            done = f"{added + skipped:,} of {total:,} exchanges ({plural(batch.conversations_done, 'conversation')})"
            print(f"\rimported {done}\033[K" if tty else f"imported {done}", end="" if tty else "\n", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"\nstopped after {added + skipped:,} exchanges: run it again to go on", file=sys.stderr)
        return 130
    if tty:
        print(file=sys.stderr)
    service.bulk_loaded()  # before the index of what came is built, as the command closes
    summary = {
        "user_id": user,
        "source": history.kind,
        "conversations": len(history.conversations),
        "exchanges": total,
        "added": added,
        "already_stored": skipped,
    }
    if args.json:
        return print_json(summary)
    console().out.print(
        f"{user}: {plural(added, 'exchange')} added from {plural(len(history.conversations), 'conversation')} "
        f"({HISTORY_KINDS[history.kind]}); {skipped:,} already stored"
    )
    return 0


def migrate(settings: Settings, args: argparse.Namespace) -> int:
    """Both backends come from the one config (the JSON files at data_storage_path, the database at
    storage.dsn), whichever of them storage.backend names; each is opened here, once."""
    from memory_mcp.portability.backend_copy import backend_settings, copy_memory, open_backend

    if args.source == args.target:
        raise InvalidInput(f"--from and --to must name different backends (both are {args.source})")
    source, target = (backend_settings(settings, name) for name in (args.source, args.target))
    with open_backend(source) as reading, open_backend(target) as writing, open_backend(target) as checking:
        report = copy_memory(reading, writing, checking, resume=args.resume)
    # A smaller log is indexed faster than a saved index is read: none is saved for it.
    save_word_indexes(target, [(s.user_id, s.agent_name) for s in report.scopes if s.pages >= SnapshotKeeper.MIN_PAGES])
    return emit(args, report, lambda: console().migration(report, f"{args.source} -> {args.target}"))
