"""The book's scoreboard page, written from the results files the chapters leave behind."""
from __future__ import annotations

import json
from pathlib import Path

from . import presets
from .book_pages import _text, load_json, seeds_summary

HEADER = """# Scoreboard

Every claim of the book, whether it reproduced, and at which preset. Each row comes from the
results file its chapter wrote when it last ran (`book/results/<chapter>.json`), so this page
cannot disagree with the chapters. A claim counts as *reproduced* when every one of its `claim`
checks passes; `report` lines are statements of the papers that we measure and show without a
pass/fail, discrepancies with the papers among them. The column *Across seeds* counts the seeds
(the published run among them) whose whole verdict reproduced; a claim is *robust* when each of
its claim checks passes in at least 80% of the seeds. {doc}`judging` says, chapter by chapter,
how each claim is judged.

"""


def _cell(value) -> str:
    """A value in a Markdown table cell: formatted as on the chapter pages, pipes escaped."""
    return _text(value).replace("|", "\\|").replace("\n", " ")


def _runtime(record: dict) -> str:
    """The recorded duration, flagged when training runs came from the run cache."""
    text = f"{record['duration_s']:.0f} s"
    runs = record.get("runs") or {}
    if runs.get("reused"):
        text += f" ({runs['reused']} of {runs['reused'] + runs.get('computed', 0)} runs from the cache)"
    return text


def load_results(results_dir: Path) -> list[dict]:
    """The published verdicts (`<chapter>.json`; the `.seeds.json` files are read separately)."""
    results = []
    for path in sorted(Path(results_dir).glob("*.json")):
        if not path.name.endswith(".seeds.json"):
            with open(path) as fh:
                results.append(json.load(fh))
    return results


def load_seeds(results_dir: Path) -> dict[str, dict]:
    found = {}
    for ch in presets.chapters():
        record = load_json(Path(results_dir) / f"{ch}.seeds.json")
        if record:
            found[ch] = record
    return found


def provenance(results: list[dict]) -> str:
    """Which code produced the published chapters: one commit, or a warning naming them all."""
    commits = sorted({r["git_commit"] for r in results})
    if not commits:
        return ""
    if len(commits) == 1 and not commits[0].endswith("+dirty"):
        return f"All chapters were executed from commit `{commits[0]}`.\n"
    return ("**The chapters were executed from different or uncommitted code:** "
            + ", ".join(f"`{c}`" for c in commits) + ". Re-run them from one clean commit.\n")


def render(results: list[dict], seeds: dict[str, dict] | None = None) -> str:
    seeds = seeds or {}
    by_name = {r["chapter"]: r for r in results}
    lines = [HEADER, provenance(results),
             "| Chapter | Claim | Preset | Verdict | Claim checks | Across seeds | Runtime | Device |",
             "|---|---|---|---|---|---|---|---|"]
    for ch in presets.chapters().values():
        r = by_name.get(ch.name)
        if r is None:
            lines.append(f"| {ch.title} | {_cell(ch.claim)} | | not yet run | | | | |")
            continue
        claims = [c for c in r["checks"] if c["kind"] == "claim"]
        passed = sum(bool(c["passed"]) for c in claims)
        verdict = "**reproduced**" if r["reproduced"] else "**not reproduced**"
        lines.append(f"| {{doc}}`{ch.title} <claims/{ch.name}>` | {_cell(r['claim'])} | "
                     f"{_cell(r['preset'])} | {verdict} | {passed}/{len(claims)} | "
                     f"{seeds_summary(seeds.get(ch.name))} | {_runtime(r)} | {_cell(r['device'])} |")
    for r in results:
        lines += ["", f"## {r['title']}", "",
                  f"Preset `{r['preset']}`, seed {r['seed']}, commit `{r['git_commit']}`.", "",
                  "| Check | Kind | Result | Ours | Paper |", "|---|---|---|---|---|"]
        for c in r["checks"]:
            result = "—" if c["kind"] == "report" else ("PASS" if c["passed"] else "FAIL")
            lines.append(f"| {_cell(c['name'])} | {c['kind']} | {result} | {_cell(c['ours'])} | "
                         f"{_cell(c['paper'])} |")
    return "\n".join(lines) + "\n"


def write_toc(claims_dir: Path, toc: Path) -> Path:
    """`_toc.yml` with every chapter that has an executed notebook, in book order."""
    lines = ["# Written by `python -m replicate build` from the chapters in book/claims/.",
             "format: jb-book", "root: book/intro", "parts:",
             "  - caption: Results", "    chapters:", "      - file: book/scoreboard"]
    executed = [ch for ch in presets.chapters() if (Path(claims_dir) / f"{ch}.ipynb").exists()]
    if executed:
        lines += ["  - caption: Claims", "    chapters:"]
        lines += [f"      - file: book/claims/{ch}" for ch in executed]
    lines += ["  - caption: Appendix", "    chapters:", "      - file: book/judging"]
    if (Path(toc).parent / "benchmarks.json").exists():
        lines.append("      - file: book/benchmarks")
    lines.append("      - file: book/references")
    toc.write_text("\n".join(lines) + "\n")
    return toc


def write_scoreboard(results_dir: Path, page: Path) -> Path:
    page.write_text(render(load_results(results_dir), load_seeds(results_dir)))
    return page


JUDGING_HEADER = """# How each claim is judged

For every chapter: the setup we run, how each quantity is measured, each acceptance check with its
threshold, and what we changed from the paper and why. A chapter's verdict is *reproduced* when
all of its claim checks pass; report lines are measured and shown without a pass/fail.
"""


def judging_label(chapter: str, judging_dir: Path) -> str | None:
    return f"judging-{chapter}" if (Path(judging_dir) / f"{chapter}.md").exists() else None


def write_judging(judging_dir: Path, page: Path) -> Path:
    """`judging.md`: the chapters' `judging/<chapter>.md` sections, in book order."""
    parts = [JUDGING_HEADER]
    for ch in presets.chapters():
        if (Path(judging_dir) / f"{ch}.md").exists():
            parts += ["", f"```{{include}} judging/{ch}.md", "```"]
    page.write_text("\n".join(parts) + "\n")
    return page
