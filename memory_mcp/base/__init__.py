"""Foundations every layer may use: errors, ids, the clock, settings, the environment, shared phrases, projects."""
