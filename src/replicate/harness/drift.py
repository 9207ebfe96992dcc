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
from ..verdict import check_key, word
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


def _seed_checks(chapter: str, results_dir=None, sweeps_dir=None, preset: str = "cpu"):
    """Every check of every seed of the published group at `preset`, each with its id (a seed
    written before ids takes the id of the same name in the other seeds)."""
    runs, _, _ = collect_runs(chapter, preset, {}, results_dir or RESULTS_DIR,
                              sweeps_dir or SWEEPS_DIR)
    ids = ids_by_name(c for run in runs.values() for c in run["record"].get("checks", []))
    for run in runs.values():
        yield from with_ids(run["record"].get("checks", []), ids)


def seed_spread(chapter: str, results_dir=None, sweeps_dir=None,
                preset: str = "cpu") -> dict[tuple[str, str], list]:
    """{(check key, path): the value at every seed of the published group at `preset` (the
    book's, or the paper preset's)} from its published run and sweeps, for `seeds: true`
    chapters."""
    spread: dict[tuple[str, str], list] = {}
    for check in _seed_checks(chapter, results_dir, sweeps_dir, preset):
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


def seed_words(chapter: str, results_dir=None, sweeps_dir=None,
               preset: str = "cpu") -> dict[str, set[str]]:
    """{check key: the words (PASS, FAIL, ...) it reads across the seeds of the published group}."""
    words: dict[str, set[str]] = {}
    for check in _seed_checks(chapter, results_dir, sweeps_dir, preset):
        words.setdefault(check_key(check), set()).add(word(check))
    return words


def compare(published: dict, now: dict, tolerance: Tolerance | None = None,
            per_check: dict[str, Tolerance] | None = None,
            spread: dict[tuple[str, str], list] | None = None,
            words: dict[str, set[str]] | None = None) -> list[Difference]:
    """Every difference between two results records' verdicts (see the module's docstring);
    `per_check`: tolerances by check id (or name); `spread`: the seeds' values of each number
    (`seed_spread`), where the chapter accepts them; `words`: each check's words across the
    seeds (`seed_words`): a check whose word differs from the book where the seeds read both
    words is within the seeds' spread (a fragile check, not a changed result), and so is the
    verdict when only such checks moved it."""
    out = _compare(published, now, tolerance, per_check, spread)
    if not words:
        return out
    old_checks = {check_key(c): c for c in published.get("checks", [])}
    new_checks = {check_key(c): c for c in now.get("checks", [])}
    by_name = {c["name"]: key for key, c in {**old_checks, **new_checks}.items()}
    for d in out:
        key = by_name.get(d.check)
        if (d.where in ("passed", "inconclusive") and key in old_checks and key in new_checks
                and {word(old_checks[key]), word(new_checks[key])} <= words.get(key, set())):
            d.within = d.by_seeds = True
    flips = [d for d in out if d.where in ("passed", "inconclusive")]
    for d in out:
        if d.where == "reproduced" and flips and all(f.by_seeds for f in flips):
            d.within = d.by_seeds = True
    return out


def _compare(published: dict, now: dict, tolerance: Tolerance | None = None,
             per_check: dict[str, Tolerance] | None = None,
             spread: dict[tuple[str, str], list] | None = None) -> list[Difference]:
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


def table(chapter: str, differences: list[Difference], words_same: bool = True) -> str:
    """The differences as a plain-text table, beyond-tolerance rows marked DRIFT; its last line
    says whether the chapter is as published (nbval's word comparison counts: `words_same`)."""
    last = ([] if words_same else
            [f"{chapter}: its verdict's words differ from the book (nbval's report above)"])
    if not differences:
        return "\n".join(last or [f"{chapter}: every word and number as published"])
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
    note = ([f"  seeds: {by_seeds} value(s) beyond the tolerance but where one more seed's would "
             f"fall (95% prediction interval over the book's seeds), or a check's word that its "
             f"seeds read both ways"] if by_seeds else [])
    beyond = sum(not d.within for d in differences)
    head = f"{chapter}: {len(differences)} value(s) differ from the published verdict"
    fragile = sum(d.by_seeds for d in differences if d.where in ("passed", "inconclusive"))
    verdict = (last[0] if last else f"{chapter}: {beyond} value(s) beyond tolerance" if beyond
               else f"{chapter}: as published within its seeds' spread ({fragile} check word(s) "
               "that its seeds read both ways)" if fragile
               else f"{chapter}: every word and number as published, within tolerance")
    return "\n".join([head, *lines, *note, verdict])


# --- The published page against its own record -------------------------------------------------
# nbval masks the numbers of the verdict cell; the record's numbers are compared above. What the
# reader sees is the page: each check's lines as the page prints them must be the ones its own
# results file renders (a page edited by hand, or a notebook from another publication, differs).

def printed_check(check: dict) -> str:
    """The lines `ChapterRun.verdict` prints for one check of a record."""
    from ..config import counted, format_value
    from ..verdict import _wrap, word

    lines = [_wrap(check["name"], f"{word(check):6s} ", " " * 7),
             _wrap(format_value(counted(check["ours"])), "       ours: ", " " * 13),
             _wrap(format_value(counted(check["paper"])), "       paper: ", " " * 14)]
    if check.get("diagnosis"):
        lines.append(_wrap(check["diagnosis"], "       why: ", " " * 12))
    return "\n".join(lines)


def verdict_text(notebook: dict) -> str:
    """The printed text of the page's verdict cell (the one nbval checks)."""
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "code" and "NBVAL_CHECK_OUTPUT" in "".join(cell["source"]):
            return "".join("".join(out.get("text", "")) for out in cell.get("outputs", [])
                           if out.get("output_type") == "stream")
    return ""


def page_differences(notebook: dict, record: dict) -> list[Difference]:
    """Each check whose lines on the page are not what the record renders, as a DRIFT row with
    the page's own lines for that check (or "(absent)")."""
    text, out = verdict_text(notebook), []
    blocks = _page_blocks(text)
    for check in record.get("checks", []):
        expected = printed_check(check)
        if expected + "\n" in text + "\n":
            continue
        first = expected.splitlines()[0]
        shown = blocks.get(first, "(absent)")
        out.append(Difference(check["name"], "page vs its results file", " ".join(expected.split()[1:]),
                              " ".join(shown.split()[1:]) or shown, False))
    return out


def _page_blocks(text: str) -> dict[str, str]:
    """The page's check blocks by their first line: a block runs to the next line that starts
    with a verdict word or the overall verdict."""
    import re

    blocks, current = {}, None
    for line in text.splitlines():
        if re.match(r"(PASS|FAIL|REPORT|INCONCLUSIVE)\s", line) or line.startswith(("Verdict", "Claim")):
            current = line
            blocks[current] = line
        elif current is not None:
            blocks[current] += "\n" + line
    return blocks
