"""The book's scoreboard page, written from the results files the chapters leave behind."""
from __future__ import annotations

import json
from pathlib import Path

from . import presets

HEADER = """# Scoreboard

Every claim of the book, whether it reproduced, and at which preset. Each row comes from the
results file its chapter wrote when it last ran (`book/results/<chapter>.json`), so this page
cannot disagree with the chapters. A claim counts as *reproduced* when every one of its `claim`
checks passes; `report` lines are statements of the papers that we measure and show without a
pass/fail, discrepancies with the papers among them.

"""


def _cell(value) -> str:
    if isinstance(value, float):
        text = f"{value:.3g}"
    elif isinstance(value, dict):
        text = "; ".join(f"{k}: {_cell(v)}" for k, v in value.items())
    elif isinstance(value, list):
        text = ", ".join(_cell(v) for v in value)
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _runtime(record: dict) -> str:
    """The recorded duration, flagged when training runs came from the run cache."""
    text = f"{record['duration_s']:.0f} s"
    runs = record.get("runs") or {}
    if runs.get("reused"):
        text += f" ({runs['reused']} of {runs['reused'] + runs.get('computed', 0)} runs from the cache)"
    return text


def load_results(results_dir: Path) -> list[dict]:
    results = []
    for path in sorted(Path(results_dir).glob("*.json")):
        with open(path) as fh:
            results.append(json.load(fh))
    return results


def render(results: list[dict]) -> str:
    by_name = {r["chapter"]: r for r in results}
    lines = [HEADER, "| Chapter | Claim | Preset | Verdict | Claim checks | Runtime | Device |",
             "|---|---|---|---|---|---|---|"]
    for ch in presets.chapters().values():
        r = by_name.get(ch.name)
        if r is None:
            lines.append(f"| {ch.title} | {_cell(ch.claim)} | | not yet run | | | |")
            continue
        claims = [c for c in r["checks"] if c["kind"] == "claim"]
        passed = sum(bool(c["passed"]) for c in claims)
        verdict = "**reproduced**" if r["reproduced"] else "**not reproduced**"
        lines.append(f"| {{doc}}`{ch.title} <claims/{ch.name}>` | {_cell(r['claim'])} | "
                     f"{_cell(r['preset'])} | {verdict} | {passed}/{len(claims)} | "
                     f"{_runtime(r)} | {_cell(r['device'])} |")
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
    lines += ["  - caption: Appendix", "    chapters:"]
    if (Path(toc).parent / "benchmarks.json").exists():
        lines.append("      - file: book/benchmarks")
    lines.append("      - file: book/references")
    toc.write_text("\n".join(lines) + "\n")
    return toc


def write_scoreboard(results_dir: Path, page: Path) -> Path:
    page.write_text(render(load_results(results_dir)))
    return page
