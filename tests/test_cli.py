import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replicate.harness import presets
from replicate.runtime import BOOK_DIR, PROJECT_ROOT


def cli(*args, timeout=120, **kwargs):
    return subprocess.run([sys.executable, "-m", "replicate", *args], capture_output=True, text=True,
                          cwd=PROJECT_ROOT, timeout=timeout, **kwargs)


def tree_digest(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*")) if p.is_file()}


@pytest.mark.parametrize("args, expected", [
    (["run", "07_optimizers", "--preset", "nope"], "valid presets: cpu, paper, smoke"),
    (["run", "no_such_chapter"], "valid chapters: "),
    (["run", "07_optimizers", "-p", "iterations", "lots"], "must be of type int"),
    (["run", "07_optimizers", "-p", "iterations", "-3"], "must be positive"),
    (["run", "07_optimizers", "-p", "no_such_param", "1"], "valid parameters: "),
])
def test_bad_input_fails_fast_and_touches_nothing(args, expected):
    before = tree_digest(BOOK_DIR / "claims"), tree_digest(BOOK_DIR / "results")
    started = time.perf_counter()
    result = cli(*args)
    assert time.perf_counter() - started < 5
    assert result.returncode != 0
    assert expected in result.stderr
    assert (tree_digest(BOOK_DIR / "claims"), tree_digest(BOOK_DIR / "results")) == before


def test_list_names_chapters_claims_and_presets():
    out = cli("list").stdout
    assert "07_optimizers" in out and "claim:" in out and "smoke" in out


def test_failed_execution_leaves_the_published_chapter_byte_identical(tmp_path):
    claims, results = tmp_path / "claims", tmp_path / "results"
    claims.mkdir(), results.mkdir()
    (claims / "07_optimizers.ipynb").write_text('{"published": true}')
    (results / "07_optimizers.json").write_text('{"published": true}')
    before = tree_digest(claims), tree_digest(results)
    # Valid type (a list of floats), but Rosenbrock needs an even dimension: fails at run time.
    result = cli("run", "07_optimizers", "--preset", "smoke", "-p", "rosenbrock_start", "[1.0, 2.0, 3.0]",
                 "--claims-dir", str(claims), "--results-dir", str(results), timeout=300)
    assert result.returncode == 1
    assert "failed in code cell" in result.stderr and "even number of coordinates" in result.stderr
    assert "left unchanged" in result.stderr
    assert (tree_digest(claims), tree_digest(results)) == before


def test_published_chapters_hold_successful_executions():
    for notebook in sorted((BOOK_DIR / "claims").glob("*.ipynb")):
        meta = json.loads(notebook.read_text())["metadata"].get("papermill", {})
        assert not meta.get("exception"), f"{notebook} holds a failed execution"
        assert (BOOK_DIR / "results" / f"{notebook.stem}.json").exists()


MNIST_CHAPTERS = [name for name, ch in presets.chapters().items() if "mnist" in ch.datasets]


@pytest.mark.parametrize("chapter", MNIST_CHAPTERS)
def test_missing_dataset_fails_before_the_run_with_the_path_it_looked_in(chapter, tmp_path):
    env = dict(os.environ, REPLICATE_DATA_DIR=str(tmp_path))
    started = time.perf_counter()
    result = cli("run", chapter, "--preset", "smoke", "--claims-dir", str(tmp_path / "claims"), env=env)
    assert time.perf_counter() - started < 5 and result.returncode == 2
    assert str(tmp_path / "mnist" / "MNIST" / "raw") in result.stderr and "REPLICATE_DATA_DIR" in result.stderr
    assert not (tmp_path / "claims").exists()
