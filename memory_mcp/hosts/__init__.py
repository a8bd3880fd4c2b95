"""Memory for agent hosts without a tool call: what a session is given, the prompt helper, each host beside the others."""
