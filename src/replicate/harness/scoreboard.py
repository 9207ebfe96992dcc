"""The pages `build` writes from the results files: scoreboard, table of contents, judging,
teaching, benchmarks; and every chapter's verdict box. Their prose is in `page_texts.yaml`."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from ..config import chapters, format_value
from ..runtime import BOOK_DIR
from ..verdict import reproduced, word
from .book_pages import (TEXTS, claim_counts, preset_label, refresh_chapter_page, runtime_text,
                         seeds_summary)
from .seeds import load_seeds

JUDGING_DIR, BENCHMARKS_FILE = BOOK_DIR / "judging", BOOK_DIR / "benchmarks.json"  # from `bench`


def _cell(value) -> str:
    """A value in a Markdown table cell: formatted as on the chapter pages, pipes escaped."""
    return format_value(value).replace("|", "\\|").replace("\n", " ")


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def load_results(results_dir: Path) -> list[dict]:
    """The published verdicts (`<chapter>.json`; the `.seeds.json` files are read separately)."""
    return [_load(path) for path in sorted(Path(results_dir).glob("*.json"))
            if not path.name.endswith(".seeds.json")]


def provenance(results: list[dict]) -> str:
    """Which code produced the published chapters: one commit, or a warning naming them all."""
    commits = sorted({r["git_commit"] for r in results})
    if len(commits) == 1 and not commits[0].endswith("+dirty"):
        return f"All chapters were executed from commit `{commits[0]}`.\n"
    return ("**The chapters were executed from different or uncommitted code:** "
            + ", ".join(f"`{c}`" for c in commits) + ". Re-run them from one clean commit.\n"
            ) if commits else ""


def render(results: list[dict], seeds: dict[str, dict] | None = None) -> str:
    """The scoreboard: one row per chapter in book order, then each published run's checks."""
    by_name, seeds = {r["chapter"]: r for r in results}, seeds or {}
    lines = [TEXTS["header"], provenance(results), "| Chapter | Claim | Preset | Verdict | Claim "
             "checks | Across seeds | Runtime | Device |", "|---|---|---|---|---|---|---|---|"]
    for ch in chapters().values():
        if (r := by_name.get(ch.name)) is None:
            lines.append(f"| {ch.title} | {_cell(ch.claim)} | | not yet run | | | | |")
            continue
        verdict = "**reproduced**" if reproduced(r["checks"]) else "**not reproduced**"
        passed, total = claim_counts(r)
        lines.append(f"| {{doc}}`{ch.title} <claims/{ch.name}>` | {_cell(r['claim'])} | "
                     f"{_cell(preset_label(r))} | {verdict} | {passed}/{total} | "
                     f"{seeds_summary(seeds.get(ch.name))} | {runtime_text(r)} | "
                     f"{_cell(r['device'])} |")
    for r in results:
        lines += ["", f"## {r['title']}", "",
                  f"Preset `{preset_label(r)}`, seed {r['seed']}, commit `{r['git_commit']}`.", "",
                  "| Check | Kind | Result | Ours | Paper |", "|---|---|---|---|---|"]
        for c in r["checks"]:
            result = "—" if c["kind"] == "report" else word(c)
            lines.append(f"| {_cell(c['name'])} | {c['kind']} | {result} | {_cell(c['ours'])} | "
                         f"{_cell(c['paper'])} |")
    return "\n".join(lines) + "\n"


def write_toc(claims_dir: Path, toc: Path) -> Path:
    """`_toc.yml` with every chapter that has an executed notebook, in book order."""
    lines = ["# Written by `python -m replicate build` from the chapters in book/claims/.",
             "format: jb-book", "root: book/intro", "parts:",
             "  - caption: Results", "    chapters:", "      - file: book/scoreboard"]
    if executed := [ch for ch in chapters() if (Path(claims_dir) / f"{ch}.ipynb").exists()]:
        lines += ["  - caption: Claims", "    chapters:",
                  *(f"      - file: book/claims/{ch}" for ch in executed)]
    if (Path(toc).parent / "teaching.md").exists():
        lines += ["  - caption: Teaching", "    chapters:", "      - file: book/teaching"]
    lines += ["  - caption: Appendix", "    chapters:", "      - file: book/judging"]
    if (Path(toc).parent / "benchmarks.json").exists():
        lines.append("      - file: book/benchmarks")
    lines.append("      - file: book/references")
    toc.write_text("\n".join(lines) + "\n")
    return toc


def write_scoreboard(results_dir: Path, page: Path) -> Path:
    """`scoreboard.md`, with the across-seeds column from the chapters' `.seeds.json` files."""
    found = {ch: load_seeds(ch, results_dir) for ch in chapters()}
    page.write_text(render(load_results(results_dir), {ch: r for ch, r in found.items() if r}))
    return page


def write_judging(judging_dir: Path, page: Path) -> Path:
    """`judging.md`: the chapters' `judging/<chapter>.md` sections, in book order."""
    includes = [f"```{{include}} judging/{ch}.md\n```" for ch in chapters()
                if (Path(judging_dir) / f"{ch}.md").exists()]
    page.write_text("\n\n".join([TEXTS["judging_header"], *includes]) + "\n")
    return page


def exercise_labels(notebook: Path) -> list[tuple[str, str]]:
    """(label, title) of each exercise in a chapter notebook's markdown, in order."""
    found = []
    for cell in json.loads(Path(notebook).read_text())["cells"]:
        text = "".join(cell["source"]) if cell["cell_type"] == "markdown" else ""
        # The directive's title, then its `:option:` lines, among which the label.
        for m in re.finditer(r"^```\{exercise\}[ \t]*(.*)\n((?::[^\n]*\n)*)", text, re.M):
            if label := re.search(r"^:label:\s*(\S+)", m.group(2), re.M):
                found.append((label.group(1), m.group(1).strip()))
    return found


def render_teaching(results_dir: Path, smoke_dir: Path, claims_dir: Path) -> str:
    """The teaching page: runtimes from the results files, exercises from the executed chapters
    (the pages the book renders, so that every link has a target)."""
    known, lines, exercises = chapters(), [TEXTS["teaching_header"]], {}
    lines += [f"{i}. {{doc}}`{known[c['chapter']].title} <claims/{c['chapter']}>`: {c['why']}"
              for i, c in enumerate(TEXTS["course_order"], 1) if c["chapter"] in known]
    lines += ["", "\n\n".join(TEXTS["teaching_costs"]), "",
              "| Chapter | `smoke` | `cpu` | Exercises |", "|---|---|---|---|"]
    for name, ch in known.items():
        notebook = Path(claims_dir) / f"{name}.ipynb"
        exercises[name] = exercise_labels(notebook) if notebook.exists() else []
        runs = [_load(Path(folder) / f"{name}.json") for folder in (smoke_dir, results_dir)]
        times = " | ".join("not yet run" if r is None else runtime_text(r) for r in runs)
        lines.append(f"| {{doc}}`{ch.title} <claims/{name}>` | {times} | "
                     f"{len(exercises[name]) or '—'} |")
    listed = [f"- {ch.title.split(' · ')[0]}: " + "; ".join(
        f"{{ref}}`{title or label} <{label}>`" for label, title in exercises[name]) + "."
        for name, ch in known.items() if exercises[name]]
    if listed:
        lines += ["", TEXTS["teaching_exercises"], *listed]
    lines += ["", TEXTS["teaching_lab"]]
    return "\n".join(lines) + "\n"


def write_teaching(results_dir: Path, page: Path, claims_dir: Path | None = None) -> Path:
    """`teaching.md`: runtimes from `results/` and `results/smoke/`, exercises from the
    executed chapters in `claims_dir` (default: `claims/` next to the page)."""
    claims_dir = Path(claims_dir or Path(page).parent / "claims")
    page.write_text(render_teaching(results_dir, Path(results_dir) / "smoke", claims_dir))
    return page


def refresh_pages(results_dir: Path, claims_dir: Path = BOOK_DIR / "claims") -> int:
    """Rewrite every executed chapter's verdict box and across-seeds section from its results."""
    pages = [(ch, claims_dir / f"{ch}.ipynb", _load(results_dir / f"{ch}.json"))
             for ch in chapters()]
    return sum(refresh_chapter_page(notebook, record, load_seeds(ch, results_dir), JUDGING_DIR)
               for ch, notebook, record in pages if notebook.exists() and record)


def write_pages(results_dir: Path) -> int:
    """Every page `build` writes before Jupyter Book runs. Returns 0."""
    write_teaching(results_dir, BOOK_DIR / "teaching.md")  # before the toc, which lists it
    write_toc(BOOK_DIR / "claims", BOOK_DIR / "_toc.yml")
    write_judging(JUDGING_DIR, BOOK_DIR / "judging.md")
    refresh_pages(results_dir)
    page = write_scoreboard(results_dir, BOOK_DIR / "scoreboard.md")
    if (mixed := provenance(load_results(results_dir))).startswith("**"):
        print("warning: " + mixed.replace("**", "").strip(), file=sys.stderr)
    if BENCHMARKS_FILE.exists():
        record = with_current_chapters(_load(BENCHMARKS_FILE), results_dir)
        (BOOK_DIR / "benchmarks.md").write_text(render_page(record))
    print(f"scoreboard and table of contents written to {page.parent}")
    return 0


def chapter_rows(results_dir: Path) -> list[dict]:
    """End-to-end chapter times, as the chapters themselves recorded them at their last run."""
    def row(figure, minutes, target, met=None) -> dict:
        return {"figure": figure, "ours": minutes, "unit": "min", "seed": None, "ratio": None,
                "target": target, "met": met}
    rows, total = [], 0.0
    for record in load_results(results_dir):
        total += record["duration_s"]
        reused = (record.get("runs") or {}).get("reused", 0)
        note = f" ({reused} runs reused from the cache)" if reused else ""
        rows.append(row(f"chapter {record['chapter']} at preset {preset_label(record)}{note}",
                        record["duration_s"] / 60, "<= 12 min"))
    if rows:
        rows.append(row("whole book, all chapters", total / 60, "<= 45 min", total <= 45 * 60))
    return rows


def with_current_chapters(record: dict, results_dir: Path) -> dict:
    """`bench`'s rows, then the chapters' times read now (a re-run chapter shows its new time)."""
    measured = [r for r in record["rows"] if r.get("benchmark")]
    return {**record, "rows": measured + chapter_rows(results_dir)}


def render_page(record: dict) -> str:
    """`benchmarks.md` from a benchmarks record (see `with_current_chapters`)."""
    def num(v):
        return "" if v is None else f"{v:.3g}"
    lines = [TEXTS["benchmarks_header"].format(threads=record["threads"])]  # to the table's head
    for r in record["rows"]:
        met = "" if r["met"] is None else ("yes" if r["met"] else "**no**")
        lines.append(f"| {r['figure']} | {num(r['ours'])} | {r['unit']} | {num(r['seed'])} | "
                     f"{num(r['ratio'])} | {r['target']} | {met} | "
                     f"{record.get('measured', {}).get(r.get('benchmark'), '')} |")
    return "\n".join(lines) + "\n"
