"""`python -m memory_mcp` behaves like the `memory-mcp` command."""

from memory_mcp.cli import main

raise SystemExit(main())
