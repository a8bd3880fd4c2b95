"""Identifier rules shared by config, tools and storage.

User and agent ids name directories, so they are held to a strict alphabet: letters, digits, `_`
and `-`, and `.`, `@` and `+` so that an e-mail address is an id (not first: no hidden or odd
names). No `/`, no `%`, no spaces, no trailing-newline tricks; the store derives each directory's
name from the id (store/files/layout.py), so no id can name `..` or another user's directory.
"""

from __future__ import annotations

import re
import secrets

IDENTIFIER_RULE = "[A-Za-z0-9_-][A-Za-z0-9_.@+-]{0,127}"
_IDENTIFIER = re.compile(IDENTIFIER_RULE)


def validate_identifier(field: str, value: str) -> str:
    """Return `value` if the whole of it matches the rule; otherwise raise ValueError naming `field`."""
    if not isinstance(value, str) or _IDENTIFIER.fullmatch(value) is None:
        raise ValueError(f"{field} must match {IDENTIFIER_RULE} (got {value!r:.80})")
    return value


def new_id(prefix: str, random_bytes: int = 8) -> str:
    """A random id such as `page_1f2e3d4c5b6a7988`; random so processes sharing a data dir never collide.
    Facts use 4 bytes: unique within one user's few hundred, and short for a model to quote."""
    return f"{prefix}_{secrets.token_hex(random_bytes)}"
