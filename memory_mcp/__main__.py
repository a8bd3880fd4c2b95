"""`python -m memory_mcp` behaves like the `memory-mcp` command."""

from memory_mcp.cli.entry import main

raise SystemExit(main())
