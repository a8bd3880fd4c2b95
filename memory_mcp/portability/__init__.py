"""Memory that moves: the export document and importing it (merging or replacing), DeerFlow's
memory.json, MemoryOS's data directory, and copying every user between storage backends."""
