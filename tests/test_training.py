import dataclasses
import json
import math
import os
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch

from replicate import training
from replicate.experiments.algorithmic import ModularRun
from replicate.experiments.mnist_mlp import MnistMLPRun
from replicate.experiments.slingshot import SlingshotRun
from replicate.measures.partition import Plane
from replicate.training import (CACHE_STATS, DivergenceError, cached_run, config_key,
                                 log_spaced_steps, source_hash, train_loop)


def _entry(name, config):
    """The file of the cache entry of `cached_run(name, config, ...)`."""
    return training.cache_entry_path(name, config)


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


def test_run_cache_hit_and_miss(tmp_path, capsys, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="replicate.cache")
    calls = []

    def run():
        calls.append(1)
        return {"result": len(calls)}

    assert cached_run("unit", {"lr": 0.1}, run) == {"result": 1}
    assert cached_run("unit", {"lr": 0.1}, run) == {"result": 1}  # hit: not recomputed
    assert len(calls) == 1 and "reusing" in caplog.text
    assert "reusing" not in capsys.readouterr().out  # logged, not printed on the chapter's page
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


def test_top_level_config_and_verdict_modules_do_not_change_the_source_hash(tmp_path):
    root = tmp_path / "pkg"
    _fake_package(root, "def sphere(x):\n    return (x * x).sum()\n")
    for relative in ("config.py", "verdict.py", "measures/config.py"):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text("SETTING = 1\n")
    before = source_hash(root)
    (root / "config.py").write_text("SETTING = 2  # presets are read here, results made elsewhere\n")
    (root / "verdict.py").write_text("SETTING = 2\n")
    assert source_hash(root) == before
    # Only the top-level files are excluded: a config.py among the measures is result code.
    (root / "measures" / "config.py").write_text("SETTING = 2\n")
    assert source_hash(root) != before
    relative = {f.relative_to(root).as_posix() for f in training.source_files(root)}
    assert relative == {"objectives.py", "measures/config.py"}


def test_a_docstring_or_comment_edit_in_the_measures_keeps_the_cache_and_a_code_edit_does_not(
        tmp_path):
    root = tmp_path / "pkg"
    (root / "measures").mkdir(parents=True)
    code = 'def rank(x):\n    """How many directions."""\n    return len(x)  # all of them\n'
    (root / "measures" / "rank.py").write_text(code)
    before = source_hash(root)
    (root / "measures" / "rank.py").write_text(
        code.replace("How many directions.", "How many directions, explained at length.")
        .replace("# all of them", "# every one\n"))
    assert source_hash(root) == before
    (root / "measures" / "rank.py").write_text(code.replace("len(x)", "len(x) - 1"))
    assert source_hash(root) != before


def test_plots_judges_and_figures_do_not_change_the_source_hash_and_the_real_package_agrees(
        tmp_path):
    root = tmp_path / "pkg"
    _fake_package(root, "def sphere(x):\n    return (x * x).sum()\n")
    for relative in ("plotting.py", "experiments/chapters/optimizers.py", "experiments/race.py"):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text("LIMIT = 1\n")
    before = source_hash(root)
    (root / "plotting.py").write_text("LIMIT = 2\n")
    (root / "experiments" / "chapters" / "optimizers.py").write_text("LIMIT = 2\n")
    assert source_hash(root) == before
    (root / "experiments" / "race.py").write_text("LIMIT = 2\n")
    assert source_hash(root) != before
    # In the package itself: a docstring edit in plotting.py or a measure keeps every cached run.
    real = {f.relative_to(training.PACKAGE_DIR).as_posix() for f in training.source_files()}
    assert "plotting.py" not in real and "measures/jacobian.py" in real
    assert not any(r.startswith("experiments/chapters/") for r in real)


def test_swapped_cache_files_are_detected(capsys):
    a = cached_run("unit", {"objective": "rosenbrock"}, lambda: "rosenbrock distances")
    b = cached_run("unit", {"objective": "rastrigin"}, lambda: "rastrigin distances")
    pa = _entry("unit", {"objective": "rosenbrock"})
    pb = _entry("unit", {"objective": "rastrigin"})
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


def _rewrite_entry(path, header=None, layout=None, arrays=None):
    """Rewrite a cache entry with other members: what a hand, or a hostile neighbour on a shared
    filesystem, could put there. `None` keeps the entry's own member; "drop" leaves it out."""
    with np.load(path, allow_pickle=False) as members:
        own = {name: members[name] for name in members.files}
    members = {name: value for name, value in own.items() if name not in ("header", "layout")}
    if arrays is not None:
        members = arrays
    for name, value in (("header", header), ("layout", layout)):
        if value is None:
            members[name] = own[name]
        elif value != "drop":
            members[name] = np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)
    with open(path, "wb") as fh:
        np.savez(fh, **members)


def _header(path):
    with np.load(path, allow_pickle=False) as members:
        return json.loads(members["header"].tobytes())


def test_truncated_or_garbage_entry_is_recomputed_with_a_message(capsys):
    config = {"seed": 3}
    cached_run("unit", config, lambda: list(range(1000)))
    path = _entry("unit", config)
    path.write_bytes(path.read_bytes()[:50])  # truncated
    assert cached_run("unit", config, lambda: "fresh") == "fresh"
    out = capsys.readouterr().out
    assert path.name in out and "cannot be read" in out
    assert cached_run("unit", config, lambda: "not again") == "fresh"  # rewritten, now reused
    path.write_bytes(b"garbage, not an archive")
    assert cached_run("unit", config, lambda: "fresh again") == "fresh again"
    assert path.name in capsys.readouterr().out
    header = _header(path)
    _rewrite_entry(path, header={**header, "format": 2})  # an entry of another format
    assert cached_run("unit", config, lambda: "new format") == "new format"
    assert "not a run-cache entry of this format" in capsys.readouterr().out
    _rewrite_entry(path, header="drop")
    assert cached_run("unit", config, lambda: "with a header") == "with a header"
    assert "not a run-cache entry of this format" in capsys.readouterr().out
    _rewrite_entry(path, layout={"array": "a9"})  # refers to an array the file lacks
    assert cached_run("unit", config, lambda: "complete") == "complete"
    assert "missing array" in capsys.readouterr().out


def _assert_same(a, b, where="result"):
    """`b` equals `a` and has its types, down to dtypes, key types and nan."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} came back as {type(b).__name__}"
    if isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and np.shape(a) == np.shape(b), where
        assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), where
    elif isinstance(a, torch.Tensor):
        torch.testing.assert_close(b, a, rtol=0, atol=0, equal_nan=True, msg=where)
    elif isinstance(a, float):
        same_sign = math.copysign(1, a) == math.copysign(1, b)  # -0.0 stays -0.0
        assert (math.isnan(a) and math.isnan(b)) or (a == b and same_sign), where
    elif isinstance(a, dict):
        assert len(a) == len(b), where
        for (ka, va), (kb, vb) in zip(a.items(), b.items()):
            _assert_same(ka, kb, f"a key of {where}")
            _assert_same(va, vb, f"{where}[{ka!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (va, vb) in enumerate(zip(a, b)):
            _assert_same(va, vb, f"{where}[{i}]")
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            _assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    else:
        assert a == b, where


def _every_result_type():
    """One of each type the chapters' cached runs return, nested as they nest them."""
    torch.manual_seed(0)
    state = torch.nn.Linear(3, 2).state_dict()  # an OrderedDict of float32 tensors
    curve = np.array([0.5, math.nan, math.inf])
    modular = ModularRun(loss=curve, train_acc=np.ones(3), val_acc=np.zeros(3), grad_norm=np.arange(3.0),
                         measures=[{"step": 1, "loss": 0.25,
                                    "train": {"hidden": {"mle": 3.5, "twonn": math.nan, "distinct": 7}}}],
                         state_dict={"w": torch.randn(2, 2), "steps": torch.tensor(4)})
    return {
        "scalars": [None, True, False, 0, -3, 2 ** 70, 1.5, -0.0, math.nan, math.inf, -math.inf, "é, ok"],
        "numpy": (np.float64(0.1), np.float32(2.5), np.int64(-4), np.bool_(True), np.zeros((0, 3)),
                  np.arange(6, dtype=np.int16).reshape(2, 3), np.asfortranarray(np.eye(3)), curve),
        "tensors": {"f32": torch.tensor([1.0, math.nan]), "f64": torch.ones(2, dtype=torch.float64),
                    "bf16": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
                    "f16": torch.full((2, 1), 0.5, dtype=torch.float16), "i64": torch.arange(3),
                    "bool": torch.tensor([True, False]), "scalar": torch.tensor(3.0),
                    "bf16 scalar": torch.tensor(2.0, dtype=torch.bfloat16),
                    "transposed": torch.arange(6.0).reshape(2, 3).T},
        "state dict": state,
        # Keys of every kind, whose types must come back: 1 and 1.0 are different keys in JSON.
        1: "int key", 2.5: "float key", ("a", 1): "tuple key", None: "None key",
        "hessians": {100: {"lambda_max": 2.0, "seconds": 0.1}, 250: {"lambda_max": np.float64(3.0)}},
        "empty": [[], (), {}, OrderedDict()],
        "mnist run": MnistMLPRun(config={"width": 4, "betas": (0.9, 0.98)}, eval_steps=[0, 1, 10],
                                 train_loss=np.ones(3), train_acc=np.ones(3), test_acc=np.ones(3),
                                 checkpoints=[{k: v.clone() for k, v in state.items()}]),
        "slingshot run": SlingshotRun(run=modular, cos_prev=curve, snapshots={1: np.ones(4, np.float32)},
                                      online_spikes=[5, 9], grid_steps=[1]),
        "frozen": Plane(origin=np.zeros(2), basis=np.eye(2)),
        "diverged": {"diverged": "the training loss became nan at step 4"},
    }


def test_every_result_type_survives_the_cache_round_trip():
    original = _every_result_type()
    assert cached_run("unit", {"types": "all"}, lambda: original) is original
    loaded = cached_run("unit", {"types": "all"}, lambda: pytest.fail("the entry was not reused"))
    _assert_same(original, loaded)
    run = loaded["slingshot run"].run
    assert run.first_step_reaching("train_acc") == 1  # a working instance of the class
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded["frozen"].origin = None  # still frozen
    layout, arrays = training.encode_result(original)
    json.dumps(layout, allow_nan=False)  # the layout is strict JSON: no bare nan in it


@dataclasses.dataclass
class _NotAResultType:
    value: int


def test_a_result_that_is_not_data_is_returned_but_not_kept(capsys):
    module = torch.nn.Linear(2, 1)
    for result in (module, {"fine": 1, "model": module}, _NotAResultType(1), [lambda: 1],
                   np.array([object()]), torch.nn.Parameter(torch.ones(1))):
        with pytest.raises(training.UnstorableResult):
            training.encode_result(result)
    assert cached_run("unit", {"model": 1}, lambda: module) is module
    out = capsys.readouterr().out
    assert "unit: could not store the run in the cache" in out
    assert "the result is used but not kept" in out and "torch.nn.modules.linear.Linear" in out
    assert not _entry("unit", {"model": 1}).exists()


class _Planted:
    """Unpickling this creates the file `marker`: it stands for anything a planted pickle could do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def test_a_planted_entry_runs_no_code(tmp_path, capsys):
    import pickle

    marker = tmp_path / "planted code ran"
    config = {"seed": 7}
    path = _entry("unit", config)
    path.parent.mkdir(parents=True)
    path.write_bytes(pickle.dumps({"format": training.CACHE_FORMAT, "result": _Planted(marker)}))
    before = dict(CACHE_STATS)
    assert cached_run("unit", config, lambda: "recomputed") == "recomputed"
    assert not marker.exists()
    assert CACHE_STATS["computed"] == before["computed"] + 1 and CACHE_STATS["reused"] == before["reused"]
    out = capsys.readouterr().out
    assert "recomputing" in out and path.name in out
    # An entry whose header is right but whose layout names a class outside the package, or a
    # thing of the package that is not a dataclass.
    command = {"command": f"touch '{marker}'"}
    outside = f"{_NotAResultType.__module__}:_NotAResultType"  # a dataclass, but not ours
    for spec, fields in [("os:system", command), ("posix:system", command), (outside, {"value": 1}),
                         ("replicate.training:BadEntry", command), ("replicate.training:os.system", command)]:
        _rewrite_entry(path, layout={"dataclass": spec, "fields": fields})
        assert cached_run("unit", config, lambda: "recomputed again") == "recomputed again"
        assert not marker.exists()
        out = capsys.readouterr().out
        assert "recomputing" in out and path.name in out and spec in out
    assert cached_run("unit", config, lambda: pytest.fail("not reused")) == "recomputed again"


def test_a_header_with_another_key_is_refused_before_the_payload_is_read(monkeypatch, capsys):
    config = {"seed": 8}
    cached_run("unit", config, lambda: {"curve": np.ones(3)})
    path = _entry("unit", config)
    decoded = []
    monkeypatch.setattr(training, "decode_result", lambda *args: decoded.append(args))
    # Another run's key, and no layout or arrays at all: reading them would fail otherwise.
    _rewrite_entry(path, header={**_header(path), "key": "0123456789abcdef"}, layout="drop", arrays={})
    assert cached_run("unit", config, lambda: "recomputed") == "recomputed"
    out = capsys.readouterr().out
    assert "with key 0123456789abcdef" in out and "by hand" in out and "cannot be read" not in out
    assert decoded == []
    _rewrite_entry(path, header={**_header(path), "config": "{}"})
    assert cached_run("unit", config, lambda: "recomputed again") == "recomputed again"
    assert "configuration differs" in capsys.readouterr().out and decoded == []


def test_a_cache_that_cannot_take_the_entry_still_returns_the_run(tmp_path, monkeypatch, capsys):
    not_a_folder = tmp_path / "cache-is-a-file"
    not_a_folder.write_text("")
    monkeypatch.setenv("REPLICATE_CACHE_DIR", str(not_a_folder))
    calls = []
    run = lambda: calls.append(1) or {"curve": np.arange(3)}  # noqa: E731
    assert np.array_equal(cached_run("unit", {"seed": 1}, run)["curve"], np.arange(3))
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert out.startswith("unit: could not store the run in the cache (") and "but not kept" in out
    cached_run("unit", {"seed": 1}, run)
    assert len(calls) == 2  # nothing was kept, so computed again
    # A full disk: the write fails half-way, and leaves no temporary file behind.
    monkeypatch.setenv("REPLICATE_CACHE_DIR", str(tmp_path / "full"))

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", no_space)
    assert cached_run("unit", {"seed": 1}, run)["curve"].tolist() == [0, 1, 2]
    assert "No space left on device" in capsys.readouterr().out
    folder = tmp_path / "full" / "unit"
    assert not folder.exists() or os.listdir(folder) == []


def test_no_cache_setting_recomputes(monkeypatch):
    cached_run("unit", {"seed": 2}, lambda: "first")
    monkeypatch.setenv("REPLICATE_NO_CACHE", "1")
    assert cached_run("unit", {"seed": 2}, lambda: "second") == "second"
    monkeypatch.delenv("REPLICATE_NO_CACHE")
    assert cached_run("unit", {"seed": 2}, lambda: "third") == "second"
