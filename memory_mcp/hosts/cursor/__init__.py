"""Cursor: its agent hooks (hooks.json) read and answered, and its install."""
