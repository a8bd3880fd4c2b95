"""The process every stdio session and prompt hook of a user shares, when sharing is on: the MCP
sessions are `memory_mcp.mcp.daemon`'s; the hooks are answered here as `memory-mcp hook` answers
them, with the process's memory (the hook helper's work, without a helper of its own).

`python -m memory_mcp.cli.shared_process SOCKET [CONFIG]`, started by `stdio_relay` when nobody
answers at SOCKET.
"""

from __future__ import annotations

import sys

from memory_mcp.cli.hook_command import shared_hooks
from memory_mcp.mcp import daemon

if __name__ == "__main__":
    sys.exit(daemon.main(answer_hook=shared_hooks))
