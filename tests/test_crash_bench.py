"""The kill -9 campaign of `benchmarks.crash` runs end to end (one short trial): writers are
killed, and the store it checks afterwards holds every acknowledged claim."""

from __future__ import annotations

import json

from benchmarks import crash


def test_one_trial_of_the_kill_campaign_checks_every_acknowledged_claim(tmp_path, capsys):
    out = tmp_path / "crash.json"
    assert crash.main(["--trials", "1", "--writers", "2", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["ok"] is True
    assert document["acknowledged"] > 0  # the writers wrote before they were killed
    assert "all present, no damage, no fork" in capsys.readouterr().out
