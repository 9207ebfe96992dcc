import math

import pytest

from replicate import training
from replicate.runtime import cache_dir
from replicate.training import (CACHE_STATS, DivergenceError, cached_run, config_key,
                                 log_spaced_steps, source_hash, train_loop)


def test_log_spaced_steps():
    steps = log_spaced_steps(40_000, 32)
    assert steps[0] == 0 and steps[1] == 1 and steps[-1] == 40_000
    assert steps == sorted(set(steps)) and 25 <= len(steps) <= 33
    ratios = [b / a for a, b in zip(steps[5:], steps[6:])]
    assert max(ratios) / min(ratios) < 1.5  # evenly spaced in log scale, away from the start
    with pytest.raises(ValueError):
        log_spaced_steps(0, 5)


def test_train_loop_evaluates_where_asked():
    seen = []
    history = train_loop(lambda t: 1.0 / t, 10, [0, 3, 10, 99], lambda t: seen.append(t) or {"t2": 2 * t})
    assert seen == [0, 3, 10]
    assert [h["step"] for h in history] == [0, 3, 10]
    assert history[1] == {"step": 3, "loss": pytest.approx(1 / 3), "t2": 6}


def test_train_loop_stops_on_nan_with_a_clear_message():
    with pytest.raises(DivergenceError, match="became nan at step 4"):
        train_loop(lambda t: math.nan if t == 4 else 1.0, 10, [], lambda t: {})
    with pytest.raises(ValueError):
        train_loop(lambda t: 1.0, -1, [], lambda t: {})


def test_run_cache_hit_and_miss(tmp_path, capsys):
    calls = []

    def run():
        calls.append(1)
        return {"result": len(calls)}

    assert cached_run("unit", {"lr": 0.1}, run) == {"result": 1}
    assert cached_run("unit", {"lr": 0.1}, run) == {"result": 1}  # hit: not recomputed
    assert len(calls) == 1 and "reusing" in capsys.readouterr().out
    assert cached_run("unit", {"lr": 0.2}, run) == {"result": 2}  # miss: new configuration
    assert config_key({"a": 1, "b": 2}) == config_key({"b": 2, "a": 1})


def test_failed_run_leaves_no_cache_entry(tmp_path):
    def boom():
        raise RuntimeError("crashed")

    with pytest.raises(RuntimeError):
        cached_run("unit", {"x": 1}, boom)
    assert cached_run("unit", {"x": 1}, lambda: "fresh") == "fresh"


def test_evaluation_can_stop_training_early():
    steps_taken = []
    history = train_loop(lambda t: steps_taken.append(t) or 1.0, 100, [0, 10, 20, 30, 40],
                         lambda t: {"acc": t / 40, "stop": t >= 20})
    assert [h["step"] for h in history] == [0, 10, 20] and steps_taken[-1] == 20
    assert "stop" not in history[-1] and history[-1]["acc"] == 0.5


def _fake_package(root, body):
    (root / "harness").mkdir(parents=True, exist_ok=True)
    (root / "objectives.py").write_text(body)
    (root / "harness" / "cli.py").write_text("print('harness')\n")


def test_source_hash_follows_result_code_but_not_the_harness(tmp_path):
    root = tmp_path / "pkg"
    _fake_package(root, "def rosenbrock(x, y):\n    return (1 - x) ** 2 + 100 * (y - x * x) ** 2\n")
    before = source_hash(root)
    (root / "harness" / "cli.py").write_text("print('harness, edited')\n")
    assert source_hash(root) == before  # the harness does not change results
    (root / "objectives.py").write_text(
        "def rosenbrock(x, y):\n    return (1 - x) ** 2 + 10 * (y - x * x) ** 2\n")
    assert source_hash(root) != before
    assert "harness" not in {f.parent.name for f in training.source_files()}
    assert any(f.name == "landscape.py" for f in training.source_files())


def test_changed_code_misses_the_cache(monkeypatch):
    calls = []

    def run():
        calls.append(1)
        return len(calls)

    assert cached_run("unit", {"lr": 0.1}, run) == 1
    assert cached_run("unit", {"lr": 0.1}, run) == 1
    # The objective's source changes: same configuration, new key, recomputed.
    monkeypatch.setattr(training, "source_hash", lambda root=None: "edited-objective")
    assert cached_run("unit", {"lr": 0.1}, run) == 2
    monkeypatch.setattr(training, "code_versions", lambda: {"source": "x", "torch": "9.9"})
    assert cached_run("unit", {"lr": 0.1}, run) == 3


def test_swapped_cache_files_are_detected(capsys):
    a = cached_run("unit", {"objective": "rosenbrock"}, lambda: "rosenbrock distances")
    b = cached_run("unit", {"objective": "rastrigin"}, lambda: "rastrigin distances")
    pa = cache_dir() / "unit" / f"{config_key({'objective': 'rosenbrock'})}.pkl"
    pb = cache_dir() / "unit" / f"{config_key({'objective': 'rastrigin'})}.pkl"
    blob_a, blob_b = pa.read_bytes(), pb.read_bytes()
    pa.write_bytes(blob_b)
    pb.write_bytes(blob_a)
    capsys.readouterr()
    before = dict(CACHE_STATS)
    assert cached_run("unit", {"objective": "rosenbrock"}, lambda: "recomputed") == "recomputed"
    out = capsys.readouterr().out
    assert pa.name in out and "recomputing" in out and "by hand" in out
    assert CACHE_STATS["computed"] == before["computed"] + 1
    assert CACHE_STATS["reused"] == before["reused"]
    assert (a, b) == ("rosenbrock distances", "rastrigin distances")


def test_truncated_or_garbage_entry_is_recomputed_with_a_message(capsys):
    config = {"seed": 3}
    cached_run("unit", config, lambda: list(range(1000)))
    path = cache_dir() / "unit" / f"{config_key(config)}.pkl"
    path.write_bytes(path.read_bytes()[:50])  # truncated
    assert cached_run("unit", config, lambda: "fresh") == "fresh"
    out = capsys.readouterr().out
    assert path.name in out and "cannot be read" in out
    assert cached_run("unit", config, lambda: "not again") == "fresh"  # rewritten, now reused
    path.write_bytes(b"garbage, not a pickle")
    assert cached_run("unit", config, lambda: "fresh again") == "fresh again"
    assert path.name in capsys.readouterr().out
    import pickle
    path.write_bytes(pickle.dumps([1, 2, 3]))  # an old-format entry (the bare result)
    assert cached_run("unit", config, lambda: "new format") == "new format"
