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
    # Every parameter passes the checks made before the kernel starts; the run itself then fails
    # when it stores its first training run, because the run cache's folder is a file.
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    env = dict(os.environ, REPLICATE_CACHE_DIR=str(blocker))
    result = cli("run", "07_optimizers", "--preset", "smoke", "--claims-dir", str(claims),
                 "--results-dir", str(results), timeout=300, env=env)
    assert result.returncode == 1
    assert "failed in code cell" in result.stderr and "not-a-folder" in result.stderr
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


def test_run_help_lists_the_chapters_and_presets_and_points_to_list():
    out = cli("run", "--help").stdout
    for ch in presets.chapters().values():
        assert ch.name in out and ", ".join(ch.presets) in out
    assert "list CHAPTER" in out and "--publish" in out and "--allow-dirty" in out
    assert "runs/<chapter>/<preset>" in out


@pytest.mark.parametrize("command, reads", [
    ("list", "Reads no environment variables"),
    ("run", "REPLICATE_DATA_DIR"), ("run", "REPLICATE_CACHE_DIR"), ("run", "REPLICATE_NO_CACHE"),
    ("run", "REPLICATE_RESULTS_DIR"), ("run", "TQDM_DISABLE"), ("run", "REPLICATE_RUNS_DIR"),
    ("sweep", "REPLICATE_CACHE_DIR"), ("build", "Reads no environment variables"),
    ("validate", "REPLICATE_CACHE_DIR"), ("validate", "relative 5%"), ("bench", "REPLICATE_CACHE_DIR"),
])
def test_every_subcommand_says_what_it_does_and_which_environment_it_reads(command, reads):
    result = cli(command, "--help")
    assert result.returncode == 0
    description = result.stdout.split("\n\n")[1]  # the paragraph after the usage line(s)
    assert len(description.split()) >= 10, f"`{command} --help` needs a description"
    assert reads in " ".join(result.stdout.split())


def test_list_chapter_prints_each_parameter_with_its_type_cpu_value_and_comment():
    out = cli("list", "07_optimizers").stdout
    cpu = presets.load_preset("07_optimizers", "cpu")
    for name, value in cpu.items():
        assert f"  {name}: " in out, f"{name} missing from `list 07_optimizers`"
    # the source notebook's value is the cpu preset's, and its comment says what it is
    assert f"  iterations: int = {cpu['iterations']}" in out and "optimisation steps" in out
    bad = cli("list", "no_such_chapter")
    assert bad.returncode == 2 and "valid chapters" in bad.stderr


def test_list_names_how_to_see_a_chapters_parameters():
    assert "list CHAPTER" in cli("list").stdout
