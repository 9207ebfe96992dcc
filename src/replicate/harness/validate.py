"""`validate`: re-execute published chapters and compare them with the book. nbval re-executes
each published notebook with an empty run cache and compares the verdict's words (numbers masked
by `nbval_sanitize.cfg`); then `drift` compares every number of the re-executed verdict with the
published one, within the chapter's tolerance."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..config import ConfigError
from ..runtime import PROJECT_ROOT, display_path
from . import execute as ex
from .records import read_record
from .drift import chapter_tolerances, compare, seed_spread, table, uses_seed_spread

SANITIZE_FILE = Path(__file__).resolve().parent / "nbval_sanitize.cfg"


def validate(chapters: list[str], claims_dir: Path, results_dir: Path, preset: str = "cpu") -> int:
    """Re-execute and compare the chapters published at `preset` (the book's `cpu`, or `paper`,
    whose pairs live in `results/paper/`); prints a table per chapter. Returns the exit code:
    nbval's when the words differ, else 1 when a number drifted beyond tolerance, else 0."""
    claims_dir, results_dir = Path(claims_dir), Path(results_dir)
    ex.repair_book(claims_dir, results_dir)
    notebooks = [claims_dir / f"{ch}.ipynb" for ch in chapters]
    missing = [display_path(nb) for nb in notebooks if not nb.exists()]
    if missing:
        raise ConfigError(f"no executed chapter at {', '.join(missing)}; run "
                          "`python -m replicate run` first")
    published = results_dir if preset == "cpu" else results_dir / "paper"
    for chapter in chapters:  # a broken results file is named now, not after the re-execution
        read_record(published / f"{chapter}.json")
    scratch = ex.new_staging("validate")  # removed at the end, or by the next run if killed
    try:
        # An empty run cache: validation re-computes every training run, it never re-reads one.
        env = dict(os.environ, TQDM_DISABLE="1", REPLICATE_RESULTS_DIR=str(scratch),
                   REPLICATE_CACHE_DIR=str(Path(scratch) / "cache"),
                   JUPYTER_RUNTIME_DIR=str(Path(scratch) / "runtime"))
        env.pop("REPLICATE_NO_CACHE", None)
        code = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "--nbval-lax", "--nbval-sanitize-with", str(SANITIZE_FILE),
                               *map(str, notebooks)], env=env, cwd=PROJECT_ROOT).returncode
        # nbval compared the words; the numbers are compared here, within the stated tolerance.
        drifted = sum(not compare_chapter(ch, results_dir, Path(scratch), preset) for ch in chapters)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if drifted:
        print(f"error: {drifted} chapter(s) differ from their published verdict beyond tolerance",
              file=sys.stderr)
    return code or (1 if drifted else 0)


def compare_chapter(chapter: str, results_dir: Path, executed_dir: Path, preset: str = "cpu") -> bool:
    """Print the table of what moved between the published verdict and the re-executed one;
    returns whether every number is within tolerance and every word the same."""
    published, now = results_dir / f"{chapter}.json", executed_dir / f"{chapter}.json"
    if not (published.exists() and now.exists()):
        why = "re-execution wrote none" if published.exists() else "none published"
        print(f"{chapter}: no verdict to compare ({why})")
        return False
    # A chapter whose run is another draw on another machine: its seeds' spread counts.
    home = results_dir if preset == "cpu" else results_dir.parent  # the paper's: results/paper/
    book = home.parent
    spread = (seed_spread(chapter, home, book / "sweeps", preset) if uses_seed_spread(chapter)
              else None)
    differences = compare(read_record(published), read_record(now),
                          *chapter_tolerances(chapter), spread)
    print(table(chapter, differences))
    return all(d.within for d in differences)
