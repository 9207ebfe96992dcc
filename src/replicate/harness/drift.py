"""What `validate` compares between a re-executed verdict and the published one.

nbval compares the verdict cell's words with the numbers masked (`nbval_sanitize.cfg`); here the
two results files are compared check by check: `kind`, `passed`, `inconclusive` and strings
exactly (a diagnosis is shown, not compared: its numbers are the run's), numbers
within |ours - published| <= max(REL * max(|ours|, |published|), ABS) (5% or 0.001, whichever is
looser) or what the chapter's `chapter.yaml` sets, for the chapter and then per check by its id
(or its name, for a record written before checks had ids):
`tolerance: {rel: 0.1, abs: 0.01, checks: {"final-loss": {rel: 0.5}}}`.

Checks are matched by their id (`verdict.check_key`). A record written before checks had ids
(an old published notebook re-executed, or an old published verdict beside a new run) takes the
ids of the other record's checks of the same names first. A list of items
(names, pairs: `config.is_item_list`) is compared as its count, within the same tolerance: which
items cross a threshold can change with float noise, what the claim needs is how many.

A chapter whose training diverges with the order of float reductions (`tolerance: {seeds: true}`:
another thread count or CPU makes its long run another draw, not the same run) also accepts a
number that falls where one more seed's would: inside the 95% prediction interval of that number
over the book's seeds (`seeds.prediction_interval`, from five seeds on). The verdict words are
still compared exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..config import chapters, is_item_list
from ..verdict import check_key
from .seeds import RESULTS_DIR, SWEEPS_DIR, collect_runs, ids_by_name, prediction_interval, with_ids

REL, ABS = 0.05, 1e-3


@dataclass
class Tolerance:
    rel: float = REL
    abs: float = ABS

    def allows(self, a: float, b: float) -> bool:
        if not (math.isfinite(a) and math.isfinite(b)):  # nan matches nan only, inf itself only
            return a == b or (math.isnan(a) and math.isnan(b))
        return abs(a - b) <= max(self.rel * max(abs(a), abs(b)), self.abs)


@dataclass
class Difference:
    check: str          # the check's name, as a reader knows it
    where: str          # e.g. "ours.loss" or "passed"
    published: Any
    now: Any
    within: bool        # a number within tolerance (shown, does not fail)
    by_seeds: bool = False  # within only because it lies where one more seed's value would

    @property
    def relative(self) -> float | None:
        if isinstance(self.published, (int, float)) and isinstance(self.now, (int, float)):
            scale = max(abs(self.published), abs(self.now))
            return abs(self.now - self.published) / scale if scale else 0.0
        return None


def uses_seed_spread(chapter: str) -> bool:
    """Whether the chapter's numbers may fall anywhere one more seed's would (`seeds: true`)."""
    ch = chapters().get(chapter) or {}
    return bool((ch.get("tolerance") or {}).get("seeds"))


def flat_numbers(value: Any, where: str) -> dict[str, float]:
    """Every number inside a check's `ours`, by the path `_walk` names it with (`ours.on[0]`)."""
    if isinstance(value, bool):
        return {}
    if isinstance(value, (int, float)):
        return {where: float(value)} if math.isfinite(value) else {}
    if isinstance(value, dict):
        return {k: v for key, item in value.items()
                for k, v in flat_numbers(item, f"{where}.{key}").items()}
    if isinstance(value, list) and not is_item_list(value):
        return {k: v for i, item in enumerate(value)
                for k, v in flat_numbers(item, f"{where}[{i}]").items()}
    return {}


def seed_spread(chapter: str, results_dir=None, sweeps_dir=None,
                preset: str = "cpu") -> dict[tuple[str, str], list]:
    """{(check key, path): the value at every seed of the published group at `preset` (the
    book's, or the paper preset's)} from its published run and sweeps, for `seeds: true`
    chapters; a seed written before ids takes the id of the same name in the other seeds."""
    runs, _, _ = collect_runs(chapter, preset, {}, results_dir or RESULTS_DIR,
                              sweeps_dir or SWEEPS_DIR)
    ids = ids_by_name(c for run in runs.values() for c in run["record"].get("checks", []))
    spread: dict[tuple[str, str], list] = {}
    for run in runs.values():
        for check in with_ids(run["record"].get("checks", []), ids):
            for where, v in flat_numbers(check.get("ours"), "ours").items():
                spread.setdefault((check_key(check), where), []).append(v)
    return spread


def chapter_tolerances(chapter: str) -> tuple[Tolerance, dict[str, Tolerance]]:
    """The chapter's tolerance and per-check overrides, from `tolerance:` in its chapter.yaml,
    keyed as written there: a check's id (its name, for records written before ids)."""
    ch = chapters().get(chapter)
    spec = ch.get("tolerance", {}) if ch else {}
    base = Tolerance(float(spec.get("rel", REL)), float(spec.get("abs", ABS)))
    return base, {key: Tolerance(float(t.get("rel", base.rel)), float(t.get("abs", base.abs)))
                  for key, t in (spec.get("checks") or {}).items()}


def _walk(check: str, where: str, old: Any, new: Any, tol: Tolerance, out: list[Difference],
          spread: dict | None = None, key: str | None = None):
    # `check` names the check in a Difference, `key` (its id) finds its values in `spread`.
    key = key or check
    # Booleans are not numbers here: they fall through to the exact comparison at the end.
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (old, new)):
        if old != new:
            within = tol.allows(float(old), float(new))
            interval = prediction_interval((spread or {}).get((key, where), []))
            by_seeds = (not within and interval is not None and math.isfinite(new)
                        and interval[0] <= new <= interval[1])
            out.append(Difference(check, where, old, new, within or by_seeds, by_seeds))
    elif isinstance(old, dict) and isinstance(new, dict):
        for field in sorted(set(old) | set(new), key=str):
            if field in old and field in new:
                _walk(check, f"{where}.{field}", old[field], new[field], tol, out, spread, key)
            else:
                out.append(Difference(check, f"{where}.{field}", old.get(field, "(absent)"),
                                      new.get(field, "(absent)"), False))
    elif is_item_list(old) and is_item_list(new):
        if len(old) != len(new):
            out.append(Difference(check, f"{where} (count)", len(old), len(new),
                                  tol.allows(len(old), len(new))))
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            _walk(check, f"{where}[{i}]", a, b, tol, out, spread, key)
    elif type(old) is not type(new) or old != new:
        out.append(Difference(check, where, old, new, False))


def compare(published: dict, now: dict, tolerance: Tolerance | None = None,
            per_check: dict[str, Tolerance] | None = None,
            spread: dict[tuple[str, str], list] | None = None) -> list[Difference]:
    """Every difference between two results records' verdicts (see the module's docstring);
    `per_check`: tolerances by check id (or name); `spread`: the seeds' values of each number
    (`seed_spread`), where the chapter accepts them."""
    tolerance, per_check, out = tolerance or Tolerance(), per_check or {}, []
    if published.get("reproduced") != now.get("reproduced"):
        out.append(Difference("(verdict)", "reproduced", published.get("reproduced"),
                              now.get("reproduced"), False))
    old_list, new_list = published.get("checks", []), now.get("checks", [])
    old_checks = {check_key(c): c for c in with_ids(old_list, ids_by_name(new_list))}
    new_checks = {check_key(c): c for c in with_ids(new_list, ids_by_name(old_list))}
    for key in {**old_checks, **new_checks}:  # published order, then the new checks
        old, new = old_checks.get(key), new_checks.get(key)
        name = (old or new)["name"]
        if old is None or new is None:
            out.append(Difference(name, "check", "present" if old else "(absent)",
                                  "present" if new else "(absent)", False))
            continue
        out += [Difference(name, field, old.get(field), new.get(field), False)
                for field in ("name", "kind", "passed") if old.get(field) != new.get(field)]
        # A record from before the INCONCLUSIVE word lacks the flag: it read FAIL, i.e. False.
        if bool(old.get("inconclusive")) != bool(new.get("inconclusive")):
            out.append(Difference(name, "inconclusive", bool(old.get("inconclusive")),
                                  bool(new.get("inconclusive")), False))
        tol = per_check.get(key) or per_check.get(name) or tolerance
        for field in ("ours", "paper"):
            _walk(name, field, old.get(field), new.get(field), tol, out,
                  spread if field == "ours" else None, key)
    return out


def table(chapter: str, differences: list[Difference]) -> str:
    """The differences as a plain-text table, beyond-tolerance rows marked DRIFT."""
    if not differences:
        return f"{chapter}: every word and number as published"
    def short(value: Any) -> str:
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        return text if len(text) <= 24 else text[:21] + "..."
    rows = [("", "check", "value", "published", "now", "rel. change")]
    rows += [("seeds" if d.by_seeds else "ok" if d.within else "DRIFT", d.check[:40],
              d.where[:28], short(d.published), short(d.now),
              "" if d.relative is None else f"{d.relative:.1%}") for d in differences]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    by_seeds = sum(d.by_seeds for d in differences)
    note = ([f"  seeds: beyond the tolerance, but where one more seed's value would fall "
             f"({by_seeds} value(s); 95% prediction interval over the book's seeds)"]
            if by_seeds else [])
    return "\n".join([f"{chapter}: {len(differences)} value(s) differ from the published verdict, "
                      f"{sum(not d.within for d in differences)} beyond tolerance", *lines, *note])
