"""The embedded default backend: JSON files, one directory per user."""
