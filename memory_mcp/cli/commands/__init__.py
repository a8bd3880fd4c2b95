"""The `memory-mcp` commands, one module per command group, each a thin wrapper over the service."""
