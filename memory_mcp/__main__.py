"""`python -m memory_mcp` behaves like the `memory-mcp` command."""

from memory_mcp.launch import main

raise SystemExit(main())
