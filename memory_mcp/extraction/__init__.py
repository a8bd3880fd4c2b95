"""Turning conversation into structured memory in the background: queue, runner, updater, its prompt, the LLM client."""
