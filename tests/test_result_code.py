"""Whether two commits compute a chapter's numbers with the same code: a small git repository
laid out like the project, changed one part at a time."""
import json
import subprocess
from pathlib import Path

from replicate.harness import scoreboard
from replicate.harness.result_code import code_provenance, result_code, result_code_differences
from replicate.runtime import BOOK_DIR

CHAPTER = "99_example"


def _notebook(*cells: tuple[str, str]) -> str:
    return json.dumps({"cells": [{"cell_type": kind, "source": text, "metadata": {}}
                                 for kind, text in cells]})


FILES = {
    "src/replicate/__init__.py": "",
    "src/replicate/measure.py": '"""A measure."""\nfrom .helper import double\n\n\n'
                                'def measure(x):\n    return double(x)  # twice\n',
    "src/replicate/helper.py": "def double(x):\n    def inner():\n        from . import lazy\n"
                               "        return lazy.ONE\n    return 2 * x * inner()\n",
    "src/replicate/lazy.py": "ONE = 1\n",
    "src/replicate/unused.py": "X = 1\n",
    "src/replicate/harness/pages.py": "TITLE = 'a'\n",
    f"src/replicate/presets/{CHAPTER}/cpu.yaml": "steps: 100  # calibrated on five seeds\n",
    f"src/replicate/presets/{CHAPTER}/chapter.yaml": "title: Example\n",
    f"notebooks/{CHAPTER}.ipynb": _notebook(("markdown", "# The claim"),
                                            ("code", "%matplotlib inline\nfrom replicate.measure "
                                                     "import measure\nprint(measure(steps))")),
}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


def _commit(repo: Path, changes: dict[str, str]) -> str:
    for path, text in changes.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "change")
    return _git(repo, "rev-parse", "--short=12", "HEAD")


def _repo(tmp_path: Path) -> tuple[Path, str]:
    _git(tmp_path, "init", "-q")
    return tmp_path, _commit(tmp_path, FILES)


def test_the_result_code_follows_imports_through_modules_and_inside_functions(tmp_path):
    repo, base = _repo(tmp_path)
    parts = result_code(repo, base, CHAPTER)
    assert sorted(parts) == ["cpu preset", "notebook code cell 1", "src/replicate/__init__.py",
                             "src/replicate/helper.py", "src/replicate/lazy.py",
                             "src/replicate/measure.py"]


def test_prose_comments_docstrings_the_harness_and_unimported_modules_change_nothing(tmp_path):
    repo, base = _repo(tmp_path)
    later = _commit(repo, {
        "src/replicate/measure.py": FILES["src/replicate/measure.py"].replace(
            "A measure.", "A measure, documented better.").replace("# twice", "# doubled"),
        "src/replicate/unused.py": "X = 2\n",
        "src/replicate/harness/pages.py": "TITLE = 'b'\n",
        f"src/replicate/presets/{CHAPTER}/cpu.yaml": "steps: 100  # calibrated on ten seeds\n",
        f"src/replicate/presets/{CHAPTER}/chapter.yaml": "title: Another title\n",
        f"notebooks/{CHAPTER}.ipynb": FILES[f"notebooks/{CHAPTER}.ipynb"].replace(
            "# The claim", "# The claim, reworded")})
    assert result_code_differences(CHAPTER, base, later, repo) == []


def test_a_change_to_code_the_chapter_runs_is_named_by_its_part(tmp_path):
    repo, base = _repo(tmp_path)
    lazy = _commit(repo, {"src/replicate/lazy.py": "ONE = 1.0\n"})
    preset = _commit(repo, {f"src/replicate/presets/{CHAPTER}/cpu.yaml": "steps: 200\n"})
    cell = _commit(repo, {f"notebooks/{CHAPTER}.ipynb": FILES[f"notebooks/{CHAPTER}.ipynb"]
                          .replace("print(measure(steps))", "print(measure(steps + 1))")})
    assert result_code_differences(CHAPTER, base, lazy, repo) == ["src/replicate/lazy.py"]
    assert result_code_differences(CHAPTER, lazy, preset, repo) == ["cpu preset"]
    assert result_code_differences(CHAPTER, preset, cell, repo) == ["notebook code cell 1"]
    assert result_code_differences(CHAPTER, base, cell, repo) == [
        "cpu preset", "notebook code cell 1", "src/replicate/lazy.py"]


def test_a_function_nothing_in_the_chapter_names_is_not_its_result_code(tmp_path):
    # helper.py gains a function for another chapter, then that function changes: neither is
    # this chapter's code. Then the chapter's own cell starts calling it: from then on it is.
    repo, base = _repo(tmp_path)
    helper = FILES["src/replicate/helper.py"]
    added = _commit(repo, {"src/replicate/helper.py": helper + "\n\ndef triple(x):\n    return 3 * x\n"})
    changed = _commit(repo, {"src/replicate/helper.py": helper + "\n\ndef triple(x):\n    return 4 * x\n"})
    assert result_code_differences(CHAPTER, base, added, repo) == []
    assert result_code_differences(CHAPTER, added, changed, repo) == []
    cell = FILES[f"notebooks/{CHAPTER}.ipynb"].replace(
        "from replicate.measure import measure", "from replicate.measure import measure\\n"
        "from replicate.helper import triple").replace("print(measure(steps))",
                                                       "print(measure(steps), triple(steps))")
    uses = _commit(repo, {f"notebooks/{CHAPTER}.ipynb": cell})
    fixed = _commit(repo, {"src/replicate/helper.py": helper + "\n\ndef triple(x):\n    return 3 * x\n"})
    assert result_code_differences(CHAPTER, uses, fixed, repo) == ["src/replicate/helper.py"]


def test_a_function_reached_through_another_or_a_registry_is_result_code(tmp_path):
    # measure() calls double(), which the chapter never names; RULES names halve() in a dict.
    repo, base = _repo(tmp_path)
    helper = FILES["src/replicate/helper.py"]
    through = _commit(repo, {"src/replicate/helper.py": helper.replace("2 * x", "2.0 * x")})
    assert result_code_differences(CHAPTER, base, through, repo) == ["src/replicate/helper.py"]
    registry = helper + "\n\ndef halve(x):\n    return x / 2\n\n\nRULES = {'half': halve}\n"
    listed = _commit(repo, {"src/replicate/helper.py": registry})
    changed = _commit(repo, {"src/replicate/helper.py": registry.replace("x / 2", "x * 0.5")})
    assert result_code_differences(CHAPTER, listed, changed, repo) == ["src/replicate/helper.py"]


def test_git_cannot_tell_for_a_dirty_or_unknown_commit(tmp_path):
    repo, base = _repo(tmp_path)
    assert result_code_differences(CHAPTER, base, base + "+dirty", repo) is None
    assert result_code_differences(CHAPTER, base, "0" * 12, repo) is None
    assert result_code_differences(CHAPTER, "unknown", base, repo) is None


def test_seeds_are_grouped_by_commit_and_all_same_only_when_nothing_differs(tmp_path):
    repo, base = _repo(tmp_path)
    prose = _commit(repo, {"src/replicate/unused.py": "X = 3\n"})
    code = _commit(repo, {"src/replicate/lazy.py": "ONE = 1.0\n"})
    runs = {0: {"record": {"git_commit": base}}, 1: {"record": {"git_commit": prose}},
            2: {"record": {"git_commit": prose}}}
    same = code_provenance(CHAPTER, runs, base, repo)
    assert same["all_same"] and [c["seeds"] for c in same["commits"]] == [[0], [1, 2]]
    runs[3] = {"record": {"git_commit": code}}
    apart = code_provenance(CHAPTER, runs, base, repo)
    assert not apart["all_same"]
    assert apart["commits"][-1] == {"commit": code, "seeds": [3],
                                    "differs": ["src/replicate/lazy.py"]}


def test_the_scoreboard_names_seeds_run_by_other_code_and_vouches_for_the_rest():
    record = {"git_commit": "aaa"}
    code = {"result_code": "the code", "all_same": True,
            "commits": [{"commit": "aaa", "seeds": [0], "differs": []},
                        {"commit": "bbb", "seeds": [1, 2], "differs": []}]}
    same = scoreboard.provenance([record], {"01_x": {"code": code}})
    assert "1 other commit, with the same result code as their chapter's published run" in same
    assert "**" not in same
    code["commits"].append({"commit": "ccc", "seeds": [3], "differs": ["notebook code cell 2"]})
    apart = scoreboard.provenance([record], {"01_x": {"code": code}})
    assert "**Seeds computed by other code" in apart
    assert "01 (seeds 3 at `ccc`: 1 part of its result code differs)" in apart
    code["commits"][-1]["differs"] = ["src/replicate/verdict.py", "notebook code cell 2"]
    apart = scoreboard.provenance([record], {"01_x": {"code": code}})
    assert "2 parts of its result code differ" in apart and "src/" not in apart


def test_every_published_chapters_seeds_were_computed_by_its_published_runs_code():
    """Read from the seeds files as aggregated (no git needed): a seed run by other code than its
    chapter's published run must be re-run before the book ships."""
    files = [*sorted((BOOK_DIR / "results").glob("*.seeds.json")),
             *sorted((BOOK_DIR / "results" / "paper").glob("*.seeds.json"))]
    assert files
    for path in files:
        code = json.loads(path.read_text())["code"]
        assert code["all_same"], (path.name, [c for c in code["commits"] if c["differs"] != []])


def test_how_the_commit_is_found_is_provenance_not_result_code(tmp_path):
    runtime = ("GENERATED_PATHS = ('book/claims',)\n\n\ndef git_commit():\n"
               "    return 'abc' + str(len(GENERATED_PATHS))\n\n\ndef scale():\n    return 2\n")
    repo, base = _repo(tmp_path)
    base = _commit(repo, {"src/replicate/runtime.py": runtime, "src/replicate/measure.py":
                          "from .runtime import git_commit, scale\n\n\n"
                          "def measure(x):\n    return scale() * x, git_commit()\n"})
    paths = _commit(repo, {"src/replicate/runtime.py": runtime.replace(
        "('book/claims',)", "('book/claims', 'book/teaching.md')").replace("'abc'", "'abd'")})
    assert result_code_differences(CHAPTER, base, paths, repo) == []
    scaled = _commit(repo, {"src/replicate/runtime.py": runtime.replace("return 2", "return 3")})
    assert result_code_differences(CHAPTER, base, scaled, repo) == ["src/replicate/runtime.py"]
