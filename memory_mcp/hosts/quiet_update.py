"""`python -m memory_mcp.hosts.quiet_update NEWEST_PAGE`: what a Stop hook leaves behind when the server's
own extraction is on. Told the settings and whose memory on stdin, it waits out the quiet time
(`memory.debounce_seconds`), then runs the structured-memory update of what the hook stored,
unless a later exchange arrived meanwhile (whose own hook left a process of its own for it).
"""

from __future__ import annotations

import sys
import time

from memory_mcp.base.settings import Settings
from memory_mcp.hosts.helper import told_on_stdin
from memory_mcp.models import FlushRequest
from memory_mcp.service.memory_service import MemoryService


def main(argv: list[str]) -> int:
    newest_page = argv[0]
    told = told_on_stdin()
    settings = Settings.model_validate(told["settings"])
    user_id, agent_name = told["user_id"], told["agent_name"]
    time.sleep(settings.memory.debounce_seconds)
    service = MemoryService(settings)
    try:
        latest = service.latest_pages(user_id, agent_name, 1)
        if latest and latest[-1].page_id == newest_page:
            service.flush_memory(FlushRequest.build(user_id=user_id, agent_name=agent_name))
    finally:
        service.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
