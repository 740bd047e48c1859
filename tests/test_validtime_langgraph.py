"""Valid time and context through the LangGraph store: reads honour the store lens's
``valid_at`` and ``context``; items written by other code with intervals read by instant."""

from __future__ import annotations

import os

import pytest

if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
    import langgraph  # noqa: F401 - CI must test the store: a missing langgraph fails loudly
else:
    pytest.importorskip("langgraph")

from statefuse.core.validity import instant_ms
from statefuse.entry.langgraph import StateFuseStore
from statefuse.reading.lens import Lens
from statefuse.sync.replica import Replica


def test_a_store_lens_at_an_instant_and_in_a_context_reads_the_value_that_holds_there():
    rep = Replica.memory(space="team")
    # what an agent wrote through the library: the plan's limit changed on March 1st, per region
    rep.add_claim("lg:plans", "pro", "value", {"limit": 1000}, valid_until="2026-03-01")
    rep.add_claim("lg:plans", "pro", "value", {"limit": 2000}, valid_from="2026-03-01")
    rep.add_claim("lg:plans", "eu", "value", {"vat": 20}, context={"region": "UK"})
    rep.add_claim("lg:plans", "eu", "value", {"vat": 19}, context={"region": "DE"})
    feb = StateFuseStore(rep, lens=Lens(valid_at=instant_ms("t", "2026-02-01")))
    april = StateFuseStore(rep, lens=Lens(now=instant_ms("t", "2026-04-01")))
    assert feb.get(("plans",), "pro").value == {"limit": 1000}
    assert april.get(("plans",), "pro").value == {"limit": 2000}
    uk = StateFuseStore(rep, lens=Lens(context={"region": "UK"}))
    de = StateFuseStore(rep, lens=Lens(context={"region": "DE"}))
    assert uk.get(("plans",), "eu").value == {"vat": 20}
    assert de.get(("plans",), "eu").value == {"vat": 19}
    # neither instant nor context: two values that do not conflict are no conflict either
    plain = StateFuseStore(rep)
    assert "__conflict__" not in plain.get(("plans",), "pro").value
    assert [i.key for i in feb.search(("plans",))] == ["eu", "pro"]
