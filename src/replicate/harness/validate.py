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
from .drift import (chapter_tolerances, compare, page_differences, seed_spread, seed_words, table,
                    uses_seed_spread)

SANITIZE_FILE = Path(__file__).resolve().parent / "nbval_sanitize.cfg"


def validate(chapters: list[str], claims_dir: Path, results_dir: Path, preset: str = "cpu") -> int:
    """Re-execute and compare the chapters published at `preset` (the book's `cpu`, or `paper`,
    whose pairs live in `results/paper/`); prints a table per chapter, its last line saying
    whether every word and number is as published. Returns the exit code: 1 when any chapter's
    words (nbval), numbers (beyond tolerance) or page (against its own results file) differ."""
    claims_dir, results_dir = Path(claims_dir), Path(results_dir)
    ex.repair_book(claims_dir, results_dir)
    notebooks = {ch: claims_dir / f"{ch}.ipynb" for ch in chapters}
    missing = [display_path(nb) for nb in notebooks.values() if not nb.exists()]
    if missing:
        raise ConfigError(f"no executed chapter at {', '.join(missing)}; run "
                          "`python -m replicate run` first")
    published = results_dir if preset == "cpu" else results_dir / "paper"
    pages = {}
    for chapter in chapters:  # a broken results file is named now, not after the re-execution
        record = read_record(published / f"{chapter}.json")
        pages[chapter] = page_differences(json.loads(notebooks[chapter].read_text()), record or {})
    scratch = ex.new_staging("validate")  # removed at the end, or by the next run if killed
    failed = 0
    try:
        # An empty run cache: validation re-computes every training run, it never re-reads one.
        env = dict(os.environ, TQDM_DISABLE="1", REPLICATE_RESULTS_DIR=str(scratch),
                   REPLICATE_CACHE_DIR=str(Path(scratch) / "cache"),
                   JUPYTER_RUNTIME_DIR=str(Path(scratch) / "runtime"))
        env.pop("REPLICATE_NO_CACHE", None)
        for chapter, notebook in notebooks.items():
            words = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                    "--nbval-lax", "--nbval-sanitize-with", str(SANITIZE_FILE),
                                    str(notebook)], env=env, cwd=PROJECT_ROOT).returncode
            # nbval compared the words; the numbers are compared here, within the tolerance.
            failed += not compare_chapter(chapter, results_dir, Path(scratch), preset,
                                          words_same=words == 0, page=pages[chapter])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if failed:
        print(f"error: {failed} chapter(s) differ from the book (see above)", file=sys.stderr)
    return 1 if failed else 0


def compare_chapter(chapter: str, results_dir: Path, executed_dir: Path, preset: str = "cpu",
                    words_same: bool = True, page: list | None = None) -> bool:
    """Print the table of what moved between the published verdict and the re-executed one
    (and where the published page differs from its own results file); returns whether every
    number is within tolerance, every word the same and the page its record's."""
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
    words = seed_words(chapter, home, book / "sweeps", preset)
    moved = compare(read_record(published), read_record(now), *chapter_tolerances(chapter),
                    spread, words)
    # nbval reads the words the records hold: where every word that moved is one its seeds read
    # both ways (a fragile check on another CPU), the words are within the seeds' spread.
    flips = [d for d in moved if d.where in ("passed", "inconclusive", "reproduced")]
    words_same = words_same or bool(flips) and all(d.by_seeds for d in flips)
    differences = [*(page or []), *moved]
    print(table(chapter, differences, words_same))
    return words_same and all(d.within for d in differences)
