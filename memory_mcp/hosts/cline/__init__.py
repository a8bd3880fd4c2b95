"""Cline: its hook scripts' JSON read and answered, and its install."""
