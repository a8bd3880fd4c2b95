"""Windsurf: Cascade's hooks (hooks.json) read, and its install."""
