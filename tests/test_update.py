"""`Replica.update`: an agent that changes its own value does not conflict with itself, and a real
disagreement between agents still surfaces."""

from __future__ import annotations

import json

import pytest

from statefuse.entry.cli import main
from statefuse.sync.replica import Replica


def _values(r: Replica, subject: str = "t1") -> list[object]:
    return sorted(str(c.value) for c in r.state().active_claims() if c.subject == subject)


def test_updating_your_own_value_retracts_it_in_the_same_change_and_names_the_new_one():
    r = Replica.memory(space="team")
    first = r.add_claim("task", "t1", "status", "running")
    before = len(r)
    new = r.update("task", "t1", "status", "done")
    assert len(r) == before + 1  # one signed change: the claim and the retraction
    assert _values(r) == ["done"] and r.state().conflicts == ()
    (retraction,) = r.state().retracted[first.claim_id]
    assert retraction.superseded_by == new.claim_id and retraction.target_claim_id == first.claim_id


def test_update_leaves_other_authors_claims_alone_so_disagreement_surfaces():
    me, other = Replica.memory(space="team"), Replica.memory(space="team")
    other.add_claim("task", "t1", "status", "blocked")
    me.merge(other)
    me.add_claim("task", "t1", "status", "running")
    me.update("task", "t1", "status", "done")
    assert _values(me) == ["blocked", "done"]
    state = me.state()
    (conflict,) = state.conflicts
    assert {state.claims[c].value for c in conflict.candidates} == {"blocked", "done"}


def test_concurrent_updates_by_two_replicas_leave_a_real_conflict():
    a, b = Replica.memory(space="team"), Replica.memory(space="team")
    a.add_claim("task", "t1", "status", "running")
    b.merge(a)
    a.update("task", "t1", "status", "done")
    b.update("task", "t1", "status", "failed")  # b retracts only its own (none)
    a.merge(b)
    b.merge(a)
    assert a.state().digest() == b.state().digest()
    assert _values(a) == ["done", "failed"] and len(a.state().conflicts) == 1


def test_update_is_per_scope():
    r = Replica.memory(space="team")
    r.add_claim("task", "t1", "status", "global view")
    r.add_claim("task", "t1", "status", "running", scope="task:t1")
    r.update("task", "t1", "status", "done", scope="task:t1")
    active = {(c.scope, c.value) for c in r.state().active_claims()}
    assert active == {("global", "global view"), ("task:t1", "done")}


def test_a_refused_update_writes_nothing():
    r = Replica.memory(space="team")
    r.add_claim("task", "t1", "status", "running")
    before = (len(r), r.state().digest())
    with pytest.raises(ValueError):
        r.update("task", "t1", "status", float("nan"))
    assert (len(r), r.state().digest()) == before


def test_statefuse_update_replaces_your_value_and_says_which(tmp_path, capsys):
    path = str(tmp_path / "a.db")
    assert main(["--store", path, "init", "--space", "team"]) == 0
    assert main(["--store", path, "claim", "task/t1/status", "running"]) == 0
    capsys.readouterr()
    assert main(["--store", path, "--json", "update", "task/t1/status", "done"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["value"] == "done" and len(doc["replaced"]) == 1
    assert main(["--store", path, "--json", "show"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [c["value"] for c in shown["claims"]] == ["done"]
