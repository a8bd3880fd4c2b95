"""memory-mcp: long-term memory for LLM agents, served over the Model Context Protocol."""

__version__ = "0.1.0"
