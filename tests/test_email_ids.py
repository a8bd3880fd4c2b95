"""E-mail addresses as user (and agent) ids: accepted everywhere an id is, each given a directory
of its own whose name reads back as the id, kept apart from ids that differ only in case, and
never a way out of the data folder."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TextIO

import pytest
from command_line import cli
from hypothesis import given
from hypothesis import strategies as st
from stdio_helpers import add, connect, recall, run

from memory_mcp.base.ids import IDENTIFIER_RULE, validate_identifier
from memory_mcp.store import Scope
from memory_mcp.store.files.layout import directory_name, identifier_of, scope_of_lock

ALICE = "Alice.Martin+work@Corp.example.COM"
ALICE_LOWER = ALICE.lower()  # another user: ids are exact
identifiers = st.from_regex(f"\\A{IDENTIFIER_RULE}\\Z")


@given(identifiers)
def test_every_id_has_a_directory_name_that_reads_back_and_is_no_path(identifier: str) -> None:
    name = directory_name(identifier)
    assert identifier_of(name) == identifier
    assert re.fullmatch(r"[a-z0-9_%-]+(~[0-9a-f]+)?", name), "lower case, no dot, no separator"


@given(identifiers, identifiers)
def test_ids_that_differ_even_in_case_never_share_a_directory(one: str, other: str) -> None:
    if one != other:
        assert directory_name(one).lower() != directory_name(other).lower()


@given(identifiers, st.one_of(st.none(), identifiers), st.sampled_from(["log", "doc", "update"]))
def test_a_lock_file_names_its_scope(user: str, agent: str | None, kind: str) -> None:
    owner = directory_name(user) + ("" if agent is None else "@" + directory_name(agent))
    assert scope_of_lock(f"{owner}.{kind}.lock") == Scope(user, agent)


@pytest.mark.parametrize("bad", [".alice@x.org", "@x.org", "+x", "a@b/c", "a b@x.org", "a%40b", "a" * 129])
def test_what_is_not_an_id_is_refused_with_the_rule(bad: str) -> None:
    with pytest.raises(ValueError, match=re.escape(IDENTIFIER_RULE)):
        validate_identifier("user_id", bad)


@pytest.mark.integration
def test_email_users_over_stdio_are_kept_apart_listed_and_forgotten(home: Path, errlog: TextIO) -> None:
    async def body() -> dict[str, Any]:
        async with connect(home, errlog=errlog) as client:
            await add(client, "My desk is on floor 3", "Noted", user_id=ALICE)
            await add(client, "My desk is on floor 9", "Noted", user_id=ALICE_LOWER, agent_name="hr.bot@corp")
            return {
                "alice": await recall(client, "desk floor", user_id=ALICE),
                "lower": await recall(client, "desk floor", user_id=ALICE_LOWER, agent_name="hr.bot@corp"),
            }

    out = run(body)
    assert [p["user_input"] for p in out["alice"]["short_term_memory"]] == ["My desk is on floor 3"]
    assert [p["user_input"] for p in out["lower"]["short_term_memory"]] == ["My desk is on floor 9"]
    folders = sorted(path.name for path in (home / "users").iterdir())
    assert folders == sorted([directory_name(ALICE), directory_name(ALICE_LOWER)])
    assert all("." not in name and "@" not in name for name in folders)

    listed = cli(home, "users", "--json").json()
    assert {ALICE, ALICE_LOWER} <= {user["user_id"] for user in listed["users"]}
    assert cli(home, "forget", ALICE, "--yes").code == 0
    assert sorted(path.name for path in (home / "users").iterdir()) == [directory_name(ALICE_LOWER)]
