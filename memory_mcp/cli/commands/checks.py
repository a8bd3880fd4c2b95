"""What a command makes sure of before it acts: the memory it names is stored, the person agreed."""

from __future__ import annotations

import sys

from memory_mcp.base.errors import InvalidInput, NotFound
from memory_mcp.base.ids import validate_identifier
from memory_mcp.service.memory_service import MemoryService


def require_stored(service: MemoryService, user: str, agent: str | None) -> None:
    """The user (and agent) the command line names: valid ids, with memory stored."""
    try:
        validate_identifier("user_id", user)
        if agent is not None:
            validate_identifier("--agent", agent)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    if not service.is_stored(user, agent):
        who = user + (f"/{agent}" if agent else "")
        raise NotFound(f"nothing is stored for {who}; `memory-mcp users` lists the users with memory")


def confirmed(question: str, users: list[str]) -> bool:
    """Whether the person at the terminal typed the user id (or, for several, `yes`) to confirm."""
    if not sys.stdin.isatty():
        raise InvalidInput("pass --yes to do this without being asked (no terminal to ask on)")
    expected = users[0] if len(users) == 1 else "yes"
    # On stderr: stdout may be a file (--json > out.json), and the question must reach the person.
    print(f"{question}? Type {'the user id' if len(users) == 1 else 'yes'} to confirm: ", end="", file=sys.stderr)
    sys.stderr.flush()
    return sys.stdin.readline().strip() == expected
