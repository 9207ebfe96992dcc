"""The book's scoreboard page, written from the results files the chapters leave behind."""
from __future__ import annotations

import json
from pathlib import Path

from . import presets
from .book_pages import _text, load_json, runtime_text, seeds_summary

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


_runtime = runtime_text


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
    if (Path(toc).parent / "teaching.md").exists():
        lines += ["  - caption: Teaching", "    chapters:", "      - file: book/teaching"]
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


# The order we suggest for a course, and why (the teaching page's prose; runtimes come from files).
COURSE_ORDER = [
    ("07_optimizers", "no network at all: optimisers on two-dimensional landscapes, a minute at "
                      "`cpu`. It introduces learning-rate grids and what \"reaching a minimum\" "
                      "means."),
    ("03_centroid_ntk", "one small ReLU network trained twice, lazy and rich: the vocabulary of "
                        "feature learning (NTK, alignment) the later chapters lean on."),
    ("01_delayed_robustness", "grokking on MNIST, seen through adversarial robustness and the "
                              "local complexity of the network's linear regions."),
    ("02_region_migration", "the same trained network as chapter 01 (read from the run cache), "
                            "now looking at where its linear regions sit."),
    ("05_slingshot_hessian", "modular addition, the classic grokking task: loss spikes and the "
                             "Hessian's spectrum along one run."),
    ("06_intrinsic_dimension", "the same task over several training fractions: how the "
                               "representations' dimension moves and how the time to generalise "
                               "grows as data shrink."),
    ("04_grokalign_speedup", "a regulariser built on the Jacobian ideas of chapters 01-03 that "
                             "makes grokking come sooner; the longest run of the book."),
    ("08_predicting_grokking", "a synthesis: many short runs of chapter 05's task, and a "
                               "prediction of grokking made from the early loss curve."),
]

TEACHING_HEADER = """# Teaching with this book

Every chapter is one notebook in `notebooks/` that a student can open in JupyterLab (`make lab`
installs it into the project's environment and opens that folder), change in its `parameters`
cell and run top to bottom. Each chapter ends with *Try this*: two to four exercises, each with a
collapsible solution giving the command we ran and what we measured, and one conceptual question
with a worked answer.

## Prerequisites

- Python and NumPy; enough PyTorch to read a training loop (modules, autograd, an optimiser).
- Linear algebra: inner products, eigenvalues of a symmetric matrix, the Jacobian of a map.
- Gradient descent and its variants (momentum, Adam) at the level of an introductory ML course.
- Some statistics for chapters 06 and 08: a least-squares fit, a ROC curve and its AUROC.

No GPU is needed: every exercise below runs on a laptop's CPU.

## A suggested order

"""


def exercise_labels(notebook: Path) -> list[tuple[str, str]]:
    """(label, title) of each exercise in a chapter notebook's markdown, in order."""
    import re

    nb = json.loads(Path(notebook).read_text())
    found = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        for m in re.finditer(r"^```\{exercise\}[ \t]*(.*)\n((?::[^\n]*\n)*)", text, re.M):
            label = re.search(r"^:label:\s*(\S+)", m.group(2), re.M)
            if label:
                found.append((label.group(1), m.group(1).strip()))
    return found


def _seconds(record: dict | None) -> str:
    if record is None:
        return "not yet run"
    return _runtime(record)


def render_teaching(results_dir: Path, smoke_dir: Path, claims_dir: Path) -> str:
    """The teaching page: runtimes from the results files, exercises from the executed chapters
    (the pages the book renders, so that every link has a target)."""
    chapters = presets.chapters()
    lines = [TEACHING_HEADER]
    for i, (name, why) in enumerate(COURSE_ORDER, 1):
        if name in chapters:
            lines.append(f"{i}. {{doc}}`{chapters[name].title} <claims/{name}>`: {why}")
    lines += ["", "Chapter 02 reuses the network chapter 01 trained, so run 01 first: 02 then "
              "takes a fraction of its time. Chapters 05, 06 and 08 share one task and one model "
              "and can be taught as a block.", "",
              "## What each chapter costs",
              "",
              "The time each chapter's notebook took, as recorded in its results file when it "
              "last ran, one thread per process: at `smoke` (seconds; every cell runs but the "
              "runs are too short to show the claim) and at `cpu` (the preset the book shows). "
              "Starting the kernel adds a few seconds. On a laptop with other work running, "
              "expect up to twice as long.", "",
              "| Chapter | `smoke` | `cpu` | Exercises |", "|---|---|---|---|"]
    exercises = {}
    for name, ch in chapters.items():
        notebook = Path(claims_dir) / f"{name}.ipynb"
        exercises[name] = exercise_labels(notebook) if notebook.exists() else []
        lines.append(f"| {{doc}}`{ch.title} <claims/{name}>` | "
                     f"{_seconds(load_json(Path(smoke_dir) / f'{name}.json'))} | "
                     f"{_seconds(load_json(Path(results_dir) / f'{name}.json'))} | "
                     f"{len(exercises[name]) or '—'} |")
    if any(exercises.values()):
        lines += ["", "## The exercises", "",
                  "Each solution gives the command, the preset and how long the run took us.", ""]
    for name, ch in chapters.items():
        if exercises[name]:
            links = "; ".join(f"{{ref}}`{title or label} <{label}>`"
                              for label, title in exercises[name])
            lines.append(f"- {ch.title.split(' · ')[0]}: {links}.")
    lines += ["", TEACHING_LAB]
    return "\n".join(lines) + "\n"


TEACHING_LAB = """## A 90-minute lab

Every exercise's run takes from a few seconds to about two minutes on a laptop (each solution says
how long it took us), so a lab is paced by reading and discussion, not by computing. One plan:
chapter 07 (read it, run its two exercises, discuss why Rprop ignores the learning rate: about 30
minutes), then chapter 03 (two runs of about two minutes each, and Euler's identity worked on
paper: about 40 minutes), leaving 20 minutes to compare answers. Further labs pair chapters 01 and
02 (MNIST and the network's linear regions) and chapters 05 and 06 (one task, one model). Chapters
04 and 08 suit a final lab or homework: their `cpu` runs are among the longest in the table above,
so run them ahead of time and use the lab for their exercises, which start from `smoke`.

Runs are seeded, so a student who runs a solution's command should get numbers close to ours;
another machine's floating-point arithmetic can move the last digits, and occasionally a
threshold-crossing step by a little. A run started with `-p` or a preset other than `cpu` does
not replace the chapter the book shows.
"""


def write_teaching(results_dir: Path, page: Path, claims_dir: Path | None = None) -> Path:
    """`teaching.md`: runtimes from `results/` and `results/smoke/`, exercises from the
    executed chapters in `claims_dir` (default: `claims/` next to the page)."""
    results_dir = Path(results_dir)
    claims_dir = claims_dir or Path(page).parent / "claims"
    page.write_text(render_teaching(results_dir, results_dir / "smoke", Path(claims_dir)))
    return page
