"""What `validate` compares between a re-executed verdict and the published one.

nbval compares the verdict cell's text with its numbers masked (`nbval_sanitize.cfg`): every
PASS/FAIL/REPORT word, check name and the overall verdict must be the same. The numbers are
compared here, check by check, from the two results files: `kind` and `passed` exactly, strings
exactly, and every number within a tolerance, by default

    |ours - published| <= max(REL * max(|ours|, |published|), ABS),  REL = 5%, ABS = 1e-3,

i.e. relative 5% or absolute 0.001, whichever is looser. A chapter can set its own in its
`chapter.yaml`:

    tolerance:
      rel: 0.1                  # the whole chapter
      abs: 0.01
      checks:                   # per check, by name
        "loss at the end": {rel: 0.5}
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import yaml

from ..runtime import PRESETS_DIR

REL, ABS = 0.05, 1e-3


@dataclass
class Tolerance:
    rel: float = REL
    abs: float = ABS

    def allows(self, a: float, b: float) -> bool:
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if math.isinf(a) or math.isinf(b):
            return a == b
        return abs(a - b) <= max(self.rel * max(abs(a), abs(b)), self.abs)


@dataclass
class Difference:
    check: str
    where: str          # e.g. "ours.loss" or "passed"
    published: Any
    now: Any
    within: bool        # a number within tolerance (shown, does not fail)

    @property
    def relative(self) -> float | None:
        if isinstance(self.published, (int, float)) and isinstance(self.now, (int, float)):
            scale = max(abs(self.published), abs(self.now))
            return abs(self.now - self.published) / scale if scale else 0.0
        return None


def chapter_tolerances(chapter: str) -> tuple[Tolerance, dict[str, Tolerance]]:
    """The chapter's tolerance and per-check overrides, from `tolerance:` in its chapter.yaml."""
    path = PRESETS_DIR / chapter / "chapter.yaml"
    meta = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
    spec = meta.get("tolerance") or {}
    base = Tolerance(float(spec.get("rel", REL)), float(spec.get("abs", ABS)))
    per_check = {name: Tolerance(float(t.get("rel", base.rel)), float(t.get("abs", base.abs)))
                 for name, t in (spec.get("checks") or {}).items()}
    return base, per_check


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _walk(check: str, where: str, old: Any, new: Any, tol: Tolerance, out: list[Difference]):
    if _is_number(old) and _is_number(new):
        if old != new:
            out.append(Difference(check, where, old, new, tol.allows(float(old), float(new))))
    elif isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            if key not in old or key not in new:
                out.append(Difference(check, f"{where}.{key}", old.get(key, "(absent)"),
                                      new.get(key, "(absent)"), False))
            else:
                _walk(check, f"{where}.{key}", old[key], new[key], tol, out)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            _walk(check, f"{where}[{i}]", a, b, tol, out)
    elif type(old) is not type(new) or old != new:
        out.append(Difference(check, where, old, new, False))


def compare(published: dict, now: dict, tolerance: Tolerance | None = None,
            per_check: dict[str, Tolerance] | None = None) -> list[Difference]:
    """Every difference between two results records' verdicts (see the module's docstring)."""
    tolerance, per_check = tolerance or Tolerance(), per_check or {}
    out: list[Difference] = []
    if published.get("reproduced") != now.get("reproduced"):
        out.append(Difference("(verdict)", "reproduced", published.get("reproduced"),
                              now.get("reproduced"), False))
    old_checks = {c["name"]: c for c in published.get("checks", [])}
    new_checks = {c["name"]: c for c in now.get("checks", [])}
    for name in [*old_checks, *(n for n in new_checks if n not in old_checks)]:
        if name not in new_checks or name not in old_checks:
            out.append(Difference(name, "check", "present" if name in old_checks else "(absent)",
                                  "present" if name in new_checks else "(absent)", False))
            continue
        old, new = old_checks[name], new_checks[name]
        for key in ("kind", "passed"):
            if old.get(key) != new.get(key):
                out.append(Difference(name, key, old.get(key), new.get(key), False))
        tol = per_check.get(name, tolerance)
        for key in ("ours", "paper"):
            _walk(name, key, old.get(key), new.get(key), tol, out)
    return out


def _short(value: Any) -> str:
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 24 else text[:21] + "..."


def table(chapter: str, differences: list[Difference]) -> str:
    """The differences as a plain-text table, beyond-tolerance rows marked DRIFT."""
    if not differences:
        return f"{chapter}: every word and number as published"
    rows = [("", "check", "value", "published", "now", "rel. change")]
    for d in differences:
        rel = d.relative
        rows.append(("ok" if d.within else "DRIFT", d.check[:40], d.where[:28], _short(d.published),
                     _short(d.now), "" if rel is None else f"{rel:.1%}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    beyond = sum(not d.within for d in differences)
    head = (f"{chapter}: {len(differences)} value(s) differ from the published verdict, "
            f"{beyond} beyond tolerance")
    return "\n".join([head, *("  " + line for line in lines)])
