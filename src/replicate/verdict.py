"""The verdict: what a chapter checks, and the record of its run. This is the book's API for the
notebooks (the harness only reads what it writes), so it sits beside the core modules.

A notebook starts with `run = start_chapter(CHAPTER, spec)` right after its `parameters` cell
and ends with `run.verdict([...checks...])` in a cell marked `# NBVAL_CHECK_OUTPUT`, then
`run.save()` in the next cell, which writes `<results dir>/<chapter>.json`.

Two kinds of check:
- `claim(...)`: an acceptance check of the paper's claim; all of them passing = "reproduced".
- `report(...)`: something the paper states that we measure and show without a pass/fail,
  such as a discrepancy with the paper or a number the paper gives only qualitatively.

Every check has a stable `id` (e.g. "ce-factor"): lowercase words joined by "-", unique within
its chapter, the same whatever the parameters. Its `name` is the readable sentence built from it
(and may quote parameter values). Tolerances, the papers' numbers, the seeds files, the
scoreboard and `validate` key on the id.

A claim check that did not pass can say why, in `diagnosis` (what happened, with its numbers).
When the run could not test the claim at all, most often because it did not grok within its step
cap, the check is `inconclusive`: it reads INCONCLUSIVE instead of FAIL, and still counts as not
passed, in this run's k/n and across seeds. The word tells the reader why; it never improves a
ratio.
"""
from __future__ import annotations

import json
import os
import re
import textwrap
import time
from dataclasses import asdict, dataclass
from typing import Any

from . import training
from .config import RunSpec, counted, format_value, get_chapter
from .runtime import (atomic_write, cost_since, cost_snapshot, describe_device, display_path,
                      git_commit, provenance, results_dir, seed_everything)

RESULTS_SHOWN_ENV = "REPLICATE_RESULTS_SHOWN"  # set by `run`: where the verdict went ("": the book)
WIDTH = 96  # printed lines fit the book's text column


@dataclass
class Check:
    name: str
    kind: str  # "claim" or "report"
    passed: bool | None
    ours: Any
    paper: Any
    inconclusive: bool = False  # the run could not test the claim (e.g. it never grokked)
    diagnosis: str | None = None  # why the check did not pass, in words and numbers
    id: str | None = None  # stable key, e.g. "ce-factor" (records from before ids have none)


CHECK_ID = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")


def _checked_id(check_id: str | None, name: str) -> str | None:
    if check_id is not None and not CHECK_ID.fullmatch(check_id):
        raise ValueError(f"check {name!r}: id {check_id!r} must be lowercase words joined by '-'")
    return check_id


def claim(name: str, passed: bool, ours: Any, paper: Any, inconclusive: bool = False,
          diagnosis: str | None = None, *, id: str | None = None) -> Check:
    """An acceptance check. `inconclusive` (which needs a `diagnosis`) marks a check the run
    could not test; it must not also pass."""
    if inconclusive and passed:
        raise ValueError(f"check {name!r}: an inconclusive check cannot pass")
    if inconclusive and not diagnosis:
        raise ValueError(f"check {name!r}: say why it is inconclusive (diagnosis=...)")
    return Check(name, "claim", bool(passed), _plain(ours), _plain(paper), bool(inconclusive),
                 diagnosis, _checked_id(id, name))


def report(name: str, ours: Any, paper: Any, *, id: str | None = None) -> Check:
    return Check(name, "report", None, _plain(ours), _plain(paper), id=_checked_id(id, name))


def check_key(check: Check | dict) -> str:
    """What identifies a check across runs, seeds and commits: its id, or for a record written
    before checks had ids, its name."""
    row = check if isinstance(check, dict) else asdict(check)
    return row.get("id") or row["name"]


def unique_ids(checks: list) -> list[str]:
    """The ids of `checks`, refusing a check without one and an id used twice."""
    ids = [(c if isinstance(c, dict) else asdict(c)).get("id") for c in checks]
    missing = [c if isinstance(c, dict) else asdict(c) for c, i in zip(checks, ids) if not i]
    if missing:
        raise ValueError(f"check {missing[0]['name']!r} has no id")
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ValueError(f"check id(s) used twice: {', '.join(twice)}")
    return ids


def reproduced(checks: list) -> bool:
    """The one definition: a claim reproduces when it has claim checks and every one passes.
    Takes `Check`s or their records (dicts)."""
    rows = [c if isinstance(c, dict) else asdict(c) for c in checks]
    claims = [c for c in rows if c["kind"] == "claim"]
    return bool(claims) and all(c["passed"] for c in claims)


def against_paper(ours: tuple[float, float], paper: tuple[float, float],
                  lower_bound: bool = False) -> str:
    """Our interval [low, high] beside the paper's (a single number: low == high), in words:
    "consistent" (they overlap), "below" or "above". With `lower_bound`, ours says only "at least
    low": above if that exceeds the paper's high end, else "inconclusive (at least <low>)", since
    a lower bound cannot be below anything."""
    (low, high), (p_low, p_high) = ours, paper
    if lower_bound:
        return "above" if low > p_high else f"inconclusive (at least {low:.3g})"
    return "below" if high < p_low else "above" if low > p_high else "consistent"


def word(check: dict) -> str:
    """PASS, FAIL, INCONCLUSIVE or REPORT."""
    if check["kind"] == "report":
        return "REPORT"
    return "PASS" if check["passed"] else "INCONCLUSIVE" if check.get("inconclusive") else "FAIL"


def inconclusive_count(checks: list) -> int:
    """How many claim checks the run could not test."""
    rows = [c if isinstance(c, dict) else asdict(c) for c in checks]
    return sum(bool(c.get("inconclusive")) for c in rows if c["kind"] == "claim")


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


def _wrap(text: str, first: str, rest: str) -> str:
    return textwrap.fill(text, WIDTH, initial_indent=first, subsequent_indent=rest,
                         break_on_hyphens=False)


class ChapterRun:
    """The spec, seed and clock of one execution of a chapter."""

    def __init__(self, spec: RunSpec):
        self.spec = spec
        # The `paper` preset asks for what the paper used; where the MNIST split at hand holds
        # fewer digits, the run uses the most it can and records that (`data_limits`).
        self.params, self.data_limits = fit_to_mnist_split(spec)
        self.seed = spec.seed
        self.chapter = spec.chapter
        self.checks: list[Check] | None = None
        # The run cache's tally is per process: this execution's part of it goes in the record,
        # since a recorded duration means little without it.
        self._cache_at_start = dict(training.CACHE_STATS)
        self._cost_at_start = cost_snapshot()
        self.started = time.perf_counter()
        seed_everything(self.seed)

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def paper(self) -> dict:
        """The paper's numbers this chapter compares with, from its `chapter.yaml`'s `paper:`
        block: {key: PaperNumber(value, band, where, what)}."""
        return get_chapter(self.chapter).paper

    def caption(self) -> str:
        return f"preset {self.label}, seed {self.seed}"

    def verdict(self, checks: list[Check]) -> bool:
        """Print one line per check and the overall verdict; returns whether the claim reproduced."""
        self.checks = list(checks)
        print(_wrap(get_chapter(self.chapter).claim, f"Claim ({self.chapter}): ", "  "))
        for c in self.checks:
            print(_wrap(c.name, f"{word(asdict(c)):6s} ", " " * 7))
            # A list of items prints as its count: nbval compares these words on any machine.
            print(_wrap(format_value(counted(c.ours)), "       ours: ", " " * 13))
            print(_wrap(format_value(counted(c.paper)), "       paper: ", " " * 14))
            if c.diagnosis:
                print(_wrap(c.diagnosis, "       why: ", " " * 12))
        claims = [c for c in self.checks if c.kind == "claim"]
        ok, untested = reproduced(self.checks), inconclusive_count(self.checks)
        print(_wrap(f"{'REPRODUCED' if ok else 'NOT REPRODUCED'} ({sum(bool(c.passed) for c in claims)}"
                    f"/{len(claims)} claim checks pass"
                    + (f"; {untested} inconclusive" if untested else "") + ")",
                    f"Verdict at preset {self.label}: ", "  "))
        return ok

    def record(self) -> dict:
        """The results record: the spec as run (preset, overrides, every parameter), the checks
        and the verdict, and what the numbers depend on besides the parameters."""
        if self.checks is None:
            raise RuntimeError("call run.verdict(checks) before run.save()")
        ch = get_chapter(self.chapter)
        duration = round(time.perf_counter() - self.started, 1)
        return {
            "chapter": self.chapter, "title": ch.title, "claim": ch.claim,
            "preset": self.spec.preset, "overrides": self.spec.overrides,
            "reproduced": reproduced(self.checks),
            "checks": [asdict(c) for c in self.checks],
            "seed": self.seed,
            "device": describe_device(),
            "duration_s": duration,
            # where that time went: training steps, evaluations, each timed measure, "other"
            "cost_s": cost_since(self._cost_at_start, duration),
            # training runs reused from the run cache vs computed in this execution
            "runs": {k: training.CACHE_STATS[k] - self._cache_at_start.get(k, 0)
                     for k in ("reused", "computed")},
            **provenance(),  # git_commit, dirty, torch, cpu_capability or gpu
            **sent_commit(),
            "params": self.params,
            **({"data_limits": self.data_limits} if self.data_limits else {}),
            **({"mnist_source": mnist_source_label()}
               if "mnist" in ch.get("datasets", ()) else {}),
        }

    def save(self) -> str:
        """Write `<results dir>/<chapter>.json` (atomically) and return its path."""
        record = self.record()
        path = results_dir(self.chapter) / f"{self.chapter}.json"
        atomic_write(path, json.dumps(record, indent=2) + "\n")
        cached = "training runs: {reused} reused from the cache, {computed} computed".format(**record["runs"])
        shown = os.environ.get(RESULTS_SHOWN_ENV)
        shown = display_path(path) if shown is None else shown
        if shown:  # a published chapter ("") names no file and no timing: its page shows the
            # result; how it was made (time, device, cache) is in the record and the page's end
            print(f"{record['duration_s']} s on {record['device']} ({cached}).")
            print(f"Verdict written to {shown}.")
        _display_checks(record["checks"])
        return str(path)


def mnist_source_label() -> str:
    """The MNIST source this process trains on, in the loader's words (`data.SOURCE_LABELS`)."""
    from .data import SOURCE_LABELS, mnist_source
    return SOURCE_LABELS[mnist_source()]


COMMIT_ENV = "REPLICATE_GIT_COMMIT"


def sent_commit() -> dict:
    """On a machine that was sent a copy of the project without its git history (a borrowed GPU
    machine), `git_commit` reads "unknown"; the sender, which checked the copy against its commit
    first, names that commit in $REPLICATE_GIT_COMMIT. Used only where git cannot answer, and the
    record says where the commit came from."""
    sent = os.environ.get(COMMIT_ENV, "").strip()
    if not sent or git_commit() != "unknown":
        return {}
    return {"git_commit": sent, "dirty": sent.endswith("+dirty"), "git_commit_from": COMMIT_ENV}


def fit_to_mnist_split(spec: RunSpec) -> tuple[dict, dict]:
    """(params, limits): the run's parameters, with every MNIST count that the `paper` preset asks
    for and the training digits at hand cannot supply (`data_needs` in chapter.yaml) lowered to
    the most they can, and what was lowered: {name: {"asked", "used", "why"}}. Only the `paper`
    preset's own values are lowered: a count given with -p, or a count at another preset, is
    refused before the run starts (`execute.check_ready`)."""
    ch = get_chapter(spec.chapter)
    needs = {k: v for k, v in ch.get("data_needs", {}).items() if k in ("n_train", "n_per_class")}
    params = dict(spec.params)
    if spec.preset != "paper" or "mnist" not in ch.get("datasets", ()) or not needs:
        return params, {}
    from .data import SOURCE_WHERE, training_labels
    labels, source = training_labels(download=False)
    classes = tuple(ch.get("data_needs", {}).get("classes", range(10)))
    room = {"n_train": len(labels), "n_per_class": min(int((labels == c).sum()) for c in classes)}
    limits = {}
    for need, name in needs.items():
        if name in spec.overrides or params[name] <= room[need]:
            continue
        where = SOURCE_WHERE[source]
        limits[name] = {"asked": params[name], "used": room[need],
                        "why": f"{where} holds {room[need]}"
                               + (" of the scarcest digit" if need == "n_per_class" else " digits")}
        params[name] = room[need]
    for name, limit in limits.items():
        print(_wrap(f"{name}: the paper's {limit['asked']} lowered to {limit['used']} "
                    f"({limit['why']})", "data: ", "  "))
    return params, limits


def _display_checks(checks: list[dict]) -> None:
    """The checks as a coloured table where a notebook front end can show HTML."""
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display
    except ImportError:
        return
    if get_ipython() is not None:
        display(HTML(checks_table_html(checks)))


BADGE = {"PASS": "#1b6e37", "FAIL": "#b3261e", "INCONCLUSIVE": "#8a5300", "REPORT": "#4a5a6a"}


def badge(text: str) -> str:
    return (f'<span class="verdict-word" style="background:{BADGE[text]};color:#fff;'
            f'padding:1px 6px;border-radius:3px;font-weight:600;font-size:0.85em">{text}</span>')


def checks_table_html(checks: list[dict]) -> str:
    """The checks of one run as an HTML table, PASS / FAIL / REPORT in words and colour."""
    import html

    cell = lambda value: f"<td>{html.escape(value)}</td>"  # noqa: E731
    def check_cell(c: dict) -> str:
        why = f"<br><em>why: {html.escape(c['diagnosis'])}</em>" if c.get("diagnosis") else ""
        return f"<td>{html.escape(c['name'])}{why}</td>"

    rows = "".join(f"<tr><td>{badge(word(c))}</td>{check_cell(c)}{cell(format_value(c['ours']))}"
                   f"{cell(format_value(c['paper']))}</tr>" for c in checks)
    return ('<table class="verdict-checks" style="font-size:0.9em;width:100%">'
            '<thead><tr><th>Result</th><th style="width:46%">Check</th><th>Ours</th>'
            f"<th>Paper</th></tr></thead><tbody>{rows}</tbody></table>")


def start_chapter(chapter: str, spec: dict | None = None) -> ChapterRun:
    """Resolve the notebook's `spec` parameter ({"preset": ..., "overrides": {...}}), seed
    everything and print the setup."""
    spec = dict(spec or {})
    unknown = sorted(set(spec) - {"preset", "overrides"})
    if unknown:
        raise ValueError(f"spec takes 'preset' and 'overrides'; got {', '.join(unknown)}")
    run = ChapterRun(RunSpec.make(chapter, spec.get("preset", "cpu"), spec.get("overrides")))
    print(_wrap(f"{get_chapter(chapter).title}: preset {run.label}, seed {run.seed}, "
                f"device {describe_device()}", "", "  "))
    print(_wrap(", ".join(f"{k}={format_value(v)}" for k, v in run.params.items()), "parameters: ", "  "))
    return run
