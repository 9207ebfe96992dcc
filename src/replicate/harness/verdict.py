"""A chapter's run record and its verdict: PASS/FAIL lines and `results/<chapter>.json`.

A notebook starts with `run = start_chapter(CHAPTER, preset, globals())` right after its
`parameters` cell and ends with `run.verdict([...checks...])` in a cell marked
`# NBVAL_CHECK_OUTPUT`, then `run.save()` in the next cell. The scoreboard page is built from
the results files.

Two kinds of check:
- `claim(...)`: an acceptance check of the paper's claim; all of them passing = "reproduced".
- `report(...)`: something the paper states that we measure and show without a pass/fail,
  such as a discrepancy with the paper or a number the paper gives only qualitatively.
"""
from __future__ import annotations

import json
import os
import tempfile
import textwrap
import time
from dataclasses import asdict, dataclass
from typing import Any

from . import presets
from ..runtime import describe_device, display_path, provenance, results_dir, seed_everything
from .. import training


@dataclass
class Check:
    name: str
    kind: str  # "claim" or "report"
    passed: bool | None
    ours: Any
    paper: Any


def claim(name: str, passed: bool, ours: Any, paper: Any) -> Check:
    return Check(name, "claim", bool(passed), _plain(ours), _plain(paper))


def report(name: str, ours: Any, paper: Any) -> Check:
    return Check(name, "report", None, _plain(ours), _plain(paper))


def _plain(value: Any) -> Any:
    """JSON-friendly values with floats rounded to 4 significant digits (nbval compares text)."""
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


RESULTS_SHOWN_ENV = "REPLICATE_RESULTS_SHOWN"  # set by the CLI: the published path

WIDTH = 96  # printed lines fit the book's text column


def _wrap(text: str, first: str, rest: str) -> str:
    return textwrap.fill(text, WIDTH, initial_indent=first, subsequent_indent=rest,
                         break_on_hyphens=False)


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_show(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


class ChapterRun:
    """Parameters, seed and clock of one execution of a chapter."""

    def __init__(self, chapter: str, preset: str, params: dict[str, Any], overrides: dict[str, Any],
                 cache_stats: dict[str, int] | None = None):
        # The run cache's live tally ({"reused": n, "computed": m}); the record counts this
        # execution's part of it, since a recorded duration means little without it.
        self._cache_stats = cache_stats if cache_stats is not None else {"reused": 0, "computed": 0}
        self._cache_at_start = dict(self._cache_stats)
        self.chapter = presets.get_chapter(chapter)
        self.preset = preset
        self.params = params
        self.overrides = overrides
        self.seed = int(params.get("seed", 0))
        self.started = time.perf_counter()
        self.checks: list[Check] | None = None
        seed_everything(self.seed)

    @property
    def label(self) -> str:
        """The preset, with overrides if any: goes into captions and the scoreboard."""
        if not self.overrides:
            return self.preset
        return self.preset + " + " + ", ".join(f"{k}={v}" for k, v in self.overrides.items())

    def caption(self) -> str:
        return f"preset {self.label}, seed {self.seed}"

    def verdict(self, checks: list[Check]) -> bool:
        """Print one line per check and the overall verdict; returns whether the claim reproduced."""
        self.checks = list(checks)
        claims = [c for c in self.checks if c.kind == "claim"]
        reproduced = bool(claims) and all(c.passed for c in claims)
        print(_wrap(self.chapter.claim, f"Claim ({self.chapter.name}): ", "  "))
        for c in self.checks:
            tag = "REPORT" if c.kind == "report" else ("PASS" if c.passed else "FAIL")
            print(_wrap(c.name, f"{tag:6s} ", " " * 7))
            print(_wrap(_show(c.ours), "       ours: ", " " * 13))
            print(_wrap(_show(c.paper), "       paper: ", " " * 14))
        passed = sum(bool(c.passed) for c in claims)
        word = "REPRODUCED" if reproduced else "NOT REPRODUCED"
        print(_wrap(f"{word} ({passed}/{len(claims)} claim checks pass)",
                    f"Verdict at preset {self.label}: ", "  "))
        return reproduced

    def cache_runs(self) -> dict[str, int]:
        """Training runs this execution took from the run cache and computed."""
        return {k: self._cache_stats.get(k, 0) - self._cache_at_start.get(k, 0)
                for k in ("reused", "computed")}

    def save(self) -> str:
        """Write `<results dir>/<chapter>.json` (atomically) and return its path."""
        if self.checks is None:
            raise RuntimeError("call run.verdict(checks) before run.save()")
        claims = [c for c in self.checks if c.kind == "claim"]
        record = {
            "chapter": self.chapter.name,
            "title": self.chapter.title,
            "claim": self.chapter.claim,
            "preset": self.label,
            "reproduced": bool(claims) and all(c.passed for c in claims),
            "checks": [asdict(c) for c in self.checks],
            "seed": self.seed,
            "device": describe_device(),
            "duration_s": round(time.perf_counter() - self.started, 1),
            "runs": self.cache_runs(),  # reused from the run cache vs computed in this execution
            **provenance(),  # git_commit, dirty, torch, cpu_capability or gpu
            "params": self.params,
        }
        folder = results_dir(self.chapter.name)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.chapter.name}.json"
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(record, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
        cached = "training runs: {reused} reused from the cache, {computed} computed".format(**record["runs"])
        # The CLI stages the verdict and names where it will be published ($REPLICATE_RESULTS_SHOWN);
        # any other execution says where its scratch run folder is.
        shown = os.environ.get(RESULTS_SHOWN_ENV) or display_path(path)
        print(f"{record['duration_s']} s on {record['device']} ({cached}).\n"
              f"Verdict written to {shown}.")
        _display_checks(record["checks"])
        return str(path)


def _display_checks(checks: list[dict]) -> None:
    """The checks as a coloured table where a notebook front end can show HTML."""
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display
    except ImportError:
        return
    if get_ipython() is not None:
        from .book_pages import checks_table_html

        display(HTML(checks_table_html(checks)))


def _parameters_text(params: dict[str, Any]) -> str:
    return _wrap(", ".join(f"{k}={_show(v)}" for k, v in params.items()), "parameters: ", "  ")


def start_chapter(chapter: str, preset: str, namespace: dict[str, Any]) -> ChapterRun:
    """Validate the notebook's parameters against the presets, seed everything, print the setup."""
    params, overrides = presets.from_notebook(chapter, preset, namespace)
    run = ChapterRun(chapter, preset, params, overrides, cache_stats=training.CACHE_STATS)
    print(_wrap(f"{run.chapter.title}: preset {run.label}, seed {run.seed}, "
                f"device {describe_device()}", "", "  "))
    print(_parameters_text(run.params))
    return run
