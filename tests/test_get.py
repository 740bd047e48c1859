"""`Replica.get`: one key's current value, or its conflict (each its own type), read from the
key's rows alone on a store opened on its derived state; `State.active_at` takes the one-string
key every other call takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from statefuse import KeyConflict, KeyTextError, KeyValue
from statefuse.sync.replica import Replica

SPACE = "team"


def test_get_returns_the_value_the_conflict_or_none_and_reads_only_the_key(
    tmp_path: Path,
) -> None:
    path = tmp_path / "team.db"
    rep = Replica.open(path, create=True, space=SPACE)
    rep.add_claim("project", "launch", "deadline", "2026-05-01", provenance="kickoff")
    a = rep.add_claim("vendor", "acme", "price", 1150, provenance="quote")
    b = rep.add_claim("vendor", "acme", "price", 1200, provenance="email")
    rep.add_claim("user/x%", "a b", "city", "Paris")
    rep.close()

    rep = Replica.open(path)
    try:
        assert not rep.loaded
        got = rep.get("project/launch/deadline")
        assert isinstance(got, KeyValue)
        assert (got.key, got.scope, got.value, got.many) == (
            ("project", "launch", "deadline"),
            "global",
            "2026-05-01",
            False,
        )
        assert [c.provenance for c in got.claims] == ["kickoff"]
        assert rep.get(("project", "launch", "deadline")) == got
        assert rep.get("user%2Fx%25/a b/city").value == "Paris"  # type: ignore[union-attr]
        contested = rep.get("vendor/acme/price")
        assert isinstance(contested, KeyConflict)
        assert {c.value for c in contested.candidates} == {1150, 1200}
        assert contested.conflict.key == ("vendor", "acme", "price")
        assert rep.get("vendor/acme/price", scope="task:t1") is None
        assert rep.get("nothing/here/at") is None
        assert not rep.loaded  # every read above took the key's rows alone
        rep.decide(contested.conflict, b.claim_id, reason="latest quote")
        decided = rep.get("vendor/acme/price")
        assert isinstance(decided, KeyValue)
        assert decided.value == 1200 and decided.decision is not None
        assert a.claim_id not in {c.claim_id for c in decided.claims}
        with pytest.raises(KeyTextError) as bad:
            rep.get("vendor/acme")
        assert bad.value.field == "key"
    finally:
        rep.close()


def test_active_at_takes_the_one_string_key_as_well_as_its_parts() -> None:
    rep = Replica.memory(space=SPACE)
    c = rep.add_claim("project", "launch", "deadline", "2026-05-01", scope="task:t1")
    state = rep.state()
    assert state.active_at("project/launch/deadline", scope="task:t1") == [c]
    assert state.active_at("project", "launch", "deadline", "task:t1") == [c]
    assert state.active_at(("project", "launch", "deadline"), scope="task:t1") == [c]
    assert state.active_at("project/launch/deadline") == []
    with pytest.raises(KeyTextError):
        state.active_at("project/launch")
    with pytest.raises(KeyTextError):
        state.active_at("project", "launch")
