"""What a chapter page shows from its results rather than its code.

- `checks_table_html`: the checks of one run as a table, PASS / FAIL / REPORT in words and colour
  (shown by `run.save()` under the plain-text verdict).
- `verdict_box`: the box under a chapter's title: the claim, the verdict of the published run and,
  once sweeps exist, the result across seeds.
- `across_seeds_section`: a short section with every check's k/n over seeds and the spread of the
  numbers, from `results/<chapter>.seeds.json`.

`refresh_chapter_page` writes the last two into an executed notebook as markdown cells (tagged
`verdict-box` and `across-seeds`), replacing earlier versions; `run`, `sweep` and `build` call it,
so the page always agrees with the results files.
"""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

BADGE = {"PASS": "#1b6e37", "FAIL": "#b3261e", "REPORT": "#4a5a6a"}
BOX_TAG, SEEDS_TAG = "verdict-box", "across-seeds"


def _word(check: dict) -> str:
    if check["kind"] == "report":
        return "REPORT"
    return "PASS" if check["passed"] else "FAIL"


def _text(value: Any) -> str:
    """A check's value as the book shows it (floats to 3 significant digits)."""
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_text(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    return str(value)


def badge(word: str) -> str:
    return (f'<span class="verdict-word" style="background:{BADGE[word]};color:#fff;'
            f'padding:1px 6px;border-radius:3px;font-weight:600;font-size:0.85em">{word}</span>')


def checks_table_html(checks: list[dict]) -> str:
    rows = "".join(
        f"<tr><td>{badge(_word(c))}</td><td>{html.escape(c['name'])}</td>"
        f"<td>{html.escape(_text(c['ours']))}</td><td>{html.escape(_text(c['paper']))}</td></tr>"
        for c in checks)
    return ('<table class="verdict-checks" style="font-size:0.9em;width:100%">'
            "<thead><tr><th>Result</th><th style=\"width:46%\">Check</th><th>Ours</th>"
            "<th>Paper</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


def claim_counts(record: dict) -> tuple[int, int]:
    claims = [c for c in record["checks"] if c["kind"] == "claim"]
    return sum(bool(c["passed"]) for c in claims), len(claims)


def seeds_summary(seeds: dict | None) -> str:
    """One line for the box and the scoreboard: 'robust: 3/3 seeds reproduce' or why not."""
    if not seeds:
        return "not yet run across seeds"
    k, n = seeds["reproduced"]["k"], seeds["reproduced"]["n"]
    word = {True: "robust", False: "not robust", None: "too few seeds to say"}[seeds["robust"]]
    return f"{word}: {k}/{n} seeds reproduce the whole claim"


def runtime_text(record: dict) -> str:
    """The recorded duration, flagged when training runs came from the run cache."""
    text = f"{record['duration_s']:.0f} s"
    runs = record.get("runs") or {}
    if runs.get("reused"):
        total = runs["reused"] + runs.get("computed", 0)
        text += f" ({runs['reused']} of {total} runs from the cache)"
    return text


def verdict_box(record: dict, seeds: dict | None, judged_label: str | None) -> str:
    passed, total = claim_counts(record)
    word = "reproduced" if record["reproduced"] else "not reproduced"
    style = "tip" if record["reproduced"] else "danger"
    lines = [f":::{{admonition}} Verdict: {word}, {passed}/{total} claim checks pass",
             f":class: {style} verdict-box", "",
             f"**Claim.** {record['claim']}", "",
             f"**This run.** Preset `{record['preset']}`, seed {record['seed']}, "
             f"{runtime_text(record)} on {record['device']}, code at commit "
             f"`{record['git_commit']}`. The checks are listed under *Verdict* at the end of "
             "the page.", ""]
    if seeds:
        lines.append(f"**Across seeds.** {seeds_summary(seeds).capitalize()} "
                     f"(seeds {', '.join(map(str, seeds['seeds']))}); see *Across seeds* below.")
    else:
        lines.append("**Across seeds.** Not yet run across seeds: this verdict rests on one seed.")
    if judged_label:
        lines += ["", f"How this claim is judged: {{ref}}`{judged_label}`."]
    lines.append(":::")
    return "\n".join(lines)


def across_seeds_section(record: dict, seeds: dict | None) -> str:
    name = record["chapter"]
    if not seeds:
        return ("## Across seeds\n\nThis chapter has not been run across seeds yet, so its verdict "
                "rests on the single run above. To run it: "
                f"`python -m replicate sweep {name} --seeds 1-2`.")
    lines = ["## Across seeds", "",
             f"The published run (seed {record['seed']}) and "
             f"{seeds['n'] - 1} more seed{'s' if seeds['n'] != 2 else ''} at preset "
             f"`{seeds['preset']}`: {seeds_summary(seeds)}. A claim counts as robust when each "
             f"of its claim checks passes in at least 80% of the seeds. Numbers are the mean, "
             f"the standard deviation, the {seeds['interval']}, and the median with the "
             f"range over the seeds.", "",
             "| Check | Kind | Seeds passing | Mean ± s.d. | 95% interval | Median [range] |",
             "|---|---|---|---|---|---|"]
    values: dict[str, list[dict]] = {}
    for v in seeds.get("values", []):
        values.setdefault(v["check"], []).append(v)
    for c in seeds["checks"]:
        k = "—" if c["kind"] == "report" else f"{c['k']}/{c['n']}"
        failed = [s for s, ok in c.get("per_seed", {}).items() if ok is False]
        if failed:
            k += f" (fails for seed {', '.join(failed)})"
        spread = [v for v in values.get(c["name"], []) if v.get("sd") is not None]
        mean = "; ".join(f"{(v['key'] + ': ') if v.get('key') else ''}{v['mean']:.3g} ± {v['sd']:.2g}"
                         for v in spread)
        if spread and not any(v["sd"] for v in spread):
            # Identical numbers in every seed: the seed does not reach what this check measures.
            mean += " (identical in every seed)"
        interval = "; ".join(f"[{v['ci95'][0]:.3g}, {v['ci95'][1]:.3g}]" for v in spread
                             if v.get("ci95"))
        median = "; ".join(f"{v['median']:.3g} [{v['range'][0]:.3g}, {v['range'][1]:.3g}]"
                           for v in spread if v.get("median") is not None)
        cell = c["name"].replace("|", "\\|")
        lines.append(f"| {cell} | {c['kind']} | {k} | {mean or '—'} | {interval or '—'} "
                     f"| {median or '—'} |")
    for f in seeds.get("failed", []):
        lines += ["", f"A run failed to execute and is not among the seeds above: seed "
                      f"{f.get('seed')} ({f.get('error') or 'no message'})."]
    if seeds.get("unmatched"):
        lines += ["", "Checks missing from some seeds (their names carry a number that moves "
                  "with the seed; a missing check counts as failed there): "
                  + "; ".join(f"{u['name']} (seeds {', '.join(map(str, u['seeds']))})"
                              for u in seeds["unmatched"]) + "."]
    from .presets import chapters

    chapter = chapters().get(name)
    if chapter is not None and chapter.seed_note:
        lines += ["", chapter.seed_note]
    spreads = [v["sd"] for v in seeds.get("values", []) if v.get("sd") is not None]
    if seeds["n"] > 1 and spreads and not any(spreads):
        lines += ["", "Every seed gave exactly the same numbers: nothing this chapter computes "
                      "depends on the seed, so agreement across seeds says nothing about "
                      "robustness here."]
    return "\n".join(lines)


def _markdown_cell(source: str, tag: str) -> dict:
    # Fixed ids, so that refreshing a page with the same results changes nothing.
    return {"cell_type": "markdown", "id": tag, "metadata": {"tags": [tag]}, "source": source}


def refresh_chapter_page(notebook: Path, record: dict, seeds: dict | None,
                         judged_label: str | None = None) -> bool:
    """Put the verdict box under the title and the across-seeds section before "Try this".

    Returns whether the notebook changed. Idempotent: earlier versions are replaced.
    """
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    before = nbformat.writes(nb)
    cells = [c for c in nb.cells if not set(c.metadata.get("tags", [])) & {BOX_TAG, SEEDS_TAG}]
    # The title gets a cell of its own, so that the box comes right under it.
    first = cells[0]
    if first.cell_type == "markdown" and "\n" in first.source.strip():
        title, rest = first.source.split("\n", 1)
        rest_cell = nbformat.from_dict({"cell_type": "markdown", "id": f"{first.get('id', 'title')}-intro",
                                        "metadata": first.metadata, "source": rest.lstrip("\n")})
        first.source = title
        cells.insert(1, rest_cell)
    cells.insert(1, nbformat.from_dict(_markdown_cell(verdict_box(record, seeds, judged_label),
                                                      BOX_TAG)))
    try_this = next((i for i, c in enumerate(cells) if c.cell_type == "markdown"
                     and c.source.lstrip().lower().startswith("## try this")), len(cells))
    cells.insert(try_this, nbformat.from_dict(_markdown_cell(across_seeds_section(record, seeds),
                                                             SEEDS_TAG)))
    nb.cells = cells
    after = nbformat.writes(nb)
    if after == before:
        return False
    tmp = notebook.with_name(f".{notebook.name}.refresh")
    tmp.write_text(after)
    tmp.replace(notebook)
    return True


def load_json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None
