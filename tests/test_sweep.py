"""Sweeps: the cross product and its validation, aggregation against hand-computed numbers, a
failing task that does not stop the others, and Ctrl-C leaving no kernel and no half-written run.

The Ray tests run the CLI in a subprocess (a local Ray with 2 slots) on chapter 07 at smoke.
"""
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replicate import config
from replicate.config import RunSpec
from replicate.harness import execute, lanes, ray_tasks, seeds, sweep
from replicate.runtime import PROJECT_ROOT


def cli(*args, timeout=300, env=None):
    env = dict(env or os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TQDM_DISABLE="1")
    return subprocess.run([sys.executable, "-m", "replicate", *args], capture_output=True, text=True,
                          cwd=PROJECT_ROOT, timeout=timeout, env=env)


# ---------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("text, seeds", [("0-4", [0, 1, 2, 3, 4]), ("0,3,7", [0, 3, 7]), ("2", [2]),
                                         ("5-6,1", [1, 5, 6]), ("1,1", [1])])
def test_parse_seeds(text, seeds):
    assert config.parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["a", "4-2", "1,,2", "-1"])
def test_parse_seeds_rejects_bad_input(text):
    with pytest.raises(config.ConfigError):
        config.parse_seeds(text)


def test_values_split_at_top_level_commas_only():
    assert config.split_values("1e-3,1e-2") == ["1e-3", "1e-2"]
    assert config.split_values("[1.0, 2.0],[3.0, 4.0, 5.0]") == ["[1.0, 2.0]", "[3.0, 4.0, 5.0]"]


def test_run_ids_are_deterministic_and_put_the_seed_first():
    run_id = lambda preset, o, **kw: RunSpec.make("07_optimizers", preset, o).run_id(**kw)  # noqa: E731
    assert run_id("cpu", {"seed": 1}) == "cpu-seed1"
    assert run_id("cpu", {"check_lr": 0.1, "seed": 1}) == "cpu-seed1-check_lr0.1"
    assert run_id("smoke", {"seed": 0, "rosenbrock_start": [1.0, -2.0]}) == "smoke-seed0-rosenbrock_start1.0_-2.0"
    assert run_id("cpu", {"check_lr": 0.1, "seed": 3}, with_seed=False) == "cpu-check_lr0.1"


@pytest.mark.parametrize("text, expected", [("0-100000000", "at most 1000 seeds"),
                                            ("4294967296", r"\[0, 2\*\*32 - 1\]")])
def test_seed_ranges_are_capped_before_anything_is_expanded(text, expected):
    with pytest.raises(config.ConfigError, match=expected):
        config.parse_seeds(text)


def test_workers_and_seeds_are_refused_at_once_from_the_command_line(tmp_path):
    # Was: ten minutes and 3.9 GB expanding a hundred million seeds before --workers was read.
    result = cli("sweep", "07_optimizers", "--seeds", "0-100000000", "--workers", "0",
                 "--sweeps-dir", str(tmp_path / "s"), "--results-dir", str(tmp_path / "r"), timeout=120)
    assert result.returncode == 2 and "--workers must be at least 1" in result.stderr
    result = cli("sweep", "07_optimizers", "--seeds", "0-100000000",
                 "--sweeps-dir", str(tmp_path / "s"), "--results-dir", str(tmp_path / "r"), timeout=120)
    assert result.returncode == 2 and "at most 1000 seeds" in result.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("address, expected", [("127.0.0.1:1", "nothing answers there"),
                                               ("garbage!!", "write auto, HOST:PORT")])
def test_a_bad_or_silent_address_gets_one_line(address, expected, tmp_path):
    # Was: 127.0.0.1:1 hung without end; garbage!! printed a 26-line traceback.
    result = cli("sweep", "07_optimizers", "--preset", "smoke", "--seeds", "0", "--address", address,
                 "--sweeps-dir", str(tmp_path / "s"), "--results-dir", str(tmp_path / "r"), timeout=120)
    assert result.returncode == 2 and expected in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_local_ray_that_fails_to_start_is_retried_once_then_named_in_one_line():
    attempts = []

    def fails(slots):
        attempts.append(slots)
        raise TimeoutError("The current node timed out during startup\nmore lines")

    with pytest.raises(config.ConfigError) as caught:
        ray_tasks.start_ray(None, 2, start_local=fails)
    assert attempts == [2, 2]
    message = str(caught.value)
    assert "did not start, twice" in message and "timed out during startup" in message
    assert "/tmp/ray/session_latest/logs" in message and "\n" not in message


def test_a_seed_outside_the_range_is_refused_before_any_kernel_or_retry(tmp_path):
    result = cli("run", "07_optimizers", "--preset", "smoke", "-p", "seed", "-1",
                 "--claims-dir", str(tmp_path / "out"))
    assert result.returncode == 2 and "'seed' must lie in" in result.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------- the cross product


def test_cross_product_is_chapter_x_values_x_seeds():
    tasks = sweep.cross_product(["07_optimizers", "03_centroid_ntk"], [0, 1, 2], "smoke")
    assert len(tasks) == 6 and {t.chapter for t in tasks} == {"07_optimizers", "03_centroid_ntk"}
    assert sorted(t.run_id() for t in tasks if t.chapter == "03_centroid_ntk") == \
        ["smoke-seed0", "smoke-seed1", "smoke-seed2"]
    tasks = sweep.cross_product(["07_optimizers"], [0, 1, 2], "smoke",
                                {"check_lr": [0.01, 0.1], "iterations": [100, 150]})
    assert len(tasks) == 12 and len({t.run_id() for t in tasks}) == 12
    # 0.01 is the smoke preset's own value: not an override, not in the run id
    assert {t.overrides.get("check_lr") for t in tasks} == {None, 0.1}
    assert "smoke-seed2-check_lr0.1-iterations150" in {t.run_id() for t in tasks}
    assert "smoke-seed2-iterations150" in {t.run_id() for t in tasks}
    assert {t.seed for t in tasks} == {0, 1, 2}
    assert all(isinstance(t.params["iterations"], int) for t in tasks)


@pytest.mark.parametrize("chapters, seeds, preset, params, expected", [
    (["no_such_chapter"], [0], "smoke", {}, "valid chapters"),
    (["07_optimizers"], [0], "nope", {}, "valid presets"),
    (["07_optimizers"], [0], "smoke", {"no_such": [1]}, "valid parameters"),
    (["07_optimizers"], [0], "smoke", {"iterations": [100, "lots"]}, "must be of type int"),
    (["07_optimizers"], [0], "smoke", {"iterations": [100, -3]}, "must be positive"),
    (["07_optimizers"], [0], "smoke", {"seed": [1]}, "--seeds"),
    (["07_optimizers"], [], "smoke", {}, "no seeds"),
    (["07_optimizers"], [0], "smoke", {"iterations": [100, 100]}, "same run twice"),
    # a parameter one of the chapters lacks
    (["07_optimizers", "03_centroid_ntk"], [0], "smoke", {"iterations": [100]}, "03_centroid_ntk"),
])
def test_cross_product_validates_everything_first(chapters, seeds, preset, params, expected):
    with pytest.raises(config.ConfigError, match=expected):
        sweep.cross_product(chapters, seeds, preset, params)


def test_bad_sweep_fails_before_anything_starts(tmp_path):
    result = cli("sweep", "07_optimizers", "--preset", "smoke", "-p", "iterations", "100,-1",
                 "--sweeps-dir", str(tmp_path / "sweeps"), "--results-dir", str(tmp_path / "results"))
    assert result.returncode == 2 and "must be positive" in result.stderr
    assert not (tmp_path / "sweeps").exists() and not (tmp_path / "results").exists()


def test_sweep_needs_mnist_before_anything_starts(tmp_path):
    env = dict(os.environ, REPLICATE_DATA_DIR=str(tmp_path))
    result = cli("sweep", "03_centroid_ntk", "--preset", "smoke", "--sweeps-dir", str(tmp_path / "s"),
                 env=env)
    assert result.returncode == 2 and "needs MNIST" in result.stderr
    assert not (tmp_path / "s").exists()


# ------------------------------------------------------------------------------ aggregation


def record(seed, passes, value, extra=None, preset="cpu", overrides=None, params=None, reproduced=None):
    checks = [{"name": "a", "kind": "claim", "passed": passes[0], "ours": value, "paper": "x"},
              {"name": "b", "kind": "claim", "passed": passes[1], "ours": {"low": value * 2, "tag": "t"},
               "paper": "x"},
              {"name": "r", "kind": "report", "passed": None, "ours": [1, 2], "paper": "x"}]
    if extra:
        checks.append({"name": extra, "kind": "claim", "passed": True, "ours": "s", "paper": "x"})
    overrides = {"seed": seed} if overrides is None and seed else (overrides or {})
    return {"chapter": "07_optimizers", "preset": preset, "overrides": overrides, "seed": seed, "checks": checks,
            "reproduced": all(passes) if reproduced is None else reproduced, "duration_s": 10.0 + seed,
            "params": params or {"seed": seed}}


def test_aggregation_numbers_against_a_hand_made_example():
    # Values 1, 2, 4: mean 7/3; sample variance ((4/3)^2 + (1/3)^2 + (5/3)^2) / 2 = 7/3; three
    # seeds are too few for an interval (the Student-t one, [-1.46, 6.13], left the range [1, 4]).
    records = {0: record(0, [True, True], 1.0), 1: record(1, [True, False], 2.0),
               2: record(2, [False, True], 4.0, extra="at step 1234")}
    agg = seeds.aggregate_records(records)
    assert agg["seeds"] == [0, 1, 2] and agg["n"] == 3
    # 1 of 3: the lower end solves 1 - (1 - p)**3 = 0.025; the upper end mirrors 2 of 3's lower end
    assert agg["reproduced"] == {"k": 1, "n": 3, "ci95": [round(1 - 0.975 ** (1 / 3), 4), 0.9057]}
    a = next(c for c in agg["checks"] if c["name"] == "a")
    assert (a["k"], a["n"], a["per_seed"]) == (2, 3, {"0": True, "1": True, "2": False})
    r = next(c for c in agg["checks"] if c["name"] == "r")
    assert r["kind"] == "report" and r["k"] is None
    value = next(v for v in agg["values"] if v["check"] == "a")
    assert value["key"] is None and value["n"] == 3
    assert value["mean"] == pytest.approx(7 / 3, rel=1e-5)
    assert value["sd"] == pytest.approx(math.sqrt(7 / 3), rel=1e-5)
    assert value["ci95"] is None
    assert value["per_seed"] == {"0": 1.0, "1": 2.0, "2": 4.0}
    assert value["median"] == 2.0 and value["range"] == [1.0, 4.0]
    # dict-valued ours: one entry per numeric key; lists and strings are skipped
    keyed = [v for v in agg["values"] if v["check"] == "b"]
    assert [v["key"] for v in keyed] == ["low"] and keyed[0]["mean"] == pytest.approx(14 / 3, rel=1e-5)
    assert not [v for v in agg["values"] if v["check"] in ("r", "at step 1234")]
    # a check only one seed has is reported, and counts as not passing in the others
    assert agg["unmatched"] == [{"id": None, "name": "at step 1234", "seeds": [2]}]
    odd = next(c for c in agg["checks"] if c["name"] == "at step 1234")
    assert (odd["k"], odd["n"]) == (1, 3)
    assert agg["robust"] is False  # 2/3 < 80%
    assert agg["interval"].startswith("95% bootstrap percentile interval")


def test_seeds_match_a_check_by_its_id_even_where_its_name_quotes_the_seeds_own_numbers():
    records = {s: record(s, [True, s != 1], 1.0 + s) for s in range(3)}
    for s, rec in records.items():
        rec["checks"][0].update(id="reaches-it")
        rec["checks"][1].update(id="stays-low", name=f"stays below {10 + s} at the end")
    agg = seeds.aggregate_records(records)
    assert agg["unmatched"] == []
    low = next(c for c in agg["checks"] if c["id"] == "stays-low")
    assert (low["k"], low["n"], low["name"]) == (2, 3, "stays below 10 at the end")
    [value] = [v for v in agg["values"] if v["id"] == "stays-low"]
    assert value["per_seed"] == {"0": 2.0, "1": 4.0, "2": 6.0}
    assert value["check"] == "stays below 10 at the end"
    assert next(c for c in agg["checks"] if c["name"] == "r")["id"] is None  # no id: its name


def test_a_seed_written_before_ids_joins_the_same_check_of_the_seeds_that_have_them():
    records = {s: record(s, [True, True], 1.0 + s) for s in range(3)}
    for s in (1, 2):
        records[s]["checks"][0]["id"] = "reaches-it"
    agg = seeds.aggregate_records(records)
    a = next(c for c in agg["checks"] if c["name"] == "a")
    assert a["id"] == "reaches-it" and a["per_seed"] == {"0": True, "1": True, "2": True}
    assert agg["unmatched"] == [] and len(agg["checks"]) == 3
    assert "id" not in records[0]["checks"][0]  # the records themselves are left as they were


def test_the_bootstrap_interval_matches_the_exact_bootstrap_distribution_and_stays_in_range():
    import itertools

    import numpy as np
    # Five skewed seeds (a count with one outlier): every one of the 5^5 resamples is equally
    # likely, so the exact percentile interval of the resampled mean is computable by hand.
    values = [0.0, 0.0, 1.0, 2.0, 8.0]
    means = np.array([np.mean(r) for r in itertools.product(values, repeat=5)])
    exact = np.quantile(means, [0.025, 0.975])
    got = seeds.bootstrap_interval(values)
    assert got == pytest.approx(exact, abs=0.15)  # 10,000 draws against the exact 3,125
    assert seeds.bootstrap_interval(values) == got  # seeded: the same on every aggregation
    summary = seeds.summarise(values)
    low, high = summary["ci95"]
    assert summary["range"][0] <= low <= summary["mean"] <= high <= summary["range"][1]
    # the Student-t interval of the same values, 2.2 -/+ 4.2, would reach below zero
    assert seeds.summarise([3.0] * 6)["ci95"] == [3.0, 3.0]
    assert seeds.summarise(values[:4])["ci95"] is None and seeds.summarise(values[:4])["sd"]


def test_an_inconclusive_seed_counts_as_not_passing_and_its_diagnosis_is_kept():
    runs = {s: record(s, [True, True], 1.0 + s) for s in range(5)}
    for s, why in ((1, "did not grok within 6,000 steps"), (3, "val accuracy peaked at 0.6")):
        runs[s]["checks"][0].update(passed=False, diagnosis=why, inconclusive=s == 1)
        runs[s]["reproduced"] = False
    agg = seeds.aggregate_records(runs)
    a = next(c for c in agg["checks"] if c["name"] == "a")
    assert (a["k"], a["n"]) == (3, 5) and a["inconclusive_seeds"] == [1]
    assert a["diagnoses"] == {"1": "did not grok within 6,000 steps",
                              "3": "val accuracy peaked at 0.6"}
    assert agg["inconclusive_seeds"] == [1] and agg["reproduced"]["k"] == 3
    assert agg["robust"] is False  # 3/5 < 80%: INCONCLUSIVE never excuses a seed
    text = seeds.describe({**agg, "chapter": "07_optimizers", "preset": "cpu", "failed": []})
    assert "(3/5; inconclusive in seeds [1])" in text and "seed 3: val accuracy peaked" in text


def test_robust_means_every_claim_check_in_at_least_80_percent_of_seeds():
    four_of_five = {s: record(s, [s != 3, True], 1.0 + s) for s in range(5)}
    assert seeds.aggregate_records(four_of_five)["robust"] is True
    three_of_five = {s: record(s, [s not in (3, 4), True], 1.0 + s) for s in range(5)}
    assert seeds.aggregate_records(three_of_five)["robust"] is False
    assert seeds.aggregate_records({0: record(0, [True, True], 1.0)})["robust"] is None


def test_aggregate_collects_the_published_run_and_the_matching_sweep_runs(tmp_path):
    cpu = RunSpec.make("07_optimizers", "cpu").params
    results, sweeps = tmp_path / "results", tmp_path / "sweeps"

    def put(path, rec):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec))

    put(results / "07_optimizers.json", record(0, [True, True], 1.0, params=cpu))
    put(sweeps / "07_optimizers" / "cpu-seed1" / "07_optimizers.json",
        record(1, [True, True], 2.0, params={**cpu, "seed": 1}))
    put(sweeps / "07_optimizers" / "cpu-seed2" / "07_optimizers.json",
        record(2, [True, False], 4.0, params={**cpu, "seed": 2}))
    # other parameters, another preset, a half-written folder: none of them enter
    put(sweeps / "07_optimizers" / "cpu-seed3-iterations10" / "07_optimizers.json",
        record(3, [False, False], 9.0, overrides={"seed": 3, "iterations": 10},
               params={**cpu, "seed": 3, "iterations": 10}))
    put(sweeps / "07_optimizers" / "smoke-seed4" / "07_optimizers.json",
        record(4, [False, False], 9.0, preset="smoke",
               params={**RunSpec.make("07_optimizers", "smoke").params, "seed": 4}))
    put(sweeps / "07_optimizers" / ".cpu-seed5.incoming-abc" / "07_optimizers.json",
        record(5, [False, False], 9.0, params={**cpu, "seed": 5}))
    put(sweeps / "07_optimizers" / "cpu-seed6.failed.json",
        {"chapter": "07_optimizers", "preset": "cpu", "overrides": {"seed": 6}, "seed": 6,
         "error": "07_optimizers failed in code cell 5"})
    agg = seeds.aggregate("07_optimizers", "cpu", results_dir=results, sweeps_dir=sweeps)
    assert agg["seeds"] == [0, 1, 2] and agg["n"] == 3 and agg["overrides"] == {}
    assert [r["seed"] for r in agg["runs"]] == [0, 1, 2]
    assert agg["runs"][0]["source"].endswith("results/07_optimizers.json")
    assert agg["published"]["included"] is True and agg["published"]["seed"] == 0
    assert agg["failed"] == [{"seed": 6, "overrides": {"seed": 6},
                              "error": "07_optimizers failed in code cell 5"}]
    # a sweep's own run of seed 0 replaces the published one: counted once
    put(sweeps / "07_optimizers" / "cpu-seed0" / "07_optimizers.json",
        record(0, [False, True], 3.0, preset="cpu", params=cpu))
    agg = seeds.aggregate("07_optimizers", "cpu", results_dir=results, sweeps_dir=sweeps)
    assert agg["n"] == 3 and "sweeps" in agg["runs"][0]["source"]
    assert agg["published"]["included"] is False and "replaced" in agg["published"]["why"]
    assert next(v for v in agg["values"] if v["check"] == "a")["per_seed"]["0"] == 3.0
    # the other parameter value is its own group
    other = seeds.aggregate("07_optimizers", "cpu", {"iterations": 10}, results, sweeps)
    assert other["seeds"] == [3] and other["overrides"] == {"iterations": 10}
    assert other["published"]["included"] is False  # said, not dropped silently
    path = seeds.write_seeds("07_optimizers", "cpu", results_dir=results, sweeps_dir=sweeps)
    assert path == results / "07_optimizers.seeds.json"
    assert seeds.load_seeds("07_optimizers", results)["n"] == 3
    assert seeds.load_seeds("03_centroid_ntk", results) is None


def test_the_paper_presets_published_run_and_seeds_file_live_in_results_paper(tmp_path):
    paper = RunSpec.make("07_optimizers", "paper").params
    results, sweeps = tmp_path / "results", tmp_path / "sweeps"
    for path, rec in [(results / "07_optimizers.json", record(0, [True, True], 1.0)),
                      (results / "paper" / "07_optimizers.json",
                       record(0, [False, True], 5.0, preset="paper", params=paper)),
                      (sweeps / "07_optimizers" / "paper-seed1" / "07_optimizers.json",
                       record(1, [True, True], 7.0, preset="paper", params={**paper, "seed": 1}))]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec))
    agg = seeds.aggregate("07_optimizers", "paper", results_dir=results, sweeps_dir=sweeps)
    assert agg["seeds"] == [0, 1] and agg["published"]["included"] is True
    assert agg["runs"][0]["source"].endswith("results/paper/07_optimizers.json")
    assert seeds.write_seeds("07_optimizers", "paper", results_dir=results, sweeps_dir=sweeps) == \
        results / "paper" / "07_optimizers.seeds.json"
    assert not (results / "07_optimizers.seeds.json").exists()  # the book's own is not touched
    assert seeds.published_dir("smoke", results) is None
    assert seeds.seeds_path("07_optimizers", "smoke", {}, results, sweeps) == \
        sweeps / "07_optimizers" / "smoke.seeds.json"


def test_a_paper_group_at_its_declared_reduced_size_is_published_beside_its_paper_run(tmp_path):
    # Chapter 05 publishes its paper verdict at p = 47 (its chapter.yaml's `paper_reduced`): the
    # seeds file of that group joins it in results/paper, where the page and the scoreboard read
    # it; any other -p value is a sweep of its own and stays in the sweeps folder.
    results, sweeps = tmp_path / "results", tmp_path / "sweeps"
    chapter = "05_slingshot_hessian"
    assert seeds.seeds_path(chapter, "paper", {"p": 47}, results, sweeps) == \
        results / "paper" / f"{chapter}.seeds.json"
    assert seeds.seeds_path(chapter, "paper", {"p": 23}, results, sweeps).parent == sweeps / chapter
    assert seeds.seeds_path(chapter, "cpu", {"p": 47}, results, sweeps).parent == sweeps / chapter
    assert seeds.seeds_path(chapter, "paper", {}, results, sweeps) == \
        results / "paper" / f"{chapter}.seeds.json"


# ------------------------------------------------------------------------------- with Ray


BREAK_ONE_VALUE = """
# Loaded at start-up by every Python process of the test's sweep; in the kernels (only there: Ray's
# own processes must start as fast as ever) the chapter's log-scale transform fails for one offset,
# a value that passes every check made before the run.
import os, sys
if os.environ.get("REPLICATE_TEST_BREAK") and "ipykernel" in " ".join(sys.orig_argv):
    from replicate.measures import objectives
    _log_scale = objectives.log_scale
    def log_scale(g, c):
        if c == float(os.environ["REPLICATE_TEST_BREAK"]):
            raise ValueError(f"deliberate failure for log offset {c:g}")
        return _log_scale(g, c)
    objectives.log_scale = log_scale
"""


def test_a_failing_task_is_retried_reported_and_does_not_stop_the_others(tmp_path):
    sweeps, results = tmp_path / "sweeps", tmp_path / "results"
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(BREAK_ONE_VALUE)
    env = dict(os.environ, REPLICATE_TEST_BREAK="2e-08",
               PYTHONPATH=os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])))
    result = cli("sweep", "07_optimizers", "--seeds", "0", "--preset", "smoke", "--workers", "2",
                 "-p", "log_offset", "1e-8,2e-8",
                 "--sweeps-dir", str(sweeps), "--results-dir", str(results), env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    bad = "smoke-seed0-log_offset2e-08"
    assert f"{bad} failed after 2 attempts" in result.stderr, result.stderr
    assert "failed in code cell" in result.stderr and "deliberate failure" in result.stderr
    folder = sweeps / "07_optimizers"
    good = folder / "smoke-seed0"  # the preset's own offset: no override in the id
    assert (good / "07_optimizers.ipynb").exists() and (good / "07_optimizers.json").exists()
    task = json.loads((good / "task.json").read_text())
    assert task["threads"] == 1  # cli() sets OMP_NUM_THREADS=1, which a local sweep honours
    assert not (folder / bad).exists() and (folder / f"{bad}.failed.json").exists()
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]
    # Was: a smoke sweep overwrote the book's across-seed verdict, results/07_optimizers.seeds.json.
    assert not (results / "07_optimizers.seeds.json").exists()
    own = json.loads((folder / "smoke.seeds.json").read_text())
    assert own["preset"] == "smoke" and own["seeds"] == [0]
    grouped = json.loads((folder / "smoke-log_offset2e-08.seeds.json").read_text())
    assert grouped["n"] == 0 and grouped["failed"][0]["seed"] == 0


def _marked(sweep_id):
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"{ray_tasks.MARKER}={sweep_id}".encode() in \
                    (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def test_ctrl_c_cancels_cleanly(tmp_path):
    sweeps = tmp_path / "sweeps"
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TQDM_DISABLE="1")
    staging_before = set(execute.STAGING_DIR.glob("07_optimizers-*"))
    proc = subprocess.Popen([sys.executable, "-m", "replicate", "sweep", "07_optimizers", "--seeds", "0-3",
                             "--preset", "smoke", "-p", "iterations", "2000000", "--workers", "2",
                             "--sweeps-dir", str(sweeps), "--results-dir", str(tmp_path / "results")],
                            cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    folder = sweeps / "07_optimizers"
    try:
        sweep_id, deadline = None, time.time() + 120
        while time.time() < deadline and not (sweep_id and _marked(sweep_id)):
            incoming = list(folder.glob(".*.incoming-*")) if folder.exists() else []
            sweep_id = incoming[0].name.rsplit("-", 1)[1] if incoming else None
            time.sleep(0.2)
        assert sweep_id and _marked(sweep_id), "no task's kernel started within 2 minutes"
        time.sleep(1.0)  # the kernel is executing cells
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert "interrupted" in err
    time.sleep(0.5)
    assert _marked(sweep_id) == [], "a kernel of the cancelled sweep is still running"
    assert list(folder.iterdir()) == [], "the cancelled sweep left a (half-written) run folder"
    # Was: .cache/staging/07_optimizers-<host>-<worker pid>-* folders with kernel connection files.
    assert set(execute.STAGING_DIR.glob("07_optimizers-*")) <= staging_before


def test_the_local_ray_has_the_slots_asked_for_no_web_dashboard_and_leaves_nothing_running():
    # The sweep's own local Ray, started with ray.init's public arguments: the slots it was asked
    # for, Ray's API server (which ray.init always starts) without its web front end, and nothing
    # of it left running after the stop.
    script = """
import json, os, subprocess
import ray
from replicate.harness import ray_tasks
stop = ray_tasks.start_local_ray(1)
cpus = ray.cluster_resources().get("CPU")
ps = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(os.getpid())], capture_output=True,
                    text=True).stdout.splitlines()
stop()
alive = []
for line in ps:
    pid = int(line.split()[0])
    try:
        os.kill(pid, 0)
        state = open(f"/proc/{pid}/stat").read().split()[2]
        if state != "Z":
            alive.append(line)
    except OSError:
        pass
print(json.dumps({"cpus": cpus, "children": ps, "alive": alive}))
"""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=PROJECT_ROOT, timeout=180, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads(result.stdout.strip().splitlines()[-1])
    assert record["cpus"] == 1
    children = " ".join(record["children"])
    assert "raylet" in children and "gcs_server" in children  # the check sees Ray's processes
    dashboards = [line for line in record["children"] if "dashboard/dashboard.py" in line]
    assert all("--disable-frontend" in line for line in dashboards), dashboards
    assert record["alive"] == [], record["alive"]


PRIVATE_RAY = re.compile(r"\bray\._private\b|from\s+ray\s+import\s+_private|\bray\._raylet\b")


def test_no_harness_module_uses_rays_private_api():
    # Ray's private modules change without notice from one release to the next.
    harness = Path(sweep.__file__).parent
    users = [p.name for p in sorted(harness.glob("*.py")) if PRIVATE_RAY.search(p.read_text())]
    assert users == []


def test_the_check_for_rays_private_api_finds_an_import():
    assert PRIVATE_RAY.search("from ray._private.node import Node\n")
    assert PRIVATE_RAY.search("from ray import _private\n")
    assert not PRIVATE_RAY.search("import ray\nray.init(num_cpus=2)\n")


def test_summarise_median_and_range_for_even_and_single_counts():
    assert seeds.summarise([4.0, 1.0, 3.0, 2.0])["median"] == 2.5
    one = seeds.summarise([1.69])
    assert (one["median"], one["range"], one["sd"]) == (1.69, [1.69, 1.69], None)
    assert seeds.summarise([])["median"] is None


def test_the_pass_rate_interval_is_exact_and_matches_hand_computed_cases():
    from replicate.harness.seeds import clopper_pearson

    # All passes or none: the interval's far end solves p**n = 0.025 (or (1 - p)**n = 0.025).
    assert clopper_pearson(3, 3) == [round(0.025 ** (1 / 3), 4), 1.0]  # 0.2924: "29%"
    assert clopper_pearson(5, 5)[0] == round(0.025 ** (1 / 5), 4)      # 0.4782
    assert clopper_pearson(0, 5) == [0.0, round(1 - 0.025 ** (1 / 5), 4)]
    # 1 of 2: the lower end solves 1 - (1 - p)**2 = 0.025, the upper end p**2 = 0.975
    assert clopper_pearson(1, 2) == [round(1 - 0.975 ** 0.5, 4), round(0.975 ** 0.5, 4)]
    # 5 of 10, the textbook table: 0.1871 to 0.8129
    assert clopper_pearson(5, 10) == [0.1871, 0.8129]
    assert clopper_pearson(0, 0) is None


def test_seeds_file_gives_each_claim_check_and_the_whole_claim_its_pass_rate_interval():
    from replicate.harness import book_pages
    from replicate.harness.seeds import aggregate_records

    def record(passed):
        return {"checks": [{"name": "a", "kind": "claim", "passed": passed, "ours": 1.0},
                           {"name": "r", "kind": "report", "passed": None, "ours": 2.0}]}
    body = aggregate_records({0: record(True), 1: record(True), 2: record(False)})
    claim, report = body["checks"]
    assert claim["k"] == 2 and claim["pass_rate_ci95"] == [0.0943, 0.9916]
    assert report["pass_rate_ci95"] is None
    assert body["reproduced"] == {"k": 2, "n": 3, "ci95": [0.0943, 0.9916]}
    summary = book_pages.seeds_summary(body)
    assert summary == "not robust: 2/3 seeds reproduce the whole claim (pass rate 9–99%)"


# ----------------------------------------------------------------- several chapters in lanes


def test_chapters_run_longest_first_by_their_cold_time_and_a_chain_by_its_sum(tmp_path, monkeypatch):
    # Chapter A was last published from the run cache (5 s) but takes 500 s cold; B took 300 s
    # cold when published; C was never published and has no measured time; D (100 s) follows E
    # (250 s), so E goes ahead of B: the lane that runs E runs D next, 350 s in all.
    meta = {"A": {"cpu_cold_s": 500}, "B": {}, "C": {}, "D": {"runs_after": "E", "cpu_cold_s": 100},
            "E": {"cpu_cold_s": 250}}
    monkeypatch.setattr(lanes, "get_chapter", lambda name: config.Chapter(name, name, "", (),
                                                                          meta[name]))
    for name, seconds in [("A", 5.0), ("B", 300.0)]:
        (tmp_path / f"{name}.json").write_text(json.dumps({"duration_s": seconds}))
    specs = [RunSpec(c, "smoke") for c in "ABCDE"]
    assert lanes.cold_seconds("A", tmp_path) == 500 and lanes.cold_seconds("B", tmp_path) == 300
    order = [s.chapter for s in lanes.longest_first(specs, tmp_path)]
    assert order == ["C", "A", "E", "B", "D"]


def test_every_chapter_has_a_measured_cold_time():
    assert all(config.get_chapter(c).get("cpu_cold_s") for c in config.chapters())


def test_a_chapter_that_reuses_anothers_runs_starts_only_once_that_one_has_finished():
    first, second, other = (RunSpec.make(c, "smoke") for c in
                            ("01_delayed_robustness", "02_region_migration", "07_optimizers"))
    assert config.get_chapter("02_region_migration").get("runs_after") == first.chapter
    # 02 is first in the queue but waits while 01 is queued or running; 07 goes ahead
    assert lanes.next_ready([second, first, other], []) == 1
    assert lanes.next_ready([second, other], [first]) == 1
    assert lanes.next_ready([second], [first]) is None  # a free lane stays free
    assert lanes.next_ready([second, other], [other]) == 0  # 01 has finished
    # run without 01 (not in this batch): nothing to wait for
    assert lanes.next_ready([second], []) == 0


def test_without_ray_the_chapters_still_run_one_after_another(tmp_path, monkeypatch, capsys):
    from replicate.harness import cli as command_line

    def no_ray(jobs, lanes, address=None):
        raise config.ConfigError("the local Ray did not start, twice (no room)")
    ran = []
    monkeypatch.setattr(lanes, "run_in_lanes", no_ray)
    monkeypatch.setattr(command_line.ex, "execute",
                        lambda spec, claims, results: ran.append(spec.chapter) or (True, "ok"))
    code = command_line.main(["run", "07_optimizers", "09_progress_measures", "--preset", "smoke",
                              "--claims-dir", str(tmp_path), "--lanes", "2"])
    err = capsys.readouterr().err
    assert code == 0 and sorted(ran) == ["07_optimizers", "09_progress_measures"]
    assert "did not start" in err and "one after another instead" in err


def test_lanes_below_one_are_refused_before_anything_runs(tmp_path):
    result = cli("run", "07_optimizers", "--preset", "smoke", "--lanes", "0",
                 "--claims-dir", str(tmp_path))
    assert result.returncode == 2 and "--lanes must be at least 1" in result.stderr
    assert not list(tmp_path.iterdir())


def test_two_chapters_run_in_two_lanes_and_each_publishes_its_pair(tmp_path):
    result = cli("run", "07_optimizers", "09_progress_measures", "--preset", "smoke",
                 "--lanes", "2", "--claims-dir", str(tmp_path),
                 env=dict(os.environ, REPLICATE_CACHE_DIR=str(tmp_path / "cache")))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "in 2 lanes of one thread each" in result.stdout
    assert "[1/2]" in result.stdout + result.stderr and "[2/2]" in result.stdout + result.stderr
    for chapter in ("07_optimizers", "09_progress_measures"):
        record = json.loads((tmp_path / f"{chapter}.json").read_text())
        assert record["preset"] == "smoke" and (tmp_path / f"{chapter}.ipynb").exists()
        assert record["device"] == "cpu (1 thread)"  # each lane on one thread


def test_run_with_an_address_runs_the_lanes_on_that_cluster_and_publishes_each_pair(tmp_path):
    # A Ray head started here stands for the cluster; its processes carry a marker of their own,
    # so that the test stops them, and only them, whatever Ray other work has running.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    marker = f"cluster-test-{os.getpid()}"
    # Ray authenticates with a token (by default from 2.59 on): the cluster's own, handed to
    # whoever joins it, as an operator would (RAY_AUTH_TOKEN, Ray's documented variable).
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": os.urandom(16).hex()}
    env = dict(os.environ, **auth, **{ray_tasks.MARKER: marker, "RAY_USAGE_STATS_ENABLED": "0"})
    ray = str(Path(sys.executable).with_name("ray"))
    started = subprocess.run([ray, "start", "--head", "--node-ip-address", "127.0.0.1",
                              "--port", str(port), "--num-cpus", "2", "--include-dashboard",
                              "false", "--disable-usage-stats"],
                             capture_output=True, text=True, timeout=180, env=env)
    try:
        assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
        result = cli("run", "07_optimizers", "03_centroid_ntk", "--preset", "smoke",
                     "--address", f"127.0.0.1:{port}", "--claims-dir", str(tmp_path),
                     env=dict(os.environ, **auth, REPLICATE_CACHE_DIR=str(tmp_path / "cache")))
    finally:
        ray_tasks.kill_marked(marker)
        # `ray start` left its address for a later ray.init() without one to join (as
        # `ray stop`, which would stop every Ray here, would remove it)
        current = Path("/tmp/ray/ray_current_cluster")
        if current.exists() and current.read_text().strip().endswith(f":{port}"):
            current.unlink()
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"on the Ray cluster at 127.0.0.1:{port}" in result.stdout
    assert "in 2 lanes" in result.stdout and "[2/2]" in result.stdout + result.stderr
    for chapter in ("07_optimizers", "03_centroid_ntk"):
        record = json.loads((tmp_path / f"{chapter}.json").read_text())
        assert record["preset"] == "smoke" and (tmp_path / f"{chapter}.ipynb").exists()


def test_run_with_an_address_where_nothing_answers_gets_one_line_and_runs_nothing(tmp_path):
    result = cli("run", "07_optimizers", "--preset", "smoke", "--address", "127.0.0.1:1",
                 "--claims-dir", str(tmp_path))
    assert result.returncode == 2 and "nothing answers there" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


def test_seeds_that_change_nothing_count_as_one_run_not_as_robust():
    same = {s: record(s, [True, True], 1.0) for s in range(5)}
    for r in same.values():
        r["duration_s"] = 10.0
    agg = seeds.aggregate_records(same)
    assert agg["deterministic"] is True and agg["robust"] is None
    assert "deterministic" in seeds.describe({**agg, "chapter": "07_optimizers",
                                              "preset": "cpu", "failed": []})
    moved = {**same, 4: record(4, [True, True], 1.0 + 1e-6)}  # a number the seed reaches
    assert seeds.aggregate_records(moved)["deterministic"] is False
    assert seeds.aggregate_records(moved)["robust"] is True
    flipped = {**same, 4: record(4, [True, False], 1.0)}  # a verdict the seed reaches
    assert seeds.aggregate_records(flipped)["deterministic"] is False


def test_a_chapter_that_declares_the_seed_enters_nothing_is_deterministic_despite_drift():
    drifted = {s: record(s, [True, True], 1.0 + 1e-4 * (s == 0)) for s in range(5)}  # a machine
    assert seeds.aggregate_records(drifted)["deterministic"] is False
    assert seeds.aggregate_records(drifted, deterministic=True)["deterministic"] is True
    assert seeds.aggregate_records({0: drifted[0]}, deterministic=True)["deterministic"] is False


@pytest.mark.parametrize("value, threads", [("1", 1), ("3", 3), ("", None), ("0", None),
                                            ("two", None), (None, None)])
def test_omp_num_threads_sets_a_local_sweeps_threads_per_task(value, threads, monkeypatch):
    if value is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert sweep.asked_threads() == threads
