"""Gemini CLI: its hooks (BeforeAgent, AfterAgent, SessionStart) and its settings entries."""
