"""``benchmarks.statebench``: the floor it reports sorts leaks by where they sit, and a missing
kit is one clear line (the kit lives outside the project, so the run itself is not a test)."""

from __future__ import annotations

from benchmarks.statebench import _verdict, leak_floor, main


def _q(qid: str, *, present: bool, where: list[list[str]] | None = None) -> dict[str, object]:
    leaks = [{"phrase": f"p{i}", "where": w} for i, w in enumerate(where or [])]
    return {
        "id": qid,
        "q": 1,
        "mnm_present": present,
        "mnm_leak": bool(where),
        "leaks": {"mnm": leaks},
    }


def test_a_leak_in_any_current_claim_counts_there_and_the_rest_only_in_the_working_set():
    queries = [
        _q("a", present=True, where=[["facts/fact", "working/turn:user"]]),
        _q("b", present=True, where=[["working/turn:user"], ["env/env"]]),
        _q("c", present=True, where=[["working/turn:user"], ["working/ws-item"]]),
        _q("d", present=True),  # present in the timeline, kept out of the context
        _q("e", present=False),  # the metric does not apply
    ]
    floor = leak_floor(queries)
    assert (floor["applies"], floor["in_current_claim"], floor["only_in_working_set"]) == (4, 2, 1)
    assert floor["floor"] == 75.0
    assert floor["queries"]["only_in_working_set"] == ["c 1"]


def test_verdicts_compare_with_the_target_in_its_direction():
    assert _verdict("MM_reach", 96.6).endswith("met") and _verdict("MM_reach", 94.9).endswith(
        "MISS"
    )
    assert _verdict("tokens", 200.0).endswith("met") and _verdict("tokens", 200.1).endswith("MISS")
    assert _verdict("restricted", 0.0) == "" and _verdict("tokens", None) == ""


def test_a_missing_kit_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["--kit", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("Error: no StateBench kit at")
