"""What validate compares: nbval the verdict's words (numbers masked), then every number of the
verdict within a stated tolerance."""
import copy
import json
import math
import re
from pathlib import Path

from nbval.plugin import get_sanitize_patterns

from replicate import config
from replicate.harness import cli, drift, seeds, validate
from replicate.config import RunSpec
from replicate.verdict import ChapterRun, claim, report

CHAPTER = "07_optimizers"


def verdict_text(capsys, checks) -> str:
    run = ChapterRun(RunSpec.make(CHAPTER, "smoke"))
    capsys.readouterr()
    run.verdict(checks)
    return capsys.readouterr().out


def sanitized(text: str) -> str:
    """As nbval does with `--nbval-sanitize-with`: each pattern in order."""
    for regex, replace in get_sanitize_patterns(validate.SANITIZE_FILE.read_text()):
        text = re.sub(regex, replace, text)
    return text


def test_verdicts_differing_only_in_numbers_read_the_same_to_nbval(capsys):
    a = verdict_text(capsys, [claim("loss falls below 0.01", True, 0.00912, "below 0.01"),
                              report("steps to the minimum", {"adam": 1234, "sgd": 3.1e-5}, "fast")])
    b = verdict_text(capsys, [claim("loss falls below 0.01", True, 0.00897, "below 0.01"),
                              report("steps to the minimum", {"adam": 1301, "sgd": 2.87e-05}, "fast")])
    assert a != b and sanitized(a) == sanitized(b)
    assert "PASS" in sanitized(a) and "REPORT" in sanitized(a)


def test_a_pass_turning_into_a_fail_is_a_difference(capsys):
    a = verdict_text(capsys, [claim("converges", True, 0.009, 0.01), claim("other", True, 1, 1)])
    b = verdict_text(capsys, [claim("converges", False, 0.009, 0.01), claim("other", True, 1, 1)])
    assert sanitized(a) != sanitized(b)
    c = verdict_text(capsys, [claim("converges", True, 0.009, 0.01), report("other", 1, 1)])
    assert sanitized(a) != sanitized(c)  # a claim became a report


def test_a_longer_number_that_moves_a_line_break_is_not_a_difference(capsys):
    short = verdict_text(capsys, [report("a list", [0.1] * 30, "x")])
    long_ = verdict_text(capsys, [report("a list", [0.123] * 30, "x")])
    assert short.count("\n") != long_.count("\n") and sanitized(short) == sanitized(long_)


def test_a_list_of_items_that_grew_reads_the_same_to_nbval_and_drifts_only_by_its_count(capsys):
    pairs = ["adam@0.01", "adam@0.03", "momentum@0.001", "sgd@0.1"]
    a = verdict_text(capsys, [claim("some pair shows a double descent", True, pairs, "yes")])
    b = verdict_text(capsys, [claim("some pair shows a double descent", True,
                                    pairs + ["rmsprop@1"], "yes")])
    assert "4 items (listed in the table below)" in a and "adam@0.01" not in a
    assert sanitized(a) == sanitized(b)
    published = {"reproduced": True, "checks": [{"name": "dd", "kind": "claim", "passed": True,
                                                 "ours": {"pairs": pairs * 4}, "paper": "yes"}]}
    now = copy.deepcopy(published)
    now["checks"][0]["ours"]["pairs"] = pairs * 4 + ["rmsprop@1"]  # 16 -> 17 items, other names
    (difference,) = drift.compare(published, now)
    assert (difference.where, difference.published, difference.now) == ("ours.pairs (count)", 16, 17)
    assert not difference.within  # 6% > 5%: a chapter loosens it per check where it must
    assert drift.compare(published, now, drift.Tolerance(rel=0.1))[0].within
    # same count, other names: nothing the claim needs has changed
    now["checks"][0]["ours"]["pairs"] = [p + "x" for p in pairs * 4]
    assert drift.compare(published, now) == []
    # a list of numbers is still compared number by number
    assert config.counted([1.0, "x"]) == [1.0, "x"] and config.counted(["x"]) == (
        "1 item (listed in the table below)")


def record(**values):
    checks = [{"name": "loss", "kind": "claim", "passed": True, "ours": values.get("loss", 0.5),
               "paper": "below 1"},
              {"name": "steps", "kind": "report", "passed": None,
               "ours": {"adam": values.get("adam", 1000), "tiny": values.get("tiny", 0.0002)},
               "paper": [1, 2]}]
    return {"chapter": CHAPTER, "reproduced": True, "checks": checks}


def beyond(published, now, *tolerances):
    return [(d.check, d.where) for d in drift.compare(published, now, *tolerances) if not d.within]


def test_numbers_within_five_percent_or_a_thousandth_pass():
    published = record()
    assert drift.compare(published, copy.deepcopy(published)) == []
    # 4% relative, and a change of 0.0007 on a number near zero: both within tolerance
    near = record(loss=0.52, adam=1040, tiny=0.0009)
    assert beyond(published, near) == [] and len(drift.compare(published, near)) == 3
    assert beyond(published, record(loss=0.6)) == [("loss", "ours")]            # 20%: drift
    assert beyond(published, record(adam=1100)) == [("steps", "ours.adam")]     # 10%: drift
    assert beyond(published, record(tiny=0.0015)) == [("steps", "ours.tiny")]   # 0.0013 > 0.001


def test_words_must_match_exactly():
    published = record()
    flipped = copy.deepcopy(published)
    flipped["checks"][0]["passed"], flipped["reproduced"] = False, False
    assert beyond(published, flipped) == [("(verdict)", "reproduced"), ("loss", "passed")]
    renamed = copy.deepcopy(published)
    renamed["checks"][1]["name"] = "steps taken"
    assert {c for c, _ in beyond(published, renamed)} == {"steps", "steps taken"}
    kind = copy.deepcopy(published)
    kind["checks"][0]["kind"] = "report"
    assert beyond(published, kind) == [("loss", "kind")]


def test_a_chapter_can_loosen_its_tolerance_per_check(tmp_path, monkeypatch):
    folder = tmp_path / CHAPTER
    folder.mkdir()
    (folder / "chapter.yaml").write_text("title: t\nclaim: c\ntolerance:\n  rel: 0.02\n"
                                         "  checks:\n    steps: {rel: 0.5}\n")
    monkeypatch.setattr(config, "PRESETS_DIR", tmp_path)
    base, per_check = drift.chapter_tolerances(CHAPTER)
    assert (base.rel, base.abs, per_check["steps"].rel) == (0.02, drift.ABS, 0.5)
    published = record()
    assert beyond(published, record(loss=0.52, adam=1300), base, per_check) == [("loss", "ours")]
    assert drift.chapter_tolerances("no_such_chapter")[0] == drift.Tolerance()


def page(capsys, rec: dict) -> str:
    """A published notebook whose verdict cell shows what `ChapterRun.verdict` prints for `rec`."""
    checks = [claim(c["name"], c["passed"], c["ours"], c["paper"]) if c["kind"] == "claim"
              else report(c["name"], c["ours"], c["paper"]) for c in rec["checks"]]
    cell = {"cell_type": "code", "source": "# NBVAL_CHECK_OUTPUT\nrun.verdict(checks)",
            "outputs": [{"output_type": "stream", "name": "stdout",
                         "text": verdict_text(capsys, checks)}]}
    return json.dumps({"cells": [cell]})


def _validate(tmp_path, monkeypatch, capsys, published_page=None, now=None, nbval_code=0):
    """`validate` on one chapter with nbval's re-execution faked: it writes `now` as the new
    verdict and exits with `nbval_code`. Returns (exit code, stdout, stderr)."""
    claims, results = tmp_path / "claims", tmp_path / "results"
    claims.mkdir(), results.mkdir()
    (claims / f"{CHAPTER}.ipynb").write_text(published_page or page(capsys, record()))
    (results / f"{CHAPTER}.json").write_text(json.dumps(record()))

    def fake_nbval(cmd, env, cwd):
        assert "--nbval-sanitize-with" in cmd and Path(env["REPLICATE_CACHE_DIR"]).parent == \
            Path(env["REPLICATE_RESULTS_DIR"])  # an empty run cache inside the scratch folder
        Path(env["REPLICATE_RESULTS_DIR"], f"{CHAPTER}.json").write_text(
            json.dumps(now or record()))
        return type("Done", (), {"returncode": nbval_code})()

    monkeypatch.setattr(validate.subprocess, "run", fake_nbval)
    code = cli.main(["validate", CHAPTER, "--claims-dir", str(claims), "--results-dir", str(results)])
    return (code, *capsys.readouterr())


def test_validate_prints_the_drift_table_and_fails_beyond_tolerance(tmp_path, monkeypatch, capsys):
    code, out, err = _validate(tmp_path, monkeypatch, capsys, now=record(loss=0.51, adam=2000))
    assert code == 1 and "differ from the book" in err
    assert "DRIFT" in out and "ours.adam" in out and "ok" in out  # loss moved 2%: shown, not failed
    assert out.rstrip().endswith("1 value(s) beyond tolerance")


def test_a_chapter_as_published_says_so_on_its_last_line(tmp_path, monkeypatch, capsys):
    code, out, err = _validate(tmp_path, monkeypatch, capsys)
    assert code == 0 and out.rstrip().endswith(f"{CHAPTER}: every word and number as published")


def test_a_number_changed_by_half_on_the_published_page_is_a_drift_and_fails(
        tmp_path, monkeypatch, capsys):
    """nbval masks the page's numbers and the re-executed record matches the published one: only
    the page itself, read against its own results file, shows the edit."""
    edited = page(capsys, record()).replace("ours: 0.5", "ours: 0.75")
    assert edited != page(capsys, record())
    code, out, err = _validate(tmp_path, monkeypatch, capsys, published_page=edited)
    assert code == 1
    [row] = [line for line in out.splitlines() if line.lstrip().startswith("DRIFT")]
    assert "page vs its results file" in row and "0.5" in row and "0.75" in row


def test_when_nbval_finds_other_words_the_last_line_says_so_and_validate_fails(
        tmp_path, monkeypatch, capsys):
    code, out, err = _validate(tmp_path, monkeypatch, capsys, nbval_code=1)
    assert code == 1
    assert "every word and number as published" not in out
    assert out.rstrip().endswith("words differ from the book (nbval's report above)")


def test_the_page_check_renders_each_check_as_the_verdict_prints_it(capsys):
    """The page check's rendering against `ChapterRun.verdict` itself, for wrapped names, lists
    of items, mappings and diagnoses: a drift between the two would flag every page."""
    checks = [claim("a check whose name is long enough to wrap onto a second line of the "
                    "verdict's printed table, as some chapters' names do", False,
                    {"adam": 0.123456, "sgd": [1, 2.5]}, "at most 0.1"),
              claim("items", True, ["adam@0.01", "sgd@0.1", "rmsprop@1"], "some", id="items"),
              report("a report", 12345.678, None)]
    checks[0].diagnosis = "the optimiser never got below the paper's bound " * 3
    text = verdict_text(capsys, checks)
    from dataclasses import asdict
    for c in checks:
        assert drift.printed_check(asdict(c)) + "\n" in text


def test_a_fail_turning_inconclusive_is_a_difference_but_a_record_without_the_flag_is_not():
    fail = {"name": "t4 falls", "kind": "claim", "passed": False, "ours": 1, "paper": 1}
    old = {"reproduced": False, "checks": [fail]}
    same = {"reproduced": False, "checks": [{**fail, "inconclusive": False, "diagnosis": "x 0.5"}]}
    assert drift.compare(old, same) == []
    untested = {"reproduced": False, "checks": [{**fail, "inconclusive": True, "diagnosis": "x"}]}
    [difference] = drift.compare(old, untested)
    assert (difference.where, difference.within) == ("inconclusive", False)


def test_the_prediction_interval_matches_hand_computed_cases():
    # mean 0, sd sqrt(10/4) = 1.5811, t(0.975, 4) = 2.7764, sqrt(1 + 1/5) = 1.0954: +- 4.8089
    low, high = seeds.prediction_interval([-2.0, -1.0, 0.0, 1.0, 2.0])
    assert abs(low + 4.8089) < 1e-3 and abs(high - 4.8089) < 1e-3
    # every value positive: the same on the logarithms 0..4, then exponentiated
    low, high = seeds.prediction_interval([math.exp(k) for k in range(5)])
    assert abs(low - math.exp(2 - 4.8089)) < 1e-4 and abs(high / math.exp(2 + 4.8089) - 1) < 1e-4
    assert seeds.prediction_interval([1.0, 2.0, 3.0, 4.0]) is None  # four seeds: no interval
    # one more seed's value, not the mean: wider than the 95% interval of the mean
    values = [0.21, 0.212, 0.274, 0.28, 0.308]
    mean_low, mean_high = seeds.bootstrap_interval(values)
    low, high = seeds.prediction_interval(values)
    assert low < mean_low and high > mean_high


def test_the_seeds_spread_accepts_a_number_where_one_more_seed_would_fall_and_nothing_else():
    published = record(adam=1000)
    spread = {("steps", "ours.adam"): [700.0, 900.0, 1000.0, 1300.0, 1600.0]}  # about 270-3,600
    moved = record(adam=2500)  # 150% beyond 5%, inside the seeds' interval
    [difference] = drift.compare(published, moved, spread=spread)
    assert difference.within and difference.by_seeds
    assert "seeds" in drift.table(CHAPTER, [difference])
    assert drift.table(CHAPTER, [difference]).endswith("as published, within tolerance")
    assert beyond(published, record(adam=9000), None, None, spread) == [("steps", "ours.adam")]
    assert beyond(published, moved) == [("steps", "ours.adam")]  # without the spread: drift
    # the spread of another number does not reach this one
    assert beyond(published, record(loss=0.9), None, None, spread) == [("loss", "ours")]
    # the words are still compared exactly
    flipped = record(adam=2500)
    flipped["checks"][0]["passed"] = False
    assert ("loss", "passed") in beyond(published, flipped, None, None, spread)


def test_the_seeds_spread_is_read_by_the_paths_the_comparison_names(monkeypatch):
    ours = {"on": [13290, 1453], "ratio": 74.5, "pairs": ["a@1", "b@2"], "ok": True,
            "nested": {"0": [0.3, 4.8]}}
    assert drift.flat_numbers(ours, "ours") == {"ours.on[0]": 13290.0, "ours.on[1]": 1453.0,
                                                "ours.ratio": 74.5, "ours.nested.0[0]": 0.3,
                                                "ours.nested.0[1]": 4.8}
    runs = {s: {"record": {"checks": [{"name": "late", "ours": {"on": [100 * (s + 1), 5]}}]}}
            for s in range(5)}
    monkeypatch.setattr(drift, "collect_runs", lambda *args: (runs, [], None))
    spread = drift.seed_spread(CHAPTER)
    assert spread[("late", "ours.on[0]")] == [100.0, 200.0, 300.0, 400.0, 500.0]
    published = {"reproduced": True, "checks": [{"name": "late", "kind": "claim", "passed": True,
                                                 "ours": {"on": [100, 5]}, "paper": 1}]}
    now = copy.deepcopy(published)
    now["checks"][0]["ours"]["on"][0] = 450
    [difference] = drift.compare(published, now, spread=spread)
    assert difference.where == "ours.on[0]" and difference.by_seeds


def test_only_the_chapters_whose_runs_diverge_with_reduction_order_use_the_seeds_spread():
    assert all(map(drift.uses_seed_spread, ["01_delayed_robustness", "02_region_migration"]))
    assert not any(map(drift.uses_seed_spread, ["07_optimizers", "no_such_chapter"]))


# ------------------------------------------------------------------- checks keyed by their id


def with_ids(rec, **ids):
    """The record with an id on each check named in `ids` (name=id, spaces as underscores)."""
    rec = copy.deepcopy(rec)
    for check in rec["checks"]:
        check["id"] = ids.get(check["name"].replace(" ", "_"), check.get("id"))
    return rec


def test_checks_are_matched_by_id_so_a_renamed_check_is_a_changed_word_not_two_checks():
    published = with_ids(record(), loss="final-loss", steps="steps-to-minimum")
    renamed = copy.deepcopy(published)
    renamed["checks"][1]["name"] = "steps taken"
    [difference] = drift.compare(published, renamed)
    assert (difference.check, difference.where, difference.within) == ("steps", "name", False)
    assert (difference.published, difference.now) == ("steps", "steps taken")
    # the same name under another id is another check
    moved = with_ids(published, steps="steps-taken")
    assert {(d.where, d.published, d.now) for d in drift.compare(published, moved)} == {
        ("check", "present", "(absent)"), ("check", "(absent)", "present")}


def test_a_re_executed_record_without_ids_takes_the_published_ids_by_name():
    published = with_ids(record(), loss="final-loss", steps="steps-to-minimum")
    old_run = record(adam=1300)  # an old published notebook re-executed: no ids in its checks
    assert drift.compare(published, record()) == []  # not "absent" and "present"
    loose = {"steps-to-minimum": drift.Tolerance(rel=0.5)}
    assert beyond(published, old_run) == [("steps", "ours.adam")]
    assert beyond(published, old_run, None, loose) == []  # the id's tolerance reaches it
    # and the other way round: an old published verdict beside a new run with ids
    assert beyond(record(), with_ids(old_run, steps="steps-to-minimum"), None, loose) == []
    assert "id" not in old_run["checks"][0]  # the records themselves are left as they were


def test_a_tolerance_key_matches_a_checks_id_or_the_name_of_a_check_without_one():
    by_id = {"steps-to-minimum": drift.Tolerance(rel=0.5)}
    by_name = {"steps": drift.Tolerance(rel=0.5)}
    published = with_ids(record(), steps="steps-to-minimum")
    now = with_ids(record(adam=1300), steps="steps-to-minimum")
    assert beyond(published, now, None, by_id) == []
    assert beyond(record(), record(adam=1300), None, by_name) == []  # records before ids
    assert beyond(record(), record(adam=1300), None, by_id) == [("steps", "ours.adam")]


def test_chapter_tolerances_are_read_by_check_id(tmp_path, monkeypatch):
    folder = tmp_path / CHAPTER
    folder.mkdir()
    (folder / "chapter.yaml").write_text("title: t\nclaim: c\ntolerance:\n"
                                         "  checks:\n    steps-to-minimum: {rel: 0.5}\n")
    monkeypatch.setattr(config, "PRESETS_DIR", tmp_path)
    base, per_check = drift.chapter_tolerances(CHAPTER)
    published = with_ids(record(), steps="steps-to-minimum")
    assert beyond(published, record(adam=1300), base, per_check) == []


def test_the_seeds_spread_is_keyed_by_id_and_seeds_without_ids_take_it_by_name(monkeypatch):
    runs = {s: {"record": {"checks": [{"name": f"late at seed {s}" if s else "late",
                                       "id": "late-onset", "ours": {"on": [100 * (s + 1)]}}]}}
            for s in range(4)}
    runs[4] = {"record": {"checks": [{"name": "late", "ours": {"on": [500]}}]}}  # before ids
    monkeypatch.setattr(drift, "collect_runs", lambda *args: (runs, [], None))
    spread = drift.seed_spread(CHAPTER)
    assert spread == {("late-onset", "ours.on[0]"): [100.0, 200.0, 300.0, 400.0, 500.0]}
    published = {"reproduced": True, "checks": [{"name": "late", "id": "late-onset",
                                                 "kind": "claim", "passed": True,
                                                 "ours": {"on": [100]}, "paper": 1}]}
    now = copy.deepcopy(published)
    del now["checks"][0]["id"]  # re-executed from the old notebook
    now["checks"][0]["ours"]["on"][0] = 450
    [difference] = drift.compare(published, now, spread=spread)
    assert difference.check == "late" and difference.by_seeds


def test_validating_the_paper_preset_reads_the_paper_groups_seeds_from_results_paper(tmp_path, monkeypatch):
    from replicate.harness import validate as validation

    asked = []
    monkeypatch.setattr(validation, "uses_seed_spread", lambda chapter: True)
    monkeypatch.setattr(validation, "seed_spread",
                        lambda chapter, results, sweeps, preset: asked.append((results, sweeps, preset)) or {})
    book = tmp_path / "book"
    for folder in (book / "results" / "paper", tmp_path / "now"):
        folder.mkdir(parents=True)
        (folder / f"{CHAPTER}.json").write_text(json.dumps(record(dist=0.1)))
    assert validation.compare_chapter(CHAPTER, book / "results" / "paper", tmp_path / "now", "paper")
    assert validation.compare_chapter(CHAPTER, book / "results" / "paper", tmp_path / "now")
    assert asked == [(book / "results", book / "sweeps", "paper"),
                     (book / "results" / "paper", book / "results" / "sweeps", "cpu")]


def flipped(**values):
    now = record(**values)
    now["checks"][0]["passed"], now["reproduced"] = False, False
    return now


def test_a_word_its_seeds_read_both_ways_is_within_their_spread_and_a_robust_one_is_not():
    fragile, robust = {"loss": {"PASS", "FAIL"}}, {"loss": {"PASS"}}
    moved = drift.compare(record(), flipped(), words=fragile)
    assert {(d.where, d.within, d.by_seeds) for d in moved} == {
        ("passed", True, True), ("reproduced", True, True)}
    assert all(not d.within for d in drift.compare(record(), flipped(), words=robust))
    assert all(not d.within for d in drift.compare(record(), flipped()))


def test_validate_accepts_a_fragile_checks_flip_on_another_cpu_and_fails_a_robust_one(
        tmp_path, monkeypatch, capsys):
    """nbval sees the flipped word either way; only the seeds say whether it is a result."""
    for seeds_read, expected in (({"PASS", "FAIL"}, 0), ({"PASS"}, 1)):
        monkeypatch.setattr(validate, "seed_words", lambda *a, words=seeds_read: {"loss": words})
        folder = tmp_path / "".join(sorted(seeds_read))
        folder.mkdir()
        code, out, err = _validate(folder, monkeypatch, capsys, now=flipped(), nbval_code=1)
        assert code == expected, out
        last = out.rstrip().splitlines()[-1]
        assert ("within its seeds' spread (1 check word" in last) == (expected == 0), last
