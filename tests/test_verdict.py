import json
from pathlib import Path

import pytest

from replicate.harness import presets, scoreboard
from replicate.harness.verdict import ChapterRun, claim, report

CONTRACT = {"chapter", "claim", "preset", "reproduced", "checks", "seed", "device", "duration_s", "git_commit"}


def _run(overrides=None):
    params = presets.load_preset("07_optimizers", "smoke")
    return ChapterRun("07_optimizers", "smoke", params, overrides or {})


def test_results_file_follows_the_contract(tmp_path, capsys):
    run = _run()
    ok = run.verdict([claim("a", True, 0.123456, "paper a"), report("b", {"x": 1.0}, "paper b")])
    assert ok is True
    out = capsys.readouterr().out
    assert "PASS   a" in out and "REPORT b" in out and "REPRODUCED (1/1" in out
    record = json.loads(Path(run.save()).read_text())
    assert CONTRACT <= set(record)
    assert record["preset"] == "smoke" and record["seed"] == 0
    assert record["checks"][0] == {"name": "a", "kind": "claim", "passed": True, "ours": 0.1235, "paper": "paper a"}
    assert record["checks"][1]["passed"] is None


def test_one_failing_claim_means_not_reproduced_and_reports_do_not_count(capsys):
    run = _run({"iterations": 5})
    assert run.verdict([claim("a", True, 1, 1), claim("b", False, 2, 1), report("c", 0, 0)]) is False
    out = capsys.readouterr().out
    assert "FAIL   b" in out and "NOT REPRODUCED (1/2" in out and "smoke + iterations=5" in out
    assert _run().verdict([report("only a report", 1, 1)]) is False  # nothing was checked


def test_save_before_verdict_is_an_error():
    with pytest.raises(RuntimeError, match="verdict"):
        _run().save()


def test_scoreboard_lists_every_chapter_and_every_check(tmp_path):
    run = _run()
    run.verdict([claim("first check", False, 3.0, "paper says 1"), report("a discrepancy", 2, 1)])
    run.save()
    page = scoreboard.render(scoreboard.load_results(tmp_path / "results"))
    assert "**not reproduced**" in page and "first check" in page and "a discrepancy" in page
    for ch in presets.chapters().values():
        assert ch.title in page
