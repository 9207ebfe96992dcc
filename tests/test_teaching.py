"""Course material: `make lab`, the chapters' exercises and their solutions, the teaching page."""
import json
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from replicate import config
from replicate.harness.scoreboard import (exercise_labels, exercise_levels, render_teaching,
                                          write_toc)
from replicate.runtime import PROJECT_ROOT

CHAPTERS = list(config.chapters())
EXERCISE = re.compile(r"^(`{3,})\{exercise\}[^\n]*\n:label: (\S+)\n", re.M)
SOLUTION = re.compile(r"^(`{3,})\{solution\} (\S+)\n((?::[^\n]*\n)*)", re.M)


def _markdown(chapter: str) -> str:
    nb = json.loads(config.get_chapter(chapter).notebook.read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


def _blocks(text: str, pattern: re.Pattern) -> list[tuple[str, str, str]]:
    """(label, options, body) of each directive matched by `pattern`, up to its closing fence."""
    found = []
    for m in pattern.finditer(text):
        fence = m.group(1)
        end = re.compile(rf"^{fence}\s*$", re.M).search(text, m.end())
        assert end, f"directive {m.group(0)!r} is never closed"
        options = m.group(3) if pattern is SOLUTION else ""
        found.append((m.group(2), options, text[m.end():end.start()]))
    return found


def solution_commands(text: str) -> list[str]:
    """Every `python -m replicate run ...` command in a text, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [m.group(0).strip() for m in re.finditer(r"python -m replicate run [^\n`]*", joined)]


def check_command(command: str) -> tuple[str, str, dict]:
    """Parse one solution's command as `run` would; raise ConfigError if it would be refused."""
    argv = shlex.split(command)
    assert argv[:4] == ["python", "-m", "replicate", "run"], command
    args = argv[4:]
    chapters, preset, overrides = [], "cpu", {}
    while args:
        word = args.pop(0)
        if word == "--preset":
            preset = args.pop(0)
        elif word in ("-p", "--param"):
            name, value = args.pop(0), args.pop(0)
            overrides[name] = config.parse_value(value)
        else:
            assert not word.startswith("-"), f"unexpected option {word!r} in {command!r}"
            chapters.append(word)
    assert len(chapters) == 1, f"a solution runs exactly one chapter: {command!r}"
    config.get_chapter(chapters[0])
    config.load_preset(chapters[0], preset)
    config.RunSpec.make(chapters[0], preset, overrides)
    return chapters[0], preset, overrides


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_chapter_has_two_to_four_exercises_with_collapsed_solutions(chapter):
    text = _markdown(chapter)
    exercises = _blocks(text, EXERCISE)
    solutions = {label: (options, body) for label, options, body in _blocks(text, SOLUTION)}
    labels = [label for label, _, _ in exercises]
    assert 2 <= len(labels) <= 4, f"{chapter}: {len(labels)} exercises"
    assert len(set(labels)) == len(labels) and all(lb.startswith("ex-") for lb in labels)
    assert set(solutions) == set(labels), f"{chapter}: each exercise needs one solution"
    assert [lb for lb, _ in exercise_labels(config.get_chapter(chapter).notebook)] == labels
    runs = 0
    levels = exercise_levels(config.get_chapter(chapter).notebook)
    assert set(levels) == set(labels), f"{chapter}: every exercise opens with its level line"
    for label in labels:
        options, body = solutions[label]
        # The level line's run time is the one the solution measured (each number of seconds).
        level = levels[label]
        if solution_commands(body):
            # (a note in parentheses may quote another exercise's time)
            seconds = re.findall(r"(\d[\d,]*) s\b", level["run"].split(" (")[0])
            said = " ".join(body.split())
            assert seconds and all(f"{n} s" in said for n in seconds), (label, level["run"])
        else:
            assert level["run"] == "none: pen and paper" and level["stars"] != "★☆☆", label
        assert ":class: dropdown" in options, f"{label}: the solution must collapse"
        commands = solution_commands(body)
        if commands:
            runs += 1
            # What we measured: a table of numbers and the preset they come from.
            assert re.search(r"^\|.*\d.*\|$", body, re.M), f"{label}: no table of measurements"
            assert "preset" in body, f"{label}: say which preset the numbers come from"
    assert runs >= 1, f"{chapter}: no exercise with a run"
    assert runs < len(labels), f"{chapter}: no conceptual exercise"


def test_the_command_check_refuses_what_run_would_refuse():
    check_command('python -m replicate run 07_optimizers --preset cpu -p iterations 500')
    for bad in ('python -m replicate run 07_optimizer -p iterations 500',
                'python -m replicate run 07_optimizers --preset laptop',
                'python -m replicate run 07_optimizers -p iteration 500',
                'python -m replicate run 07_optimizers -p iterations 0.5',
                'python -m replicate run 07_optimizers -p rosenbrock_start fast'):
        with pytest.raises(config.ConfigError):
            check_command(bad)


def test_every_solution_command_parses():
    commands = [c for ch in CHAPTERS for c in solution_commands(_markdown(ch))]
    assert len(commands) >= len(CHAPTERS)
    for command in commands:
        check_command(command)


def test_exercise_labels_are_unique_across_the_book():
    labels = [lb for ch in CHAPTERS
              for lb, _ in exercise_labels(config.get_chapter(ch).notebook)]
    assert len(labels) == len(set(labels))


def test_teaching_page_reads_its_runtimes_from_the_results_files(tmp_path):
    results, smoke = tmp_path / "results", tmp_path / "results" / "smoke"
    smoke.mkdir(parents=True)
    record = {"chapter": "07_optimizers", "duration_s": 1234.4, "runs": {}}
    (results / "07_optimizers.json").write_text(json.dumps(record))
    (smoke / "07_optimizers.json").write_text(json.dumps(dict(record, duration_s=56.7)))
    claims = tmp_path / "claims"
    claims.mkdir()
    shutil.copy(config.get_chapter("07_optimizers").notebook, claims / "07_optimizers.ipynb")
    page = render_teaching(results, smoke, claims)
    row = next(line for line in page.splitlines() if "claims/07_optimizers" in line
               and line.startswith("|"))
    n = len(exercise_labels(claims / "07_optimizers.ipynb"))
    # smoke as recorded; cpu from an empty run cache (cpu_cold_s), never the recorded 1234 s
    cold = config.get_chapter("07_optimizers").get("cpu_cold_s")
    assert row.endswith(f"| 57 s | about {cold} s | {n} |") and n >= 2
    assert "<ex-07-offset>` (★★☆, 46 s at `smoke`)" not in page
    assert "<ex-07-offset>` (★★☆, 46 s at `cpu`)" in page  # with its level and run time
    assert "<ex-07-rprop>` (★★☆, pen and paper)" in page
    assert "Lab 1" in page and "Lab 2" in page
    assert "<ex-03-" not in page
    assert "not yet run" in page  # the other chapters have no results here
    for word in ("CLAIMS.md", "../shared", "issue"):
        assert word not in page


def test_published_teaching_page_matches_the_results_files():
    page = PROJECT_ROOT / "book" / "teaching.md"
    results = PROJECT_ROOT / "book" / "results"
    assert page.read_text() == render_teaching(results, results / "smoke",
                                               PROJECT_ROOT / "book" / "claims")
    for ch in CHAPTERS:
        assert (results / "smoke" / f"{ch}.json").exists(), f"no smoke runtime for {ch}"


def test_toc_lists_the_teaching_page(tmp_path):
    (tmp_path / "teaching.md").write_text("# Teaching\n")
    toc = write_toc(tmp_path / "claims", tmp_path / "_toc.yml").read_text()
    assert "file: book/teaching" in toc
    (tmp_path / "teaching.md").unlink()
    assert "teaching" not in write_toc(tmp_path / "claims", tmp_path / "_toc.yml").read_text()


def test_make_lab_opens_jupyterlab_on_the_notebooks():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-n", "lab", "PY=python"], cwd=PROJECT_ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert "jupyterlab==4.6.6" in out
    assert re.search(r"-m jupyter lab .*notebooks", out)
    pinned = (PROJECT_ROOT / "pyproject.toml").read_text()
    assert '"jupyterlab==4.6.6"' in pinned and '"sphinx-exercise==1.2.1"' in pinned
    env = (PROJECT_ROOT / "environment.yml").read_text()
    assert "jupyterlab==4.6.6" in env and "sphinx-exercise==1.2.1" in env


def test_jupyterlab_runs_in_this_environment():
    pytest.importorskip("jupyterlab")
    out = subprocess.run([sys.executable, "-m", "jupyter", "lab", "--version"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "4.6.6", out.stderr


def test_chapter_box_states_the_preset_and_the_folded_box_what_a_run_costs_from_an_empty_cache():
    from replicate.harness.book_pages import provenance_box, verdict_box

    record = {"chapter": "07_optimizers", "claim": "c", "checks": [], "reproduced": True,
              "preset": "cpu", "seed": 0, "duration_s": 114.8, "device": "cpu (1 thread)",
              "git_commit": "abc", "runs": {"reused": 1, "computed": 0}}
    box = verdict_box(record, None, None)
    assert "**At `cpu`** (this page, seed 0)" in box and "115 s" not in box and "cache" not in box
    made = provenance_box(record, None)
    cold = config.get_chapter("07_optimizers").get("cpu_cold_s")
    assert "in 115 s, 1 of 1 training runs taken from the run cache" in made
    assert f"From an empty run cache, this chapter takes about {cold} s" in made


def test_the_student_edition_is_built_from_the_same_config_with_solutions_hidden():
    from replicate.harness.cli import book_build_command, student_config

    config = {"title": "Grokking, replicated", "sphinx": {"config": {"html_last_updated_fmt": "%Y"}}}
    student = student_config(config)
    assert student["title"] == "Grokking, replicated (student edition)"
    assert student["sphinx"]["config"] == {"html_last_updated_fmt": "%Y", "hide_solutions": True}
    assert config["sphinx"]["config"] == {"html_last_updated_fmt": "%Y"}  # the book's is untouched
    cmd, html = book_build_command(student=False)
    assert "--path-output" not in cmd and html == PROJECT_ROOT / "_build" / "html"
