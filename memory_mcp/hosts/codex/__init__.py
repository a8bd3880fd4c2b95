"""Codex CLI: its hooks (SessionStart, UserPromptSubmit, Stop), its hooks.json entries, and the
prompt of a finished turn read back from its rollout file."""
