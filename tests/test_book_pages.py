"""The parts of a chapter page written from its results: verdict box, checks table, across seeds."""
import json
import re

import nbformat
import yaml

from replicate import config
from replicate import verdict
from replicate.harness import book_pages, scoreboard
from replicate.harness.seeds import load_seeds
from replicate.runtime import BOOK_DIR, PROJECT_ROOT

RECORD = {"chapter": "07_optimizers", "title": "07 · Optimisers", "claim": "Adam reaches the minimum.",
          "preset": "cpu", "reproduced": False, "seed": 0, "device": "cpu (1 thread)",
          "duration_s": 49.2, "git_commit": "abc123", "checks": [
              {"name": "adam reaches it", "kind": "claim", "passed": True, "ours": 0.01, "paper": "yes"},
              {"name": "sgd does not", "kind": "claim", "passed": False, "ours": 0.0, "paper": "no"},
              {"name": "a <b> discrepancy", "kind": "report", "passed": None, "ours": {"x": 1.5},
               "paper": 2}]}
SEEDS = {"chapter": "07_optimizers", "preset": "cpu", "overrides": {}, "seeds": [0, 1, 2], "n": 3,
         "robust": False, "interval": "95% Student-t interval of the mean",
         "reproduced": {"k": 1, "n": 3},
         "checks": [{"name": "adam reaches it", "kind": "claim", "k": 3, "n": 3,
                     "per_seed": {"0": True, "1": True, "2": True}},
                    {"name": "sgd does not", "kind": "claim", "k": 1, "n": 3,
                     "per_seed": {"0": False, "1": True, "2": False}}],
         "values": [{"check": "adam reaches it", "key": None, "n": 3, "mean": 0.02, "sd": 0.01,
                     "ci95": [-0.005, 0.045], "median": 0.02, "range": [0.01, 0.03], "per_seed": {"0": 0.01, "1": 0.02, "2": 0.03}}],
         "runs": [], "failed": []}


def _judging(tmp_path):
    (tmp_path / "judging").mkdir(exist_ok=True)
    (tmp_path / "judging" / "07_optimizers.md").write_text("(judging-07_optimizers)=\n")
    return tmp_path / "judging"


def _notebook(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 07 · Optimisers\n\n> the claim, quoted"),
                nbformat.v4.new_code_cell("x = 1"),
                nbformat.v4.new_markdown_cell("## Try this\n\n- something")]
    path = tmp_path / "07_optimizers.ipynb"
    nbformat.write(nb, path)
    return path


def test_checks_table_says_pass_fail_report_in_words_and_escapes_text():
    table = verdict.checks_table_html(RECORD["checks"])
    assert table.count(">PASS<") == 1 and table.count(">FAIL<") == 1 and table.count(">REPORT<") == 1
    assert "a &lt;b&gt; discrepancy" in table and "<b>" not in table
    # Each word has its own colour.
    assert len({verdict.BADGE[w] for w in ("PASS", "FAIL", "REPORT")}) == 3


def test_the_pages_checks_table_reads_as_text_and_marks_what_did_not_pass():
    checks = [*RECORD["checks"],
              {"name": "undecided", "kind": "claim", "passed": False, "inconclusive": True,
               "ours": {"settled at step": 60, "T": 40000, "range": [15160.0, "unbounded"]},
               "paper": "a <i>word</i>", "diagnosis": "too few seeds"}]
    table = book_pages.checks_table(checks)
    assert "settled at step 60, T 40,000, range (15,160; unbounded)" in table
    assert "{" not in table  # no Python dict for a reader
    assert table.count('<tr class="check-fail">') == 1
    assert table.count('<tr class="check-inconclusive">') == 1
    assert "a &lt;i&gt;word&lt;/i&gt;" in table and "<em>why: too few seeds</em>" in table


def test_refreshing_a_page_swaps_the_runs_checks_table_for_the_readable_one(tmp_path):
    path = _notebook(tmp_path)
    nb = nbformat.read(path, as_version=4)
    shown = verdict.checks_table_html(RECORD["checks"])
    nb.cells[1].outputs = [nbformat.v4.new_output("display_data", {"text/html": shown})]
    nbformat.write(nb, path)
    book_pages.refresh_chapter_page(path, RECORD, None, _judging(tmp_path))
    html = next(o["data"]["text/html"] for c in nbformat.read(path, as_version=4).cells
                if c.cell_type == "code" for o in c.outputs)
    assert html == book_pages.checks_table(RECORD["checks"]) and "x 1.5" in html
    assert "{x: 1.5}" in shown  # what the run displayed: the values as data


def test_box_goes_right_under_the_title_and_seeds_before_try_this(tmp_path):
    path = _notebook(tmp_path)
    assert book_pages.refresh_chapter_page(path, RECORD, None, _judging(tmp_path))
    cells = nbformat.read(path, as_version=4).cells
    assert cells[0].source == "# 07 · Optimisers"
    assert cells[1].metadata["tags"] == ["verdict-box"]
    assert "Verdict: not reproduced, 1/2 claim checks pass" in cells[1].source
    assert ":class: danger verdict-box" in cells[1].source
    assert "{ref}`How this claim is judged <judging-07_optimizers>`" in cells[1].source
    assert "seed 0 only, not yet run across seeds" in cells[1].source
    # the box holds the result and ends with its link to the judging; the claim as checked is
    # printed above the check table, not repeated under the box
    assert cells[1].source.endswith("<judging-07_optimizers>`.\n:::")
    assert "The claim, as this chapter checks it" not in cells[1].source
    assert cells[2].source.startswith("> the claim")
    assert cells[-4].metadata["tags"] == ["across-seeds"] and "not been run across seeds" in cells[-4].source
    assert cells[-3].source.startswith("## Try this")
    assert cells[-2].metadata["tags"] == ["run-yourself"]
    # How the page was made comes last, folded, and nowhere else on the page.
    assert cells[-1].metadata["tags"] == ["how-made"]
    assert cells[-1].source.startswith(":::{dropdown} How this page was made")
    assert f"`{RECORD['git_commit']}`" in cells[-1].source
    assert not any(RECORD["git_commit"] in c.source or "49 s" in c.source for c in cells[:-1])


def test_refresh_is_idempotent_and_replaces_the_old_box(tmp_path):
    path = _notebook(tmp_path)
    book_pages.refresh_chapter_page(path, RECORD, None, tmp_path)
    first = path.read_text()
    assert not book_pages.refresh_chapter_page(path, RECORD, None, tmp_path)
    assert path.read_text() == first
    assert book_pages.refresh_chapter_page(path, dict(RECORD, reproduced=True), SEEDS, tmp_path)
    cells = nbformat.read(path, as_version=4).cells
    assert len(cells) == len(nbformat.reads(first, as_version=4).cells)
    assert sum("verdict-box" in c.metadata.get("tags", []) for c in cells) == 1
    assert "Verdict: reproduced" in cells[1].source and ":class: tip" in cells[1].source


def test_the_page_ends_with_how_to_run_the_chapter_and_drops_the_injected_parameters(tmp_path):
    path = _notebook(tmp_path)
    nb = nbformat.read(path, as_version=4)
    injected = nbformat.v4.new_code_cell('# Parameters\nspec = {"preset": "cpu"}')
    injected.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(1, injected)
    nbformat.write(nb, path)
    book_pages.refresh_chapter_page(path, RECORD, None, tmp_path)
    cells = nbformat.read(path, as_version=4).cells
    last = cells[-2].source
    assert last.startswith("## Run this chapter yourself")
    assert "make book" in last and "make test" in last
    assert "-m replicate run 07_optimizers --preset smoke" in last
    # its cost from an empty run cache (chapter.yaml's cpu_cold_s), not this run's 49 s
    cold = config.get_chapter("07_optimizers").get("cpu_cold_s")
    assert "papermill notebooks/07_optimizers.ipynb" in last and f"about {cold} s" in last
    assert "49 s" not in last and "49 s" in cells[-1].source
    parameters = [c for c in cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert parameters and parameters[0].metadata["tags"] == ["injected-parameters", "remove-cell"]
    # a second refresh with the same record changes nothing: one section, the tag once
    assert not book_pages.refresh_chapter_page(path, RECORD, None, tmp_path)


def test_a_plot_shown_by_plotting_show_becomes_a_numbered_figure_with_caption_and_alt_text(
        tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from IPython.core.interactiveshell import InteractiveShell
    from replicate import plotting

    # What the kernel emits: the display's metadata, as IPython attaches it to the output.
    shell = InteractiveShell.instance()
    emitted = []
    shell.display_pub.publish = lambda data, metadata=None, **kw: emitted.append(metadata)
    fig, _ = plt.subplots()
    plotting.show(fig, "fig-07-loss", caption="The loss falls. Preset cpu, seed 0.",
                  alt="A line plot of loss  against step.")
    assert emitted and not plt.get_fignums()  # shown once, then closed
    path = _notebook(tmp_path)
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].outputs = [nbformat.v4.new_output("display_data", data={"image/png": "iVBOR"},
                                                  metadata=emitted[0])]
    nbformat.write(nb, path)
    book_pages.refresh_chapter_page(path, RECORD, None, tmp_path)
    code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"][0]
    assert code.metadata["mystnb"] == {
        "figure": {"name": "fig-07-loss", "caption": "The loss falls. Preset cpu, seed 0."},
        "image": {"alt": "A line plot of loss against step."}}
    assert not book_pages.refresh_chapter_page(path, RECORD, None, tmp_path)


def test_a_figure_needs_a_label_a_caption_and_an_alt_text():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pytest
    from replicate import plotting

    fig, _ = plt.subplots()
    for name, caption, alt in [("Fig 1", "c", "a"), ("fig-01-x", "", "a"), ("fig-01-x", "c", " ")]:
        with pytest.raises(ValueError):
            plotting.show(fig, name, caption, alt)
    plt.close(fig)


def test_across_seeds_goes_before_what_this_shows_when_the_chapter_has_it(tmp_path):
    path = _notebook(tmp_path)
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(2, nbformat.v4.new_markdown_cell("## What this shows\n\nIt reproduced."))
    nbformat.write(nb, path)
    book_pages.refresh_chapter_page(path, RECORD, SEEDS, tmp_path)
    headings = [c.source.split("\n")[0] for c in nbformat.read(path, as_version=4).cells
                if c.cell_type == "markdown"]
    assert headings[-5:] == ["## Across seeds", "## What this shows", "## Try this",
                             "## Run this chapter yourself", ":::{dropdown} How this page was made"]


def test_figures_and_exercises_are_numbered_within_their_chapter():
    from types import SimpleNamespace
    from replicate.harness import book_sphinx

    assert book_sphinx.chapter_number("book/claims/04_grokalign_speedup") == 4
    assert book_sphinx.chapter_number("book/judging/04_grokalign_speedup") is None
    assert book_sphinx.chapter_number("book/intro") is None
    # As Sphinx numbers them when the table of contents is not numbered: across the book.
    env = SimpleNamespace(toc_fignumbers={
        "book/claims/04_grokalign_speedup": {"figure": {"b": (12,), "a": (11,)},
                                             "exercise": {"ex-04-small": (9,)}},
        "book/claims/08_predicting_grokking": {"exercise": {"x": (23,), "y": (24,)}},
        "book/benchmarks": {"table": {"t": (3,)}}})
    book_sphinx._number_within_chapters(None, env)
    assert env.toc_fignumbers == {
        "book/claims/04_grokalign_speedup": {"figure": {"a": (4, 1), "b": (4, 2)},
                                             "exercise": {"ex-04-small": (4, 1)}},
        "book/claims/08_predicting_grokking": {"exercise": {"x": (8, 1), "y": (8, 2)}},
        "book/benchmarks": {"table": {"t": (1,)}}}


def test_across_seeds_shows_k_of_n_failing_seeds_and_the_spread():
    text = book_pages.across_seeds_section(RECORD, SEEDS)
    assert "not robust: 1/3 seeds reproduce" in text
    assert "| sgd does not | claim | 1/3 (fails for seed 0, 2) |" in text
    assert "0.02 ± 0.01" in text and "[-0.005, 0.045]" in text
    assert "0.02 [0.01, 0.03]" in text  # median [range]


def test_across_seeds_says_when_the_seed_changes_nothing_and_names_unmatched_checks():
    same = dict(SEEDS, values=[dict(SEEDS["values"][0], sd=0.0, ci95=[0.02, 0.02],
                                     per_seed={"0": 0.02, "1": 0.02, "2": 0.02 + 1e-12})],
                unmatched=[{"name": "lr 0.3 check", "seeds": [0, 2]}],
                failed=[{"seed": 4, "overrides": {}, "error": "cell 3 failed"}])
    text = book_pages.across_seeds_section(RECORD, same)
    assert "nothing this chapter computes depends on the seed" in text
    assert "(identical in every seed)" in text
    assert "lr 0.3 check (seeds 0, 2)" in text and "seed 4 (cell 3 failed)" in text
    assert "nothing this chapter" not in book_pages.across_seeds_section(RECORD, SEEDS)
    assert "identical in every seed" not in book_pages.across_seeds_section(RECORD, SEEDS)
    one = dict(SEEDS, n=1, seeds=[0], robust=None, reproduced={"k": 1, "n": 1},
               values=[dict(SEEDS["values"][0], n=1, sd=None, ci95=None)])
    assert "too few seeds to say" in book_pages.across_seeds_section(RECORD, one)


def test_scoreboard_has_the_across_seeds_column_and_flags_mixed_commits():
    page = scoreboard.render([RECORD, dict(RECORD, chapter="03_centroid_ntk", git_commit="def+dirty")],
                             {"07_optimizers": SEEDS})
    assert "| At `cpu`: seeds reproducing |" in page and "not robust: 1/3 seeds reproduce" in page
    assert "not yet run across seeds" in page
    assert "from different or uncommitted code" in page and "`def+dirty`" in page
    clean = scoreboard.render([RECORD])
    assert "All chapters were executed from commit `abc123`." in clean


def _seeds_with(values, checks=None):
    return dict(SEEDS, checks=checks or SEEDS["checks"], values=values)


def _row(text, check):
    return next(line for line in text.splitlines() if line.startswith(f"| {check}"))


def test_across_seeds_escapes_a_pipe_in_any_cell_so_the_row_keeps_its_six_cells():
    values = [dict(SEEDS["values"][0], key="|dcos|")]
    row = _row(book_pages.across_seeds_section(RECORD, _seeds_with(values)), "adam reaches it")
    assert "\\|dcos\\|: 0.02" in row
    assert len(row.replace("\\|", "").strip("|").split("|")) == 6


def test_across_seeds_shows_step_counts_as_integers_and_float_noise_as_exact():
    steps = dict(SEEDS["values"][0], mean=24716.7, sd=1203.4, ci95=[21727.1, 27706.3],
                 median=24000.0, range=[24000.0, 26000.0],
                 per_seed={"0": 24000.0, "1": 26000.0, "2": 24150.0})
    text = _row(book_pages.across_seeds_section(RECORD, _seeds_with([steps])), "adam reaches it")
    assert "24717 ± 1203" in text and "[21727, 27706]" in text and "e+0" not in text
    noise = dict(SEEDS["values"][0], mean=0.00748, sd=9.7e-19, ci95=[0.00748, 0.00748],
                 per_seed={"0": 0.00748, "1": 0.00748 + 1e-18, "2": 0.00748})
    text = _row(book_pages.across_seeds_section(RECORD, _seeds_with([noise])), "adam reaches it")
    assert "0.00748 ± 0 (identical in every seed)" in text and "e-19" not in text


def test_across_seeds_leaves_out_a_row_with_nothing_to_show():
    checks = SEEDS["checks"] + [{"name": "architecture", "kind": "report", "k": 0, "n": 3}]
    text = book_pages.across_seeds_section(RECORD, _seeds_with(SEEDS["values"], checks))
    assert "architecture" not in text and "| sgd does not |" in text


def test_scoreboard_opens_with_the_headline_and_a_short_row_per_chapter(tmp_path):
    page = scoreboard.render([RECORD], {"07_optimizers": SEEDS}, tmp_path)
    assert "**fragile, passing in some seeds and failing in others**: 07 · Optimisers on ravines" in page
    assert "**not yet run**: 01 · Delayed robustness" in page
    row = _row(page, "07 · Optimisers on ravines")
    assert row.count("|") == 5 and "verdict-badge fragile" in row
    assert "</span> | 1/3 | not run |" in row
    assert RECORD["claim"] not in row and RECORD["claim"] in page  # the claim is further down
    assert "not yet run" in _row(page, "03 · Centroid alignment vs NTK")


def test_a_paper_verdict_at_a_reduced_size_says_so_in_the_box_and_in_the_scoreboards_cell(
        tmp_path, monkeypatch):
    from replicate.config import get_chapter

    monkeypatch.setitem(get_chapter("07_optimizers").meta, "paper_reduced",
                        {"iterations": {"used": 500, "why": "about 2 h a seed here, not 20"}})
    paper = dict(RECORD, preset="paper", overrides={"iterations": 500}, reproduced=False,
                 checks=[dict(RECORD["checks"][0], passed=False)])
    page = scoreboard.render([RECORD], {"07_optimizers": SEEDS}, tmp_path, {"07_optimizers": (paper, None)})
    assert _row(page, "07 · Optimisers on ravines").endswith("| not reproduced 0/1 at iterations=500 |")
    line = book_pages.paper_summary("07_optimizers", paper, None)
    assert ("Reduced to fit this CPU: iterations 500 where the paper has 10000 (about 2 h a seed here, "
            "not 20)") in line
    as_is = dict(paper, overrides={})
    assert "Reduced" not in book_pages.paper_summary("07_optimizers", as_is, None)
    assert "at iterations" not in book_pages.paper_summary("07_optimizers", as_is, None, short=True)


def test_the_paper_verdict_stands_beside_the_cpu_one_with_its_seeds_device_and_data_limits(tmp_path):
    paper = dict(RECORD, preset="paper", reproduced=True, duration_s=312.0, gpu="NVIDIA H200",
                 device="cuda (NVIDIA H200)", checks=[dict(RECORD["checks"][0])],
                 data_limits={"n_per_class": {"asked": 512, "used": 500, "why": "the split holds 500"}})
    paper_seeds = dict(SEEDS, preset="paper", reproduced={"k": 4, "n": 5})
    page = scoreboard.render([RECORD], {"07_optimizers": SEEDS}, tmp_path,
                             {"07_optimizers": (paper, paper_seeds)})
    row = _row(page, "07 · Optimisers on ravines")
    assert row.endswith("| reproduced 1/1 (4/5 seeds) |")
    assert _row(page, "03 · Centroid alignment vs NTK").endswith("| not run |")  # no estimate
    line = book_pages.paper_summary("07_optimizers", paper, None)
    assert line.startswith("reproduced, 1/1 claim checks pass, seed 0")
    assert "n_per_class 500 where the paper has 512 (the split holds 500)" in line
    # how it was made goes to the page's folded box at the end, not the verdict
    assert "312 s" not in line and "NVIDIA H200" not in line
    made = book_pages.provenance_box(RECORD, SEEDS, paper)
    assert "At the paper's settings: 312 s on cuda (NVIDIA H200), code at commit `abc123`" in made
    box = book_pages.verdict_box(RECORD, SEEDS, None, paper, paper_seeds)
    assert "**At the paper's settings:** reproduced, 1/1 claim checks pass; 4 of 5 seeds" in box
    assert "**At the paper's settings:** not run." in book_pages.verdict_box(RECORD, SEEDS, None)
    same = dict(paper_seeds, deterministic=True, reproduced={"k": 5, "n": 5})
    assert _row(scoreboard.render([RECORD], {}, tmp_path, {"07_optimizers": (paper, same)}),
                "07 · Optimisers on ravines").endswith("| reproduced 1/1 (deterministic) |")
    assert ", the same at 5 seeds (deterministic)." in book_pages.paper_summary("07_optimizers", paper, same)
    # where it has not run, the chapter's measured estimate, if it has one
    assert book_pages.paper_summary("07_optimizers", None, None).startswith("not executed")


def test_the_intro_summary_goes_under_the_title_and_is_replaced_not_repeated(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "07_optimizers.json").write_text(json.dumps(RECORD))
    intro = tmp_path / "intro.md"
    intro.write_text("# The book\n\nWritten by hand.\n")
    first = scoreboard.write_intro_summary(results, intro).read_text()
    assert first.startswith("# The book\n\n" + scoreboard.INTRO_START)
    assert "**not reproduced**: 07 · Optimisers on ravines" in first
    assert first.rstrip().endswith("Written by hand.")
    assert scoreboard.write_intro_summary(results, intro).read_text() == first


def test_published_scoreboard_and_intro_match_the_results_files(tmp_path):
    from replicate.runtime import BOOK_DIR

    results = BOOK_DIR / "results"
    found = {ch: s for ch in config.chapters() if (s := load_seeds(ch, results))}
    assert (BOOK_DIR / "scoreboard.md").read_text() == scoreboard.render(
        scoreboard.load_results(results), found, BOOK_DIR / "claims", scoreboard.load_papers(results))
    intro = tmp_path / "intro.md"
    intro.write_text((BOOK_DIR / "intro.md").read_text())
    scoreboard.write_intro_summary(results, intro, BOOK_DIR / "claims")
    assert intro.read_text() == (BOOK_DIR / "intro.md").read_text()


def test_about_page_cites_the_book_names_the_licences_and_is_in_the_toc(tmp_path):
    book_config = {"title": "Grokking, replicated", "author": "The authors", "copyright": "2026",
              "html": {"repository_url": ""}}
    page = scoreboard.render_about(book_config, tmp_path)
    assert "@misc{grokking_replicated," in page and "author = {{The authors}}" in page
    assert f"version = {{{scoreboard.BUILD_COMMIT}}}" in page
    assert "url =" not in page and page.count("no licence file") == 2 and "CC BY-SA 3.0" in page
    assert "MIT" not in page and "CC BY 4.0" not in page
    (tmp_path / "LICENSE").write_text("MIT")
    book_config["html"]["repository_url"] = "https://example.org/book"
    page = scoreboard.render_about(book_config, tmp_path)
    assert "url = {https://example.org/book}" in page
    assert "MIT licence (the project's `LICENSE` file)" in page
    assert page.count("no licence file") == 1 and "CC BY 4.0" not in page
    (tmp_path / "LICENSE-book").write_text("CC BY 4.0")
    page = scoreboard.render_about(book_config, tmp_path)
    assert "no licence file" not in page and "`LICENSE-book` file" in page and "CC BY 4.0" in page
    (tmp_path / "about.md").write_text(page)
    toc = scoreboard.write_toc(tmp_path / "claims", tmp_path / "_toc.yml").read_text()
    assert "file: book/about" in toc


def test_the_project_grants_mit_for_the_code_and_cc_by_for_the_text_and_figures():
    code, book = (PROJECT_ROOT / "LICENSE").read_text(), (PROJECT_ROOT / "LICENSE-book").read_text()
    assert code.startswith("MIT License") and "Permission is hereby granted" in code
    assert "CC BY 4.0" in book and "creativecommons.org/licenses/by/4.0" in book
    assert "CC BY-SA 3.0" in book and "LICENSE" in book  # the exceptions: MNIST and the code
    footer = yaml.safe_load((PROJECT_ROOT / "_config.yml").read_text())["html"]["extra_footer"]
    assert all(name in footer for name in ("CC BY 4.0", "MIT", "CC BY-SA 3.0"))
    about = scoreboard.render_about(yaml.safe_load((PROJECT_ROOT / "_config.yml").read_text()),
                                    PROJECT_ROOT)
    assert "MIT licence" in about and "CC BY 4.0" in about and "no licence" not in about


def test_benchmarks_page_calls_the_papers_code_authors_code_not_seed():
    page = scoreboard.render_page({"threads": 2, "rows": []})
    # The comparison column holds peers now; a figure recorded for the papers' code names it so.
    assert "| Peer (version) |" in page and "| Seed |" not in page and "*Seed*" not in page
    assert scoreboard.RECORDED.startswith("authors' code")


def test_an_inconclusive_seed_is_named_apart_from_failing_ones_with_every_diagnosis():
    checks = [SEEDS["checks"][0], dict(SEEDS["checks"][1], inconclusive_seeds=[2], diagnoses={
        "0": "sgd reached 0.5", "2": "did not grok within 6,000 steps"})]
    seeds = dict(SEEDS, checks=checks, inconclusive_seeds=[2])
    text = book_pages.across_seeds_section(RECORD, seeds)
    assert "| 1/3 (fails for seed 0) (inconclusive for seed 2) |" in text
    assert "1 seed inconclusive" in text
    assert "- *sgd does not*, seed 0: sgd reached 0.5" in text
    assert "- *sgd does not*, seed 2: did not grok within 6,000 steps" in text
    untested = dict(RECORD, checks=[*RECORD["checks"][:1], dict(
        RECORD["checks"][1], inconclusive=True, diagnosis="did not grok within 6,000 steps")])
    box = book_pages.verdict_box(untested, seeds, None)
    assert "Verdict: not reproduced, 1/2 claim checks pass, 1 inconclusive" in box
    assert "INCONCLUSIVE" in verdict.checks_table_html(untested["checks"])


def test_the_papers_numbers_sit_beside_our_interval_in_words(monkeypatch):
    entry = {"check": "adam reaches it", "what": "final loss", "paper": 0.05}
    import dataclasses

    chapter = config.chapters()["07_optimizers"]
    monkeypatch.setitem(config.chapters(), "07_optimizers", dataclasses.replace(
        chapter, meta={**chapter.meta, "paper_numbers": [
            entry, dict(entry, paper=[0.0, 0.015], what="a band"),
            dict(entry, check="missing", what="gone")]}))
    three = dict(SEEDS, values=[dict(SEEDS["values"][0], ci95=None)])  # too few for an interval
    text = book_pages.across_seeds_section(RECORD, three)
    assert "| final loss | [0.01, 0.03] (range over 3 seeds) | 0.05 | below |" in text
    assert "| a band | [0.01, 0.03] (range over 3 seeds) | 0–0.015 | consistent |" in text
    assert "| gone | not measured in these seeds | 0.05 | — |" in text
    five = dict(SEEDS, values=[dict(SEEDS["values"][0], n=5, ci95=[0.06, 0.07])])
    assert "[0.06, 0.07] (95% interval) | 0.05 | above |" in book_pages.across_seeds_section(
        RECORD, five)


def test_every_papers_number_names_a_check_the_published_chapter_has():
    for name, chapter in config.chapters().items():
        record = next((r for r in scoreboard.load_results(BOOK_DIR / "results")
                       if r["chapter"] == name), None)
        paper, _ = book_pages.load_paper(name, BOOK_DIR / "results")
        for entry in chapter.get("paper_numbers") or []:
            assert record, f"{name} lists paper numbers but has no published results"
            # by its id (or its name, in a chapter published before ids), in the cpu run or in
            # the published paper run (chapter 04's paper point runs only at `paper`)
            checks = record["checks"] + (paper["checks"] if paper else [])
            keys = {c["name"] for c in checks} | {c.get("id") for c in checks}
            assert entry["check"] in keys, (name, entry)


def test_a_papers_number_measured_only_at_paper_comes_from_the_paper_seeds(monkeypatch):
    import dataclasses

    chapter = config.chapters()["07_optimizers"]
    entry = {"check": "paper-only", "what": "a factor", "paper": [6.74, 8.38]}
    monkeypatch.setitem(config.chapters(), "07_optimizers", dataclasses.replace(
        chapter, meta={**chapter.meta, "paper_numbers": [entry]}))
    paper_seeds = _seeds_with([dict(SEEDS["values"][0], id="paper-only", key=None, n=3,
                                    ci95=None, range=[5.2, 5.8])])
    text = book_pages.across_seeds_section(RECORD, _seeds_with(SEEDS["values"]), paper_seeds)
    assert "| a factor | [5.2, 5.8] (range over 3 seeds, at `paper`) | 6.74–8.38 | below |" in text
    text = book_pages.across_seeds_section(RECORD, _seeds_with(SEEDS["values"]))
    assert "| a factor | not measured in these seeds |" in text


def test_a_deterministic_chapter_says_its_seeds_count_as_one_run():
    same = dict(SEEDS, deterministic=True, robust=None, reproduced={"k": 3, "n": 3})
    assert book_pages.seeds_summary(same).startswith("deterministic: all 3 seeds give the same")
    row = next(line for line in scoreboard.summary_table([RECORD], {"07_optimizers": same},
                                                         BOOK_DIR / "claims")
               if "07" in line and "|" in line)
    assert "3/3 deterministic |" in row and "pass rate" not in row


def test_the_papers_numbers_find_their_check_by_its_id_or_by_its_name(monkeypatch):
    import dataclasses

    chapter = config.chapters()["07_optimizers"]
    by_id = {"check": "adam-final-loss", "what": "final loss, by id", "paper": 0.05}
    by_name = {"check": "adam reaches it", "what": "final loss, by name", "paper": 0.05}
    monkeypatch.setitem(config.chapters(), "07_optimizers", dataclasses.replace(
        chapter, meta={**chapter.meta, "paper_numbers": [by_id, by_name]}))
    value = dict(SEEDS["values"][0], id="adam-final-loss")
    text = book_pages.across_seeds_section(RECORD, _seeds_with([value]))
    assert "| final loss, by id | [-0.005, 0.045] (95% interval)" in text
    assert "| final loss, by name | [-0.005, 0.045] (95% interval)" in text
    # a seeds file written before ids: only the name can find it
    text = book_pages.across_seeds_section(RECORD, _seeds_with(SEEDS["values"]))
    assert "| final loss, by id | not measured in these seeds" in text
    assert "| final loss, by name | [-0.005, 0.045] (95% interval)" in text


def test_the_across_seeds_table_pairs_each_check_with_its_numbers_by_id():
    # Two checks that once shared a name: the numbers go to the check with their id, not the name.
    checks = [dict(SEEDS["checks"][0], id="adam-loss"),
              dict(SEEDS["checks"][1], id="sgd-loss", name="adam reaches it, again")]
    values = [dict(SEEDS["values"][0], id="sgd-loss", check="adam reaches it, again")]
    text = book_pages.across_seeds_section(RECORD, _seeds_with(values, checks))
    assert "0.02 ± 0.01" in _row(text, "adam reaches it, again")
    assert "0.02" not in _row(text, "adam reaches it |")


def test_the_scoreboard_says_why_each_verdict_that_fails_fails_at_each_setting(tmp_path):
    failing = dict(RECORD, checks=[dict(RECORD["checks"][0], passed=False, ours=0.2),
                                   dict(RECORD["checks"][0], name="second", passed=False, ours=3)])
    paper = dict(RECORD, preset="paper", reproduced=True, checks=[dict(RECORD["checks"][0])])
    page = scoreboard.render([failing], {}, tmp_path, {"07_optimizers": (paper, None)})
    why = page.split("## Why a claim does not hold", 1)[1].split(":::", 1)[0]
    # every failing check, each on its own line (never "and N more"); the paper run passes
    assert [ln for ln in why.splitlines() if ln.startswith("- ")] == [
        "- **07 · Optimisers on ravines** at `cpu`:"]
    assert [ln for ln in why.splitlines() if ln.startswith("  - ")] == [
        '  - <span class="finding">adam reaches it: fail</span>',
        '  - <span class="finding">second: fail</span>']
    assert "more" not in why
    assert "**reproduced at the paper's settings but not at our reduction**: 07 · Optimisers on ravines" in page
    # one failing check of two: only it is named
    assert scoreboard.why_not([RECORD]) == ["- **07 · Optimisers on ravines** at `cpu`:",
                                            '  - <span class="finding">sgd does not: fail</span>', ""]
    assert scoreboard.why_not([dict(RECORD, checks=[RECORD["checks"][0]])]) == []
    # with seeds: how many seeds pass each check; a check the published run passes but another
    # seed fails is listed too, said as the published run's
    seeds = {"reproduced": {"k": 1, "n": 5},
             "checks": [{"name": "sgd does not", "kind": "claim", "k": 1, "n": 5},
                        {"name": "adam reaches it", "kind": "claim", "k": 4, "n": 5}]}
    lines = scoreboard.why_not([RECORD], seeds={"07_optimizers": seeds})
    assert lines[1:3] == ['  - <span class="finding">Seed 0 passes: adam reaches it: pass</span> '
                          '(4 of 5 seeds pass)',
                          '  - <span class="finding">sgd does not: fail</span> (1 of 5 seeds pass)']
    paper_lines = scoreboard.why_not([], {"07_optimizers": (dict(RECORD, preset="paper"), seeds)})
    assert paper_lines[0] == "- **07 · Optimisers on ravines** at `paper`:"
    # a claim that holds in every seed has no entry, whatever one check's published value
    assert scoreboard.why_not([RECORD], seeds={"07_optimizers": dict(
        seeds, reproduced={"k": 5, "n": 5})}) == []


def test_a_claims_state_comes_from_its_seeds_at_both_settings():
    state = scoreboard.claim_state
    ok, bad = dict(RECORD, reproduced=True), dict(RECORD, reproduced=False)
    seeds = lambda k, n=5: {"reproduced": {"k": k, "n": n}}  # noqa: E731
    assert state(ok, seeds(5), ok, seeds(5)) == "reproduced"
    assert state(ok, seeds(5), bad, seeds(0)) == "reduced-only"
    assert state(ok, seeds(5), None, None) == "paper-not-run"
    # the published run passes, but two seeds of five fail: fragile, not reproduced
    assert state(ok, seeds(3), None, None) == "fragile"
    assert state(ok, seeds(5), ok, seeds(2)) == "fragile"
    assert state(bad, seeds(0), None, None) == "not-reproduced"
    assert state(bad, seeds(0), ok, None) == "paper-only"
    # without seeds, the one run decides; deterministic seeds are one run
    assert state(bad, None, None, None) == "not-reproduced"
    assert state(ok, dict(seeds(5), deterministic=True), bad, None) == "reduced-only"
    assert state(None, None, None, None) == "not-yet-run"


def test_the_theme_keeps_the_rules_of_the_icons_in_use_and_drops_the_others():
    from replicate.harness.book_sphinx import used_icon_rules

    css = ('.a{color:red}.fa-bars:before,.fa-navicon:before{content:"\\f0c9"}'
           '.fa-moon:before{content:"\\f186"}.fa-sun:before{content:"\\f185"}.b{margin:0}')
    kept = used_icon_rules(css, {"fa-bars", "fa-sun", "fa-lg"})
    assert kept == '.a{color:red}.fa-bars:before,.fa-navicon:before{content:"\\f0c9"}' \
                   '.fa-sun:before{content:"\\f185"}.b{margin:0}'
    assert used_icon_rules(css, set()) == ".a{color:red}.b{margin:0}"


def test_the_judging_appendix_is_an_index_with_one_page_per_chapter(tmp_path):
    judging = tmp_path / "judging"
    judging.mkdir()
    for chapter in ("03_centroid_ntk", "01_delayed_robustness"):
        (judging / f"{chapter}.md").write_text(f"(judging-{chapter})=\n# {chapter}\n")
    index = scoreboard.write_judging(judging, tmp_path / "judging.md", tmp_path / "results").read_text()
    assert "{include}" not in index
    links = [line for line in index.splitlines() if line[:1].isdigit()]
    assert [line.split("<")[-1] for line in links] == [
        "judging/01_delayed_robustness>`", "judging/03_centroid_ntk>`"]
    toc = yaml.safe_load(scoreboard.write_toc(tmp_path / "claims", tmp_path / "_toc.yml").read_text())
    appendix = next(p for p in toc["parts"] if p["caption"] == "Appendix")["chapters"][0]
    assert appendix["file"] == "book/judging" and [s["file"] for s in appendix["sections"]] == [
        "book/judging/01_delayed_robustness", "book/judging/03_centroid_ntk"]
    assert "book/changes" not in [c["file"] for c in next(
        p for p in toc["parts"] if p["caption"] == "Appendix")["chapters"]]
    (tmp_path / "changes.md").write_text("# Changes\n")
    toc = yaml.safe_load(scoreboard.write_toc(tmp_path / "claims", tmp_path / "_toc.yml").read_text())
    assert next(p for p in toc["parts"] if p["caption"] == "Appendix")["chapters"][-1] == {
        "file": "book/changes"}
    # every published chapter's judging page opens with the one title a page needs
    for page in sorted((BOOK_DIR / "judging").glob("*.md")):
        titles = [line for line in page.read_text().splitlines() if line.startswith("# ")]
        assert len(titles) == 1 and titles[0][2:4] == page.name[:2], page.name


def test_the_scoreboards_checks_read_as_text_and_a_failure_stands_out():
    assert scoreboard.readable({"settled at step": 60, "T": 40000, "final": 0.9032}) == \
        "settled at step 60, T 40,000, final 0.903"
    assert scoreboard.readable({"clipped": [21, 0.4799], "shrunk": True}) == "clipped (21, 0.48), shrunk yes"
    assert scoreboard.readable(15400.0) == "15,400" and scoreboard.readable(0.03483) == "0.0348"
    record = {**RECORD, "checks": [
        {"name": "a", "kind": "claim", "passed": True, "ours": {"T": 40000}, "paper": "p"},
        {"name": "b", "kind": "claim", "passed": False, "ours": 1.5, "paper": "p"},
        {"name": "c", "kind": "claim", "passed": False, "inconclusive": True, "ours": 2, "paper": "p"}]}
    page = scoreboard.render([record])
    assert "| a | claim | PASS | T 40,000 | p |" in page and "{" not in page.split("| Check |")[-1]
    assert "| b | claim | **FAIL** |" in page and "| c | claim | **INCONCLUSIVE** |" in page


def test_the_intro_says_what_holds_in_words_and_points_to_why_the_rest_fails(tmp_path):
    intro = tmp_path / "intro.md"
    intro.write_text("# Title\n\nText by hand.\n")
    text = scoreboard.write_intro_summary(BOOK_DIR / "results", intro, BOOK_DIR / "claims").read_text()
    first = text.split(scoreboard.INTRO_START, 1)[1].strip().split("\n\n", 1)[0]
    assert first.startswith("Of the 10 claims, judged across seeds:")
    for state in set(scoreboard.states(scoreboard.load_results(BOOK_DIR / "results"), {
            ch: s for ch in config.chapters() if (s := load_seeds(ch, BOOK_DIR / "results"))},
            scoreboard.load_papers(BOOK_DIR / "results")).values()):
        assert state == "not-yet-run" or "**" in first
    assert "{ref}`scoreboard <why-not-reproduced>`" in text
    fold = text.split(scoreboard.TEXTS["reading_header"], 1)[1].split(scoreboard.INTRO_END)[0]
    assert "Clopper-Pearson" in fold and "Text by hand." in text


def test_reader_pages_name_no_commit_but_their_own_and_the_changes_page_keeps_the_history():
    # A judging page describes how a claim is judged; which commit an experiment ran at is
    # history, kept on the Changes page.
    sha = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,12}\b")
    for page in sorted((BOOK_DIR / "judging").glob("*.md")):
        text = page.read_text()
        assert not sha.findall(text) and "earlier version" not in text, page.name
    assert len(sha.findall((BOOK_DIR / "changes.md").read_text())) >= 5


def test_a_figure_stored_with_a_palette_looks_the_same_and_weighs_less(tmp_path):
    import matplotlib.pyplot as plt
    import numpy as np
    from PIL import Image
    from replicate.harness.book_sphinx import palette_png
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    steps = np.arange(1, 1001)
    for k, color in enumerate(["C0", "C1", "C2"]):
        ax.plot(steps, np.tanh(steps / (100 * (k + 1))), color=color, label=f"run {k}")
    ax.set_xscale("log"); ax.legend(); ax.grid(True)  # noqa: E702
    path = tmp_path / "figure.png"
    fig.savefig(path)
    plt.close(fig)

    def pixels():
        with Image.open(path) as image:
            return image.mode, np.asarray(image.convert("RGB"), float)
    before, (_, original) = path.stat().st_size, pixels()
    assert palette_png(path)
    mode, after = pixels()
    assert mode == "P" and path.stat().st_size < 0.6 * before and after.shape == original.shape
    # flat areas and lines keep their colour; only a few antialiased edge pixels move visibly
    moved = np.abs(after - original).max(axis=2)
    assert moved.mean() < 0.5 and np.percentile(moved, 99.9) <= 16
    assert not palette_png(path)  # a palette PNG is left as it is


def _typesetter_or_skip():
    import os

    import pytest
    from replicate.harness.book_sphinx import math_typesetter
    if math_typesetter() is None:
        reason = "node or typeset/node_modules is missing (make venv installs it)"
        if os.environ.get("REPLICATE_REQUIRE_BROWSER") == "1":  # CI builds the book it weighs
            pytest.fail(f"the book's math typesetter is required in CI but {reason}")
        pytest.skip(reason)


PAGE = """<html><head><title>t</title></head><body class="x">
<p>A ratio <span class="math notranslate nohighlight">\\(\\frac{a}{b} &lt; 1\\)</span> inline.</p>
<div class="math notranslate nohighlight">
\\[\\lVert J(x) \\rVert_F^2 = \\sum_{ij} J_{ij}^2\\]</div>
</body></html>"""


def test_the_build_typesets_tex_as_svg_with_mathml_for_screen_readers(tmp_path):
    from replicate.harness.book_sphinx import MATH_CACHE_ID, typeset_math
    _typesetter_or_skip()
    page, plain = tmp_path / "page.html", tmp_path / "plain.html"
    page.write_text(PAGE)
    plain.write_text("<html><head></head><body><p>No math.</p></body></html>")
    assert typeset_math([page, plain]) == 2
    html = page.read_text()
    assert "\\frac" not in html and "\\(" not in html and "\\[" not in html
    assert html.count("<mjx-container") == 2 and html.count('display="true"') >= 1
    # what a screen reader reads: the formula's MathML, with the entity decoded into "<"
    assert "<mfrac><mi>a</mi><mi>b</mi></mfrac><mo>&lt;</mo><mn>1</mn>" in html
    # the glyphs once, at the top of the body, referenced by every formula; the style in <head>
    assert html.index(MATH_CACHE_ID) < html.index("<p>") and 'xlink:href="#MJX-' in html
    assert html.index('id="MJX-SVG-styles"') < html.index("</head>")
    assert plain.read_text() == "<html><head></head><body><p>No math.</p></body></html>"
    assert typeset_math([page]) == 0 and page.read_text() == html  # a typeset page is left alone


def test_tex_the_typesetter_cannot_read_stops_the_build_with_the_formula(tmp_path):
    import pytest
    from replicate.harness.book_sphinx import typeset_math
    _typesetter_or_skip()
    page = tmp_path / "page.html"
    page.write_text(PAGE.replace("\\frac{a}{b}", "\\notamacro{a}"))
    with pytest.raises(RuntimeError, match="notamacro"):
        typeset_math([page])


def test_pages_load_mathjax_only_where_the_build_cannot_typeset(monkeypatch):
    from types import SimpleNamespace

    from replicate.harness import book_sphinx

    def script(filename, body=""):
        return SimpleNamespace(filename=filename, attributes={"body": body} if body else {})
    scripts = [script("_static/doctools.js"), script(None, body="window.MathJax = {}"),
               script("mathjax/startup.js"), script("_static/doctools.js")]
    for typesetter, expected in [(["node"], ["_static/doctools.js"]),
                                 (None, ["_static/doctools.js", None, "mathjax/startup.js"])]:
        monkeypatch.setattr(book_sphinx, "math_typesetter", lambda t=typesetter: t)
        context = {"script_files": list(scripts)}
        book_sphinx._scripts_a_page_loads(None, "p", "page.html", context, None)
        assert [s.filename for s in context["script_files"]] == expected
