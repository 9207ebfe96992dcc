"""Every chapter executes at the smoke preset, and nbval re-executes it to the same verdict."""
import json
import os
import subprocess
import sys

import pytest

from replicate import presets
from replicate.runtime import PROJECT_ROOT
from replicate.cli import SANITIZE_FILE

CHAPTERS = list(presets.chapters())


def test_source_notebooks_are_stripped_and_have_a_verdict_cell():
    for ch in presets.chapters().values():
        nb = json.loads(ch.notebook.read_text())
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert not any(c.get("outputs") for c in code), f"{ch.notebook} carries outputs"
        verdict = [c for c in code if "".join(c["source"]).startswith("# NBVAL_CHECK_OUTPUT")]
        assert len(verdict) == 1, f"{ch.notebook} needs one verdict cell"
        assert "run.verdict(" in "".join(verdict[0]["source"])


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    env = dict(os.environ, TQDM_DISABLE="1", REPLICATE_CACHE_DIR=str(out / "cache"))
    result = subprocess.run([sys.executable, "-m", "replicate", "run", *CHAPTERS, "--preset", "smoke",
                             "--claims-dir", str(out), "--results-dir", str(out / "results")],
                            cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_executes_at_smoke(smoke_runs, chapter):
    record = json.loads((smoke_runs / "results" / f"{chapter}.json").read_text())
    assert record["preset"] == "smoke" and record["checks"]


def test_nbval_reexecutes_the_smoke_chapters(smoke_runs):
    env = dict(os.environ, TQDM_DISABLE="1", REPLICATE_CACHE_DIR=str(smoke_runs / "cache"),
               REPLICATE_RESULTS_DIR=str(smoke_runs / "nbval-results"))
    notebooks = [str(smoke_runs / f"{ch}.ipynb") for ch in CHAPTERS]
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                             "--nbval-sanitize-with", str(SANITIZE_FILE), *notebooks],
                            cwd=smoke_runs, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
