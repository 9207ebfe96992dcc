"""Every chapter executes at the smoke preset, and nbval re-executes it to the same verdict."""
import json
import os
import re
import subprocess
import sys

import pytest

from replicate import config
from replicate.runtime import PROJECT_ROOT
from replicate.harness.book_sphinx import number_text, paper_substitutions
from replicate.harness.validate import SANITIZE_FILE
from replicate.verdict import unique_ids

CHAPTERS = list(config.chapters())


def test_source_notebooks_are_stripped_and_have_a_verdict_cell():
    for ch in config.chapters().values():
        nb = json.loads(ch.notebook.read_text())
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert not any(c.get("outputs") for c in code), f"{ch.notebook} carries outputs"
        verdict = [c for c in code if "".join(c["source"]).startswith("# NBVAL_CHECK_OUTPUT")]
        assert len(verdict) == 1, f"{ch.notebook} needs one verdict cell"
        assert "run.verdict(" in "".join(verdict[0]["source"])
        # nbformat 4.5 wants an id on every cell, and says so at every execution otherwise
        ids = [c.get("id") for c in nb["cells"]]
        assert all(ids) and len(set(ids)) == len(ids), f"{ch.notebook}: cells without an id"


def _cells(chapter):
    return json.loads(config.get_chapter(chapter).notebook.read_text())["cells"]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_source_notebooks_read_well_in_the_book(chapter):
    cells = _cells(chapter)
    too_long = [line for c in cells for line in "".join(c["source"]).splitlines() if len(line) > 100]
    assert not too_long, f"lines over 100 characters run off the book's column: {too_long[:3]}"
    tags = {i: c["metadata"].get("tags", []) for i, c in enumerate(cells)}
    source = {i: "".join(c["source"]) for i, c in enumerate(cells)}
    params = [i for i, t in tags.items() if "parameters" in t]
    verdict = [i for i, s in source.items() if s.startswith("# NBVAL_CHECK_OUTPUT")]
    save = [i for i, s in source.items() if s.strip() == "run.save();"]
    assert len(params) == 1 and "hide-cell" in tags[params[0]], "defaults cell: collapsed"
    assert len(verdict) == 1 and "hide-cell" in tags[verdict[0]], "plain-text verdict: collapsed"
    assert len(save) == 1 and "remove-input" in tags[save[0]], "checks table: output only"
    title = source[0].splitlines()[0]
    assert title.startswith("# ") and "$" not in title and "\\" not in title, "no TeX in titles"
    assert title[2:] == config.get_chapter(chapter).title


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_chapter_says_what_a_reader_will_learn_before_it_starts(chapter):
    # right after the quoted claim, in the first cell: two to four points
    first = "".join(_cells(chapter)[0]["source"])
    block = re.search(r"```\{admonition\} You will learn\n:class: tip\n\n((?:- .*\n)+)```", first)
    assert block, f"{chapter}: no 'You will learn' box in its first cell"
    assert 2 <= block.group(1).count("\n- ") + 1 <= 4
    assert first.index("> —") < block.start(), "the claim comes first"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_pages_point_to_nothing_outside_the_book(chapter):
    text = config.get_chapter(chapter).notebook.read_text()
    for word in ("CLAIMS.md", "DESIGN.md", "../shared", "the issue"):
        assert word not in text, f"{chapter} mentions {word!r}; say it in the book's own words"


SUBSTITUTION = re.compile(r"\{\{\s*(paper\d\d)\.(\w+)\s*\}\}")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_papers_numbers_come_from_the_chapter_yaml_not_from_the_notebook(chapter):
    # Fractions of three significant digits or more (7.56, 1442.63, 0.996): shorter ones (a
    # ratio of 2.7) and whole numbers (1000 steps) may also be our own.
    text = config.get_chapter(chapter).notebook.read_text()
    for key, number in config.get_chapter(chapter).paper.items():
        values = [number.value, *(number.band or ())]
        typed = [f"{v:g}" for v in values if isinstance(v, float) and v != int(v)
                 and len(f"{v:g}".replace(".", "").lstrip("0")) >= 3]
        for value in typed:
            assert not re.search(rf"(?<![\d.]){re.escape(value)}(?!\d)", text), (
                f"{chapter} types the paper's {key} ({value}): write {{{{ paper{chapter[:2]}."
                f"{key.replace('-', '_')} }}}} instead")


def test_every_paper_number_the_notebooks_name_exists():
    substitutions = paper_substitutions()
    used = [(chapter, *m) for chapter in CHAPTERS
            for m in SUBSTITUTION.findall(config.get_chapter(chapter).notebook.read_text())]
    assert len(used) >= 10
    missing = [u for u in used if u[2] not in substitutions.get(u[1], {})]
    assert not missing, missing


def test_paper_numbers_read_as_the_prose_writes_them():
    assert number_text(7.56) == "7.56" and number_text(1442.63) == "1442.63"
    assert number_text(1.09e15) == "1.09 × 10¹⁵" and number_text(10) == "10"
    assert number_text("not given") == "not given"
    numbers = paper_substitutions()["paper04"]
    assert (numbers["ce_factor"], numbers["ce_factor_sd"]) == ("7.56", "0.82")
    assert (numbers["ce_factor_low"], numbers["ce_factor_high"]) == ("6.74", "8.38")
    assert "mse_factor_sd" not in numbers  # given without a spread
    assert paper_substitutions()["paper06"]["estimators_pearson_pct"] == "99.6%"


def chapter_module(chapter):
    """The chapter's judge and figures: experiments/chapters/<name without its number>.py."""
    return PROJECT_ROOT / "src/replicate/experiments/chapters" / f"{chapter[3:]}.py"


def _figures(chapter):
    """(names shown by plotting.show, in the notebook or the chapter's module, names cited with
    {numref} in the text) of a chapter."""
    cells = _cells(chapter)
    code = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    module = chapter_module(chapter)
    code += module.read_text() if module.exists() else ""
    text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    shown = re.findall(r'plotting\.show\(\s*fig\w*,\s*"(fig-[a-z0-9-]+)"', code)
    return shown, set(re.findall(r"\{numref\}`(fig-[a-z0-9-]+)`", text))


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_figure_is_named_for_its_chapter_cited_in_the_text_and_the_text_cites_no_other(
        chapter):
    shown, cited = _figures(chapter)
    assert shown, f"{chapter} shows no figure through plotting.show"
    number = chapter[:2]
    assert all(name.startswith(f"fig-{number}-") for name in shown), shown
    # A figure that a run may skip is still shown (as an empty panel): a reference to a figure the
    # page does not have fails the book's build. Only a figure that the book's preset never draws
    # (chapter.yaml's `paper_only_figures`: a part that only the `paper` preset runs) goes uncited.
    paper_only = set(config.get_chapter(chapter).get("paper_only_figures") or [])
    assert paper_only <= set(shown) and not paper_only & cited, (paper_only, cited)
    assert set(shown) - paper_only == cited, (set(shown) - paper_only - cited, cited - set(shown))


def test_figure_names_are_unique_across_the_book():
    # (a name twice within one chapter is one figure drawn in two branches of a cell)
    names = [name for chapter in CHAPTERS for name in set(_figures(chapter)[0])]
    assert len(names) == len(set(names)) and len(names) >= 30


def test_notebooks_are_a_few_visible_calls_and_the_judges_live_in_the_library():
    """The verdict logic and the figures are library code (experiments/chapters/); a notebook
    shows the claim, the run, the figures and the verdict in a few visible calls."""
    lines, long_cells = 0, []
    for chapter in CHAPTERS:
        for i, cell in enumerate(_cells(chapter)):
            if cell["cell_type"] == "code":
                n = len("".join(cell["source"]).splitlines())
                lines += n
                long_cells += [f"{chapter} cell {i}: {n} lines"] if n > 40 else []
        assert chapter_module(chapter).exists(), f"{chapter} has no judge module"
        assert "def judge(" in chapter_module(chapter).read_text()
    assert not long_cells, long_cells
    assert lines <= 1300, f"{lines} code lines over all notebooks"


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    env = dict(os.environ, TQDM_DISABLE="1", REPLICATE_CACHE_DIR=str(out / "cache"))
    result = subprocess.run([sys.executable, "-m", "replicate", "run", *CHAPTERS, "--preset", "smoke",
                             "--claims-dir", str(out), "--results-dir", str(out / "results")],
                            cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_executes_at_smoke(smoke_runs, chapter):
    record = json.loads((smoke_runs / "results" / f"{chapter}.json").read_text())
    assert record["preset"] == "smoke" and record["checks"]
    unique_ids(record["checks"])  # every check has a stable id, none used twice


def test_nbval_reexecutes_the_smoke_chapters(smoke_runs):
    env = dict(os.environ, TQDM_DISABLE="1", REPLICATE_CACHE_DIR=str(smoke_runs / "cache"),
               REPLICATE_RESULTS_DIR=str(smoke_runs / "nbval-results"))
    notebooks = [str(smoke_runs / f"{ch}.ipynb") for ch in CHAPTERS]
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                             "--nbval-sanitize-with", str(SANITIZE_FILE), *notebooks],
                            cwd=smoke_runs, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


def test_every_published_check_has_an_id_and_no_record_uses_one_twice():
    """Tolerances, the paper's numbers, the seeds files and the scoreboard key on the ids."""
    book = PROJECT_ROOT / "book"
    records = [*sorted((book / "results").glob("[0-9]*.json")),
               *sorted((book / "results" / "paper").glob("[0-9]*.json")),
               *sorted((book / "sweeps").glob("*/*/[0-9]*.json"))]
    records = [p for p in records if not p.name.endswith(".seeds.json")]
    assert len(records) >= len(CHAPTERS)
    for path in records:
        try:
            unique_ids(json.loads(path.read_text())["checks"])
        except ValueError as err:
            raise AssertionError(f"{path.relative_to(PROJECT_ROOT)}: {err}") from None
