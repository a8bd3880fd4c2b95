"""The `memory-mcp` command: its fast first step, its commands, and how results look to a person."""
