"""The `memory-mcp` command: the composition root that reads settings once and starts the server."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from memory_mcp import __version__
from memory_mcp.config import ConfigError, load_settings
from memory_mcp.service import MemoryService

log = logging.getLogger("memory_mcp")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memory-mcp",
        description="Long-term memory for LLM agents, served over the Model Context Protocol (stdio).",
        epilog="Without --config the embedded defaults apply and data lives in $MEMORY_MCP_HOME or ~/.memory-mcp. "
        "OPENAI_API_KEY and OPENAI_BASE_URL fill the LLM settings the config leaves empty.",
    )
    parser.add_argument("--config", type=Path, metavar="PATH", help="JSON config file (see config.example.json)")
    parser.add_argument("--transport", choices=["stdio"], default="stdio", help="MCP transport (default: stdio)")
    parser.add_argument(
        "--log-level",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        default="INFO",
        help="what to log on stderr (default: INFO); stdout carries only the protocol",
    )
    parser.add_argument("--version", action="version", version=f"memory-mcp {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # stdout belongs to the protocol: every log line goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=args.log_level, format="%(levelname)s %(name)s: %(message)s")
    # One line per LLM request is noise at INFO; failures are logged by the updater itself.
    for chatty in ("httpx", "httpx2"):
        logging.getLogger(chatty).setLevel(max(logging.WARNING, logging.getLevelName(args.log_level)))
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"memory-mcp: {exc}", file=sys.stderr)
        return 2

    from memory_mcp.server import build_server

    service = MemoryService(settings)
    log.info(
        "memory-mcp %s on %s; data in %s; structured memory %s",
        __version__,
        args.transport,
        settings.data_storage_path,
        f"on ({settings.llm_model})" if service.extraction_on else "off (see notes in tool results)",
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, functools.partial(_flush_and_exit, service))
    service.start()
    try:
        build_server(service).run(transport=args.transport)
    finally:
        service.close()
    return 0


def _flush_and_exit(service: MemoryService, signum: int, frame: object) -> None:
    """Give pending updates their bounded flush, then leave at once.

    An orderly return cannot be had here: the SDK reads stdin in a thread blocked in read(),
    which would keep the process alive until the host closes the pipe. Leaving abruptly loses
    nothing: every acknowledged exchange is already on disk, and unfinished updates resume at
    the next start.
    """
    log.info("%s: finishing pending memory updates, then exiting", signal.Signals(signum).name)
    service.close()
    logging.shutdown()
    os._exit(0)
