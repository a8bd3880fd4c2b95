"""Claude Code: its hooks, its settings entries, and its session transcripts."""
