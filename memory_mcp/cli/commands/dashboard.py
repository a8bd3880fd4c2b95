"""The `dashboard` command: the web dashboard served on this machine, to this account alone."""

from __future__ import annotations

import argparse
import sys

from memory_mcp.service.memory_service import MemoryService


def serve_dashboard(service: MemoryService, args: argparse.Namespace) -> int:
    """Serve the dashboard on the loopback interface until interrupted, to this account alone:
    every account on the machine can reach 127.0.0.1, only this one sees the key printed here."""
    import secrets
    from contextlib import nullcontext

    import uvicorn

    from memory_mcp.dashboard.app import create_app
    from memory_mcp.dashboard.opening import opened_in_browser

    key = secrets.token_urlsafe(32)
    url = f"http://127.0.0.1:{args.port}/?key={key}"
    # The one place the key is written: uvicorn's access log (which would hold it too) stays off.
    print(f"memory-mcp dashboard on {url} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    with opened_in_browser(url) if args.open else nullcontext():
        uvicorn.run(
            create_app(service, owner_key=key), host="127.0.0.1", port=args.port, log_level="warning", access_log=False
        )
    return 0
