import math

import pytest

from replicate.training import DivergenceError, cached_run, config_key, log_spaced_steps, train_loop


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
