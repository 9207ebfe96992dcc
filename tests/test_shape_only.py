"""The paper presets are proven to run: every chapter with a `shape_only` key executes every cell
at `paper` with its step counts, repetitions and snapshots cut to a handful (`run --shape-only`).

The models, data sizes and measurement settings stay the paper's (the transformer on mod 97,
width 196 without biases, PGD on 10,000 points, the full-size XOR, ...), so a broken paper
configuration fails here in minutes rather than on a GPU after hours. All chapters together take
about 4 minutes on 2 busy cores with one thread.
"""
import json
import os
import subprocess
import sys
import time

import pytest

from replicate import config
from replicate.config import RunSpec
from replicate.runtime import PROJECT_ROOT

SHAPED = [name for name, ch in config.chapters().items() if ch.get("shape_only")]


def test_every_chapter_has_a_valid_shape_only_key():
    assert SHAPED == list(config.chapters())
    for name in SHAPED:
        overrides = config.get_chapter(name).get("shape_only")
        RunSpec.shape_only(name)  # the cut-down paper preset is itself valid
        paper = config.load_preset(name, "paper")
        assert overrides and set(overrides) <= set(paper)
        # only cuts: no value above the paper's, no list longer than the paper's
        for key, value in overrides.items():
            assert _only_cuts(value, paper[key]), (name, key)


def _only_cuts(cut, full) -> bool:
    """No value of `cut` above the matching one of `full`, no list longer; a dict (a nested
    delta, such as chapter 04's paper_point) key by key, with no key the paper lacks."""
    if isinstance(cut, dict):
        return isinstance(full, dict) and set(cut) <= set(full) and all(
            _only_cuts(cut[k], full[k]) for k in cut)
    cut = cut if isinstance(cut, list) else [cut]
    full = full if isinstance(full, list) else [full]
    if any(isinstance(v, (list, dict)) for v in cut + full):  # a list of lists: item by item
        return len(cut) <= len(full) and all(_only_cuts(c, f) for c, f in zip(cut, full))
    return len(cut) <= len(full) and max(cut) <= max(full)


def test_the_cut_rule_reads_nested_deltas():
    assert _only_cuts({"max_steps": 20, "seeds": {"ce": [0]}},
                      {"max_steps": 200000, "seeds": {"ce": [0, 1, 2]}})
    assert not _only_cuts({"max_steps": 300000}, {"max_steps": 200000})
    assert not _only_cuts({"seeds": {"ce": [0, 1]}}, {"seeds": {"ce": [0]}})
    assert not _only_cuts({"extra": 1}, {"max_steps": 1})


def test_a_parameter_set_on_purpose_to_its_cpu_value_still_overrides():
    # 03's shape-only run asks for 500 digits per class (the cpu value) on top of paper's 512.
    spec = RunSpec.shape_only("03_centroid_ntk")
    assert spec.preset == "paper" and spec.overrides["n_per_class"] == 500
    assert spec.params["n_per_class"] == 500


def test_shape_only_never_touches_the_published_book(tmp_path):
    result = subprocess.run([sys.executable, "-m", "replicate", "run", "07_optimizers", "--preset", "cpu",
                             "--shape-only"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "cuts down the paper preset" in result.stderr


@pytest.mark.parametrize("chapter", SHAPED)
def test_paper_preset_runs_shape_only(chapter, tmp_path):
    env = dict(os.environ, TQDM_DISABLE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               REPLICATE_CACHE_DIR=str(tmp_path / "cache"))
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "replicate", "run", chapter, "--preset", "paper",
                             "--shape-only", "--claims-dir", str(tmp_path)],
                            cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    record = json.loads((tmp_path / "results" / f"{chapter}.json").read_text())
    assert record["preset"] == "paper" and record["overrides"] and record["checks"]
    nb = json.loads((tmp_path / f"{chapter}.ipynb").read_text())
    assert not nb["metadata"]["papermill"].get("exception")
    print(f"{chapter} at paper --shape-only: {time.perf_counter() - started:.0f} s")
