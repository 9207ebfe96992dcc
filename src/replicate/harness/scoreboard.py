"""The pages `build` writes from the results files: scoreboard, table of contents, judging,
teaching, benchmarks; and every chapter's verdict box. Their prose is in `page_texts.yaml`."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

from ..config import chapters, counted, format_value
from ..runtime import BOOK_DIR, PROJECT_ROOT
from ..verdict import reproduced, word
from .book_pages import (TEXTS, claim_counts, cold_time, load_paper, paper_summary, pass_rate, preset_label,
                         reduced_size, refresh_chapter_page, runtime_text, seeds_summary)
from .seeds import load_seeds
from .findings import readable
from .records import read_record

JUDGING_DIR, BENCHMARKS_FILE = BOOK_DIR / "judging", BOOK_DIR / "benchmarks.json"  # from `bench`
# The peer of a figure the authors' code gave once (it is on no package index, so `bench` cannot
# run it beside ours): all such figures were recorded on this date.
RECORDED = "authors' code (recorded 2026-11-29, not re-run)"


def _cell(value) -> str:
    """A value in a Markdown table cell: formatted as on the chapter pages, pipes escaped."""
    return format_value(value).replace("|", "\\|").replace("\n", " ")


def chapter_link(name: str, title: str, claims_dir: Path) -> str:
    """A chapter's title, linked to its page when it has one (an unexecuted chapter has none, and a
    link without a target fails the build)."""
    executed = (Path(claims_dir) / f"{name}.ipynb").exists()
    return f"{{doc}}`{title} <claims/{name}>`" if executed else title


def load_results(results_dir: Path) -> list[dict]:
    """The published verdicts (`<chapter>.json`; the `.seeds.json` files are read separately)."""
    return [read_record(path) for path in sorted(Path(results_dir).glob("*.json"))
            if not path.name.endswith(".seeds.json")]


def provenance(results: list[dict], seeds: dict[str, dict] | None = None) -> str:
    """Which code produced the published chapters (one commit, or a warning naming them all), and
    whether their seeds ran with the same result code (`result_code.py`)."""
    commits = sorted({r["git_commit"] for r in results})
    if not commits:
        return ""
    if len(commits) == 1 and not commits[0].endswith("+dirty"):
        text = f"All chapters were executed from commit `{commits[0]}`."
    else:
        text = ("**Executed from different or uncommitted code:** "
                + ", ".join(f"`{c}`" for c in commits) + "; re-run them from one clean commit.")
    codes = [(name, s["code"]) for name, s in sorted((seeds or {}).items()) if s.get("code")]
    others = sorted({c["commit"] for _, code in codes for c in code["commits"]} - set(commits))
    # A reader page names no file of the repository: how many parts differ, not which (the
    # seeds file and `sweep --aggregate-only` list them).
    apart = [f"{name[:2]} (seeds {', '.join(map(str, c['seeds']))} at `{c['commit']}`: "
             + ("git cannot compare them" if c["differs"] is None else
                f"{len(c['differs'])} part{'s' if len(c['differs']) != 1 else ''} of its result "
                f"code differ{'s' if len(c['differs']) == 1 else ''}") + ")"
             for name, code in codes for c in code["commits"] if c["differs"] != []]
    if apart:
        text += (" **Seeds computed by other code than their chapter's published run:** "
                 + "; ".join(apart) + ". Re-run those seeds.")
    elif others:  # the commits are in the seeds files; the page stays short
        text += (f" Some seeds ran at {len(others)} other commit{'s' if len(others) > 1 else ''}, "
                 "with the same result code as their chapter's published run.")
    return text + "\n"


def short_title(chapter) -> str:
    """'01 · Delayed robustness': the number and the short title of `page_texts.yaml`, else the
    full title."""
    short = TEXTS["short_titles"].get(chapter.name)
    return f"{chapter.title.split(' · ')[0]} · {short}" if short else chapter.title


def verdict_badge(record: dict | None) -> str:
    """The verdict as a coloured label (book.css): the colour for a glance, the word for reading."""
    text = "not yet run" if record is None else (
        "reproduced" if reproduced(record["checks"]) else "not reproduced")
    return f'<span class="verdict-badge {text.replace(" ", "-")}">{text}</span>'


def holds(record: dict | None, seeds: dict | None) -> str | None:
    """Whether a claim holds at one setting, from its seeds where it has them (the published run
    is one draw): "holds" in every seed, "fails" in every seed, "fragile" in between; None where
    the setting has not run."""
    if record is None:
        return None
    if seeds and seeds["reproduced"]["n"] > 1 and not seeds.get("deterministic"):
        k, n = seeds["reproduced"]["k"], seeds["reproduced"]["n"]
        return "holds" if k == n else "fails" if k == 0 else "fragile"
    return "holds" if record["reproduced"] else "fails"


# One state per claim over both settings; the badge's class is the key.
STATES = {"reproduced": "reproduced", "reduced-only": "reproduced only at our reduction",
          "paper-only": "reproduced only at the paper's settings", "fragile": "fragile",
          "not-reproduced": "not reproduced", "paper-not-run": "paper's settings not run",
          "not-yet-run": "not yet run"}


def claim_state(record: dict | None, seeds: dict | None, paper: dict | None,
                paper_seeds: dict | None) -> str:
    """The claim's one state (a key of STATES) from its seeds at `cpu` and at `paper`."""
    ours, theirs = holds(record, seeds), holds(paper, paper_seeds)
    if ours is None:
        return "not-yet-run"
    if "fragile" in (ours, theirs):
        return "fragile"
    if ours == "fails":
        return "paper-only" if theirs == "holds" else "not-reproduced"
    return {None: "paper-not-run", "holds": "reproduced", "fails": "reduced-only"}[theirs]


def state_badge(state: str) -> str:
    return f'<span class="verdict-badge {state}">{STATES[state]}</span>'


def states(results: list[dict], seeds: dict[str, dict],
           papers: dict[str, tuple] | None = None) -> dict[str, str]:
    by_name, papers = {r["chapter"]: r for r in results}, papers or {}
    return {name: claim_state(by_name.get(name), seeds.get(name), *papers.get(name, (None, None)))
            for name in chapters()}


def headline(results: list[dict], seeds: dict[str, dict], papers: dict[str, tuple] | None = None) -> str:
    """What holds and what does not, in words: the chapters in each state, from their seeds."""
    found = states(results, seeds, papers)
    said = {"reproduced": "reproduced at our reduction and at the paper's own settings",
            "paper-not-run": "reproduced at our reduction, the paper's settings not run",
            "reduced-only": "reproduced at our reduction but not at the paper's settings",
            "paper-only": "reproduced at the paper's settings but not at our reduction",
            "fragile": "fragile, passing in some seeds and failing in others",
            "not-reproduced": "not reproduced", "not-yet-run": "not yet run"}
    parts = []
    for state, words in said.items():
        names = [short_title(chapters()[n]) for n, s in found.items() if s == state]
        if names:
            parts.append(f"**{words}**: {', '.join(names)}")
    return (f"Of the {len(found)} claims, judged across seeds: " + "; ".join(parts) + ".")


def across_seeds(check: dict, seeds: dict | None) -> tuple[int, int] | None:
    """(seeds passing, seeds) of one check in a seeds file; None where it does not have it."""
    counts = next((c for c in (seeds or {}).get("checks", [])
                   if (check.get("id") and c.get("id") == check["id"]) or c["name"] == check["name"]),
                  None)
    if counts is None or not counts.get("n"):
        return None
    return counts["k"], counts["n"]


def failing_findings(record: dict, seeds: dict | None = None) -> list[str]:
    """Every claim check that fails in the published run or in any seed: its finding, in one
    sentence, and how many seeds pass it."""
    from .findings import finding_or_name

    lines = []
    for c in record["checks"]:
        if c["kind"] != "claim":
            continue
        counted_seeds = across_seeds(c, seeds)
        if c["passed"] and (counted_seeds is None or counted_seeds[0] == counted_seeds[1]):
            continue
        text = finding_or_name(record["chapter"], c)
        if c["passed"]:
            text = f"Seed {record['seed']} passes: {text[0].lower()}{text[1:]}"
        tail = f" ({counted_seeds[0]} of {counted_seeds[1]} seeds pass)" if counted_seeds else ""
        lines.append(f'<span class="finding">{text}</span>{tail}')
    return lines


def why_not(results: list[dict], papers: dict[str, tuple] | None = None,
            seeds: dict[str, dict] | None = None) -> list[str]:
    """Per verdict that does not hold in every seed, at `cpu` and at `paper`: every claim check
    that fails somewhere, each as its finding."""
    lines, papers, seeds = [], papers or {}, seeds or {}
    runs = [(r, seeds.get(r["chapter"])) for r in results] + [
        (paper, paper_seeds) for paper, paper_seeds in papers.values() if paper is not None]
    for record, its_seeds in sorted(runs, key=lambda rs: (rs[0]["chapter"], rs[0]["preset"] != "cpu")):
        if record["chapter"] not in chapters() or holds(record, its_seeds) == "holds":
            continue
        found = failing_findings(record, its_seeds)
        if found:
            lines.append(f"- **{short_title(chapters()[record['chapter']])}** at "
                         f"`{preset_label(record)}`:")
            lines += [f"  - {line}" for line in found]
    return [*lines, ""] if lines else []


def load_papers(results_dir: Path) -> dict[str, tuple[dict | None, dict | None]]:
    """Every chapter's published `paper` run and its seeds file (None, None where not executed)."""
    return {ch: load_paper(ch, results_dir) for ch in chapters()}


def summary_table(results: list[dict], seeds: dict[str, dict], claims_dir: Path,
                  papers: dict[str, tuple] | None = None) -> list[str]:
    """One short row per chapter, what a reader scans (the claims and checks come further down),
    with the verdict at the paper's own settings in the last column."""
    by_name, papers = {r["chapter"]: r for r in results}, papers or {}
    # The chapters' run times are in their verdict boxes and on the teaching page.
    found = states(results, seeds, papers)
    lines = [":::{container} scoreboard-table",
             "| Chapter | Verdict | At `cpu`: seeds reproducing | At `paper` |", "|---|---|---|---|"]
    for name, ch in chapters().items():
        r, s = by_name.get(name), seeds.get(name)
        across = "—" if r is None else f"seed {r['seed']} only"
        if s:
            # identical repeats are one run: no pass rate to estimate
            rate = "" if s.get("deterministic") else pass_rate(s["reproduced"].get("ci95"))
            untested = len(s.get("inconclusive_seeds") or [])
            across = f"{s['reproduced']['k']}/{s['reproduced']['n']}" + (
                " deterministic" if s.get("deterministic") else "") + (
                f" ({rate})" if rate else "") + (
                # on a line of its own, so that it does not widen the column for every row
                f"<br>{untested} inconclusive" if untested else "")
        paper = paper_summary(name, *papers.get(name, (None, None)), short=True)
        lines.append(f"| {chapter_link(name, short_title(ch), claims_dir)} | "
                     f"{state_badge(found[name])} | {across} | {paper} |")
    return lines + [":::"]


def render(results: list[dict], seeds: dict[str, dict] | None = None,
           claims_dir: Path = BOOK_DIR / "claims", papers: dict[str, tuple] | None = None) -> str:
    """The scoreboard: the headline, one short row per chapter, then (folded) every chapter's
    claim and checks."""
    by_name, seeds = {r["chapter"]: r for r in results}, seeds or {}
    from .data_sources import scoreboard_paragraph

    lines = [TEXTS["header"], headline(results, seeds, papers), "",
             *summary_table(results, seeds, claims_dir, papers), "", *scoreboard_paragraph(),
             "(why-not-reproduced)=", f"## {TEXTS['why_header']}", "", TEXTS["why_intro"], "",
             *why_not(results, papers, seeds),
             f":::{{dropdown}} {TEXTS['reading_header']}",
             TEXTS["scoreboard_legend"], "", provenance(results, seeds), ":::", "",
             ":::{dropdown} Every claim and its checks"]
    for name, ch in chapters().items():
        if (r := by_name.get(name)) is None:
            lines += ["", f"**{ch.title}.** {ch.claim} *Not yet run.*"]
            continue
        lines += ["", f"**{ch.title}.** {r['claim']}", "",
                  f"Preset `{preset_label(r)}`, seed {r['seed']} ({cold_time(name)} on one core "
                  f"from an empty run cache). Across seeds: "
                  f"{seeds_summary(seeds.get(name))}. At the paper's settings: "
                  f"{paper_summary(name, *(papers or {}).get(name, (None, None)))}.", "",
                  "| Check | Kind | Result | Ours | Paper |", "|---|---|---|---|---|"]
        for c in r["checks"]:
            result = "—" if c["kind"] == "report" else word(c)
            result = result if result in ("—", "PASS") else f"**{result}**"  # a failure stands out
            lines.append(f"| {_cell(c['name'])} | {c['kind']} | {result} | "
                         f"{_cell(readable(c['ours']))} | {_cell(c['paper'])} |")
    lines.append(":::")
    return "\n".join(lines) + "\n"


INTRO_START = "<!-- scoreboard summary: written by `python -m replicate build`; edit outside -->"
INTRO_END = "<!-- end of the scoreboard summary -->"


def write_intro_summary(results_dir: Path, intro: Path, claims_dir: Path | None = None) -> Path:
    """Put the scoreboard's headline and table right under the intro's title, between markers
    (the rest of the intro is written by hand). Chapters link into `claims_dir` (default:
    `claims/` next to the intro) when they have a page there."""
    results = load_results(results_dir)
    seeds = {ch: r for ch in chapters() if (r := load_seeds(ch, results_dir))}
    claims = Path(claims_dir or Path(intro).parent / "claims")
    sentence = headline(results, seeds, load_papers(results_dir)) + \
        " The {doc}`scoreboard` has each claim and check."
    papers = load_papers(results_dir)
    # the same fold as the scoreboard's (why each failure fails, the legend), without provenance
    block = "\n".join([INTRO_START, "", sentence, "", *summary_table(results, seeds, claims, papers),
                       "", TEXTS["intro_why"], "", f":::{{dropdown}} {TEXTS['reading_header']}",
                       TEXTS["scoreboard_legend"], ":::", "", INTRO_END])
    text = Path(intro).read_text()
    if INTRO_START in text:
        before, rest = text.split(INTRO_START, 1)
        text = before + block + rest.split(INTRO_END, 1)[1]
    else:
        title, rest = text.split("\n", 1)
        text = f"{title}\n\n{block}\n{rest}"
    Path(intro).write_text(text)
    return intro


def write_toc(claims_dir: Path, toc: Path) -> Path:
    """`_toc.yml` with every chapter that has an executed notebook, in book order."""
    lines = ["# Written by `python -m replicate build` from the chapters in book/claims/.",
             "format: jb-book", "root: book/intro", "parts:"]
    if (Path(toc).parent / "about.md").exists():
        lines += ["  - caption: Front matter", "    chapters:", "      - file: book/about"]
    lines += ["  - caption: Results", "    chapters:", "      - file: book/scoreboard"]
    if executed := [ch for ch in chapters() if (Path(claims_dir) / f"{ch}.ipynb").exists()]:
        lines += ["  - caption: Claims", "    chapters:",
                  *(f"      - file: book/claims/{ch}" for ch in executed)]
    if (Path(toc).parent / "teaching.md").exists():
        lines += ["  - caption: Teaching", "    chapters:", "      - file: book/teaching"]
    lines += ["  - caption: Appendix", "    chapters:", "      - file: book/judging"]
    # one page per chapter's judging, under the appendix's index page
    if judged := [ch for ch in chapters() if (Path(toc).parent / "judging" / f"{ch}.md").exists()]:
        lines += ["        sections:", *(f"          - file: book/judging/{ch}" for ch in judged)]
    if (Path(toc).parent / "benchmarks.json").exists():
        lines.append("      - file: book/benchmarks")
    lines.append("      - file: book/references")
    if (Path(toc).parent / "changes.md").exists():  # the book's history, kept off its pages
        lines.append("      - file: book/changes")
    toc.write_text("\n".join(lines) + "\n")
    return toc


def write_scoreboard(results_dir: Path, page: Path) -> Path:
    """`scoreboard.md`, with the across-seeds column from the chapters' `.seeds.json` files."""
    found = {ch: load_seeds(ch, results_dir) for ch in chapters()}
    page.write_text(render(load_results(results_dir), {ch: r for ch, r in found.items() if r},
                           Path(page).parent / "claims", load_papers(results_dir)))
    return page


CODE_LICENCE, BOOK_LICENCE = "LICENSE", "LICENSE-book"  # MIT; CC BY 4.0 (text and figures)
# The citation's version: the commit this copy is built from, filled in when Sphinx reads the page
# (`book_sphinx`), so that the page's source changes only with its content.
BUILD_COMMIT = "<commit of this copy>"


def render_about(config: dict, project_root: Path) -> str:
    """The About page: how to cite the book (from `_config.yml`: title, author, year and
    `html.repository_url`; the version is the commit it is built from) and the licences of the
    code and of the text and figures, each stated only where its file exists. The build date and
    commit are added by `book_sphinx` when Sphinx reads the page."""
    url = ((config.get("html") or {}).get("repository_url") or "").strip()
    fields = [("title", config["title"]), ("author", "{" + config["author"] + "}"),  # one name
              ("year", config.get("copyright", "")), ("howpublished", "Jupyter Book"),
              ("version", BUILD_COMMIT), *([("url", url)] if url else [])]
    citation = "@misc{grokking_replicated,\n" + ",\n".join(
        f"  {key} = {{{value}}}" for key, value in fields) + "\n}"

    def licence(name: str, kind: str) -> str:
        if (Path(project_root) / name).is_file():
            return TEXTS[f"{kind}_licence_file"].format(name=name)
        return TEXTS[f"{kind}_licence_missing"]

    return TEXTS["about"].format(citation=citation, code_licence=licence(CODE_LICENCE, "code"),
                                 book_licence=licence(BOOK_LICENCE, "book"),
                                 repository=f" The code: <{url}>." if url else "") + "\n"


def write_judging(judging_dir: Path, page: Path, results_dir: Path | None = None) -> Path:
    """`judging.md`: the appendix's index, a link to each chapter's page `judging/<chapter>.md`
    (its setup, measures, checks and changes from the paper), in book order; then every MNIST
    check on the training digits against the test split (`data_sources`)."""
    from .data_sources import RESULTS_DIR, comparison_section

    known = chapters()
    judged = [ch for ch in known if (Path(judging_dir) / f"{ch}.md").exists()]
    links = [f"{i}. {{doc}}`{known[ch].title} <judging/{ch}>`" for i, ch in enumerate(judged, 1)]
    comparison = comparison_section(results_dir or RESULTS_DIR)
    page.write_text("\n\n".join([TEXTS["judging_header"], "\n".join(links),
                                  *([comparison] if comparison else [])]).rstrip("\n") + "\n")
    return page


def _exercises(notebook: Path) -> list[tuple[str, str, str]]:
    """(label, title, the body's first line) of each exercise in a chapter notebook's markdown,
    in order."""
    found = []
    for cell in json.loads(Path(notebook).read_text())["cells"]:
        text = "".join(cell["source"]) if cell["cell_type"] == "markdown" else ""
        # The directive's title, then its `:option:` lines, among which the label, a blank line
        # and the body.
        for m in re.finditer(r"^```\{exercise\}[ \t]*(.*)\n((?::[^\n]*\n)*)\n?([^\n]*)", text,
                             re.M):
            if label := re.search(r"^:label:\s*(\S+)", m.group(2), re.M):
                found.append((label.group(1), m.group(1).strip(), m.group(3)))
    return found


def exercise_labels(notebook: Path) -> list[tuple[str, str]]:
    """(label, title) of each exercise in a chapter notebook's markdown, in order."""
    return [(label, title) for label, title, _ in _exercises(notebook)]


LEVEL_LINE = re.compile(r"^\*Level\* (?P<stars>[★☆]{3}) (?P<kind>[^·\n]+?) · "
                        r"\*Run(?: \(ours\))?\* (?P<run>[^\n]+)$", re.M)


def exercise_levels(notebook: Path) -> dict[str, dict[str, str]]:
    """{label: {stars, kind, run}} from the line that opens each exercise of a chapter notebook:
    "*Level* ★★☆ compare runs · *Run (ours)* 33 s at `smoke`" (how hard, and how long its run
    took us; "*Run* none: pen and paper" for a question without one)."""
    return {label: level.groupdict() for label, _, first in _exercises(notebook)
            if (level := LEVEL_LINE.match(first))}


def _exercise_entry(label: str, title: str, level: dict | None) -> str:
    run = level and ("pen and paper" if level["run"].startswith("none") else
                     level["run"].split(" (")[0])
    note = f" ({level['stars']}, {run})" if level else ""
    return f"{{ref}}`{title or label} <{label}>`{note}"


def render_teaching(results_dir: Path, smoke_dir: Path, claims_dir: Path) -> str:
    """The teaching page: runtimes from the results files, exercises from the executed chapters
    (the pages the book renders, so that every link has a target)."""
    known, lines, exercises = chapters(), [TEXTS["teaching_header"]], {}
    lines += [f"{i}. {chapter_link(c['chapter'], known[c['chapter']].title, claims_dir)}: "
              f"{c['why']}"
              for i, c in enumerate(TEXTS["course_order"], 1) if c["chapter"] in known]
    lines += ["", "\n\n".join(TEXTS["teaching_costs"]), "",
              "| Chapter | `smoke` | `cpu` | Exercises |", "|---|---|---|---|"]
    for name, ch in known.items():
        notebook = Path(claims_dir) / f"{name}.ipynb"
        exercises[name] = exercise_labels(notebook) if notebook.exists() else []
        smoke = read_record(Path(smoke_dir) / f"{name}.json")
        times = ("not yet run" if smoke is None else runtime_text(smoke)) + f" | {cold_time(name)}"
        lines.append(f"| {chapter_link(name, ch.title, claims_dir)} | {times} | "
                     f"{len(exercises[name]) or '—'} |")
    levels = {name: exercise_levels(Path(claims_dir) / f"{name}.ipynb")
              for name in known if exercises[name]}
    listed = [f"- {ch.title.split(' · ')[0]}: " + "; ".join(
        _exercise_entry(label, title, levels[name].get(label))
        for label, title in exercises[name]) + "."
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
    """Rewrite every executed chapter's verdict box and across-seeds section from its results,
    each under its chapter's lock: a page is made from the one publication it shows, never from
    a results file read before a publication and a notebook read after it."""
    from .execute import journal_path
    from .publish import chapter_lock

    changed = 0
    for ch in chapters():
        notebook = claims_dir / f"{ch}.ipynb"
        with chapter_lock(journal_path(results_dir, ch)):
            record = read_record(results_dir / f"{ch}.json")
            if not (notebook.exists() and record):
                continue
            paper = load_paper(ch, results_dir)
            changed += refresh_chapter_page(notebook, record, load_seeds(ch, results_dir),
                                            JUDGING_DIR, paper_summary(ch, *paper),
                                            paper_seeds=paper[1], paper=paper[0])
    return changed


def write_pages(results_dir: Path) -> int:
    """Every page `build` writes before Jupyter Book runs. Returns 0."""
    write_teaching(results_dir, BOOK_DIR / "teaching.md")  # before the toc, which lists it
    config = yaml.safe_load((PROJECT_ROOT / "_config.yml").read_text())
    (BOOK_DIR / "about.md").write_text(render_about(config, PROJECT_ROOT))  # and this one
    write_toc(BOOK_DIR / "claims", BOOK_DIR / "_toc.yml")
    write_judging(JUDGING_DIR, BOOK_DIR / "judging.md")
    refresh_pages(results_dir)
    page = write_scoreboard(results_dir, BOOK_DIR / "scoreboard.md")
    write_intro_summary(results_dir, BOOK_DIR / "intro.md")
    seeds = {ch: r for ch in chapters() if (r := load_seeds(ch, results_dir))}
    if "**" in (mixed := provenance(load_results(results_dir), seeds)):
        print("warning: " + mixed.replace("**", "").strip(), file=sys.stderr)
    if BENCHMARKS_FILE.exists():
        write_benchmarks_page(BENCHMARKS_FILE, results_dir)
    print(f"scoreboard and table of contents written to {page.parent}")
    return 0


def chapter_rows(results_dir: Path) -> list[dict]:
    """Each chapter's time at `cpu` from an empty run cache (`cpu_cold_s`, measured), never the
    duration of its last run, which the run cache can shorten to seconds."""
    def row(figure, minutes, target, met=None) -> dict:
        return {"figure": figure, "ours": minutes, "unit": "min", "peer": None, "peer_name": "",
                "ratio": None, "target": target, "met": met}
    rows, total = [], 0.0
    for name, ch in chapters().items():
        if not (seconds := ch.get("cpu_cold_s")):
            continue
        total += seconds
        rows.append(row(f"chapter {name} at preset cpu, from an empty run cache (one thread)",
                        seconds / 60, "<= 12 min", seconds <= 12 * 60))
    if rows:
        rows.append(row("whole book, all chapters, from an empty run cache", total / 60,
                        "<= 45 min", total <= 45 * 60))
    return rows


def with_current_chapters(record: dict, results_dir: Path) -> dict:
    """`bench`'s rows, then the chapters' times read now (a re-run chapter shows its new time)."""
    measured = [r for r in record["rows"] if r.get("benchmark")]
    return {**record, "rows": measured + chapter_rows(results_dir)}


def upgrade_row(r: dict) -> dict:
    """A benchmark row in today's fields. Rows written before peers were run side by side kept
    the authors' recorded figure under `seed`; it becomes the peer, named as recorded."""
    if "seed" not in r:
        return r
    old = {k: v for k, v in r.items() if k != "seed"}
    return {**old, "peer": r["seed"], "peer_name": RECORDED if r["seed"] is not None else ""}


def _median_and_spread(value, spread) -> str:
    """'0.0868 (0.0851–0.0902)': a median with the fastest and slowest of its calls, if timed."""
    if value is None:
        return ""
    return f"{value:.3g}" + (f" ({spread[0]:.3g}–{spread[1]:.3g})" if spread else "")


def write_benchmarks_page(benchmarks_file: Path, results_dir: Path) -> Path:
    """The page of a benchmarks file, beside it (`benchmarks.json` -> `benchmarks.md`), with the
    chapters' times read now from `results_dir`."""
    page = Path(benchmarks_file).with_suffix(".md")
    page.write_text(render_page(with_current_chapters(read_record(benchmarks_file), results_dir))
                    + cost_section(results_dir, Path(results_dir).parent / "claims"))
    return page


def cost_section(results_dir: Path, claims_dir: Path) -> str:
    """Where each chapter's time went at its published run: the phases the package timed
    (`runtime.COST`: training steps, evaluations, each timed measure, the rest as "other") and
    the slowest cells. A chapter published before the phases were timed shows the cell timings
    papermill kept in its notebook."""
    from .execute import notebook_costs

    def seconds(value: float) -> str:
        return f"{value:,.0f} s" if value >= 10 else f"{value:.1f} s"

    def short(line: str, most: int = 36) -> str:  # code does not wrap: keep it within a phone
        return line if len(line) <= most else line[:most - 1].rstrip() + "…"

    items = []  # a list, not a table: the cells' first lines would widen a table past a phone
    for record in load_results(results_dir):
        cells = record.get("notebook_s") or notebook_costs(claims_dir / f"{record['chapter']}.ipynb")
        phases = "; ".join(f"{name} {seconds(v)}" for name, v in (record.get("cost_s") or {})
                           .items()) or "not timed at this run"
        slowest = "; ".join(f"cell {c['cell']} (`{short(c['first line'])}`) {seconds(c['s'])}"
                            for c in (cells.get("slowest cells") or [])[:3])
        start = cells.get("kernel start and shutdown")
        items.append(f"- **{record['chapter']}**, {seconds(record['duration_s'])}. Phases: "
                     f"{phases}. Slowest cells: {slowest or 'none recorded'}."
                     + ("" if start is None else f" Kernel start and shutdown: {seconds(start)}."))
    if not items:
        return ""
    return "\n".join(["", TEXTS["benchmarks_costs"], "", *items]) + "\n"


def render_page(record: dict) -> str:
    """`benchmarks.md` from a benchmarks record (see `with_current_chapters`): each figure, ours
    beside its peer's from the same run (or as recorded), the ratio, the peer's name and version."""
    lines = [TEXTS["benchmarks_header"].format(threads=record["threads"])]  # to the table's head
    for r in map(upgrade_row, record["rows"]):
        met = "" if r["met"] is None else ("yes" if r["met"] else "**no**")
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.3g}"
        measured = record.get("measured", {}).get(r.get("benchmark"), "")
        if threads := record.get("threads_by_benchmark", {}).get(r.get("benchmark")):
            measured += f", {threads} thread{'s' if threads > 1 else ''}"
        if r.get("load") is not None:
            measured += f", load {r['load']:.1f}"
        lines.append(f"| {r['figure']} | {_median_and_spread(r['ours'], r.get('ours_spread'))} | "
                     f"{_median_and_spread(r['peer'], r.get('peer_spread'))} | {ratio} | "
                     f"{r['peer_name']} | {r['unit']} | {r['target']} | {met} | {measured} |")
    return "\n".join(lines) + "\n"
