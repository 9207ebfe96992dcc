import json
from pathlib import Path

import pytest

from replicate import config
from replicate.harness import scoreboard
from replicate.config import RunSpec
from replicate.verdict import ChapterRun, claim, report

CONTRACT = {"chapter", "claim", "preset", "overrides", "params", "reproduced", "checks", "seed", "device",
            "duration_s", "git_commit"}


def _run(overrides=None):
    return ChapterRun(RunSpec.make("07_optimizers", "smoke", overrides))


def test_results_file_follows_the_contract(tmp_path, capsys):
    run = _run()
    ok = run.verdict([claim("a", True, 0.123456, "paper a", id="a"),
                      report("b", {"x": 1.0}, "paper b", id="b")])
    assert ok is True
    out = capsys.readouterr().out
    assert "PASS   a" in out and "REPORT b" in out and "REPRODUCED (1/1" in out
    record = json.loads(Path(run.save()).read_text())
    assert CONTRACT <= set(record)
    assert record["preset"] == "smoke" and record["overrides"] == {} and record["seed"] == 0
    assert record["checks"][0] == {"name": "a", "kind": "claim", "passed": True, "ours": 0.1235,
                                   "paper": "paper a", "inconclusive": False, "diagnosis": None,
                                   "id": "a"}
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
    assert "verdict-badge not-reproduced" in page and "first check" in page and "a discrepancy" in page
    for ch in config.chapters().values():
        assert ch.title in page


def test_the_record_keeps_the_spec_verbatim_and_no_label_to_parse():
    run = _run({"iterations": 5})
    run.verdict([claim("a", True, 1, 1)])
    record = run.record()
    assert record["preset"] == "smoke" and record["overrides"] == {"iterations": 5}
    assert record["params"]["iterations"] == 5 and RunSpec.from_record(record) == run.spec


def test_reproduced_is_one_function_for_checks_and_records():
    from replicate.verdict import reproduced

    assert reproduced([claim("a", True, 1, 1), report("b", 0, 0)])
    assert not reproduced([{"kind": "claim", "passed": False}]) and not reproduced([])


def test_an_interval_beside_the_papers_number_reads_consistent_below_or_above():
    from replicate.verdict import against_paper
    assert against_paper((6.0, 9.0), (6.74, 8.38)) == "consistent"
    assert against_paper((1.5, 1.8), (1.69, 1.69)) == "consistent"
    assert against_paper((3.0, 6.0), (6.74, 8.38)) == "below"
    assert against_paper((8.5, 10.0), (6.74, 8.38)) == "above"
    assert against_paper((9.0, 9.0), (6.74, 8.38), lower_bound=True) == "above"
    assert against_paper((2.5, 2.5), (6.74, 8.38), lower_bound=True) == "inconclusive (at least 2.5)"


def test_an_inconclusive_check_reads_inconclusive_with_its_reason_and_still_counts_as_not_passed(
        capsys):
    from replicate.verdict import inconclusive_count, word

    untested = claim("t4 decreases with r", False, {"40%": None}, "decreasing", inconclusive=True,
                     diagnosis="did not grok within 6,000 steps (r = 0.4)")
    run = _run()
    assert run.verdict([claim("a", True, 1, 1), untested]) is False
    out = capsys.readouterr().out
    assert "INCONCLUSIVE t4 decreases with r" in out
    assert "why: did not grok within 6,000 steps (r = 0.4)" in out
    assert "NOT REPRODUCED (1/2 claim checks pass; 1 inconclusive)" in out
    record = run.record()
    assert word(record["checks"][1]) == "INCONCLUSIVE" and inconclusive_count(record["checks"]) == 1
    assert record["checks"][1]["passed"] is False and record["reproduced"] is False


def test_a_failing_check_can_carry_a_diagnosis_and_stays_a_fail(capsys):
    from replicate.verdict import word

    failed = claim("a slingshot appears", False, 0, ">= 1", diagnosis="validation accuracy "
                   "peaked at 0.62")
    assert word({"kind": "claim", "passed": False, "inconclusive": False}) == "FAIL"
    _run().verdict([failed])
    out = capsys.readouterr().out
    assert "FAIL   a slingshot appears" in out and "why: validation accuracy peaked at 0.62" in out
    assert "inconclusive" not in out


def test_an_inconclusive_check_cannot_pass_and_must_say_why():
    with pytest.raises(ValueError, match="cannot pass"):
        claim("a", True, 1, 1, inconclusive=True, diagnosis="did not grok")
    with pytest.raises(ValueError, match="say why"):
        claim("a", False, 1, 1, inconclusive=True)


def test_a_check_id_is_a_lowercase_slug_and_ids_are_unique_within_a_verdict():
    import pytest

    from replicate.verdict import check_key, unique_ids
    assert claim("x", True, 1, 1, id="ce-factor").id == "ce-factor"
    for bad in ("CE-factor", "ce factor", "ce--factor", "-ce", ""):
        with pytest.raises(ValueError, match="lowercase words"):
            claim("x", True, 1, 1, id=bad)
    checks = [claim("x", True, 1, 1, id="a"), report("y", 1, 1, id="b")]
    assert unique_ids(checks) == ["a", "b"]
    with pytest.raises(ValueError, match="used twice: a"):
        unique_ids(checks + [report("z", 1, 1, id="a")])
    with pytest.raises(ValueError, match="'w' has no id"):
        unique_ids(checks + [report("w", 1, 1)])
    # A record from before ids is keyed by its name.
    assert check_key({"name": "old", "id": None}) == "old" and check_key(checks[0]) == "a"


def test_the_papers_numbers_are_read_from_the_chapter_with_a_band():
    import pytest

    from replicate.config import ConfigError, PaperNumber
    bare = PaperNumber.read("mse-factor", {"value": 1.69, "where": "Table 1", "what": "speed-up"})
    assert bare.band == (1.69, 1.69)
    spread = PaperNumber.read("ce-factor", {"value": 7.56, "band": [6.74, 8.38], "where": "Table 1",
                                            "what": "speed-up"})
    assert spread.band == (6.74, 8.38)
    words = PaperNumber.read("shape", {"value": "a double descent", "where": "Fig. 2", "what": "x"})
    assert words.band is None
    with pytest.raises(ConfigError, match="band must be"):
        PaperNumber.read("x", {"value": 1, "band": [2, 1], "where": "a", "what": "b"})
    with pytest.raises(ConfigError, match="unknown: vaule"):
        PaperNumber.read("x", {"vaule": 1, "where": "a", "what": "b"})
