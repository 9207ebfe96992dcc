import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from replicate import config
from replicate.config import RunSpec, get_chapter, paper_reduction
from replicate.runtime import BOOK_DIR, PROJECT_ROOT


def cli(*args, timeout=120, **kwargs):
    return subprocess.run([sys.executable, "-m", "replicate", *args], capture_output=True, text=True,
                          cwd=PROJECT_ROOT, timeout=timeout, **kwargs)


def tree_digest(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*")) if p.is_file()}


REFUSE = """
import json, sys
from replicate.harness.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "torch": "torch" in sys.modules, "kernel": "papermill" in sys.modules}))
"""


def refused(*args, env=None):
    """Run the command in a fresh process; say whether it loaded torch or reached the kernel."""
    result = subprocess.run([sys.executable, "-c", REFUSE, *args], capture_output=True, text=True,
                            cwd=PROJECT_ROOT, timeout=120, env=env)
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


@pytest.mark.parametrize("args, expected", [
    (["run", "07_optimizers", "--preset", "nope"], "valid presets: cpu, paper, smoke"),
    (["run", "07_optimizers", "--preset", ""], "unknown preset ''"),
    (["run", "07_optimizers", "-p", "seed", "-1"], "'seed' must lie in"),
    (["run", "no_such_chapter"], "valid chapters: "),
    (["run", "07_optimizers", "-p", "iterations", "lots"], "must be of type int"),
    (["run", "07_optimizers", "-p", "iterations", "-3"], "must be positive"),
    (["run", "07_optimizers", "-p", "no_such_param", "1"], "valid parameters: "),
])
def test_bad_input_is_refused_before_torch_or_a_kernel_and_touches_nothing(args, expected):
    before = tree_digest(BOOK_DIR / "claims"), tree_digest(BOOK_DIR / "results")
    outcome, stderr = refused(*args)
    assert outcome == {"code": 2, "torch": False, "kernel": False}, stderr
    assert expected in stderr and len(stderr.strip().splitlines()) == 1
    assert (tree_digest(BOOK_DIR / "claims"), tree_digest(BOOK_DIR / "results")) == before


def test_list_names_chapters_claims_and_presets():
    out = cli("list").stdout
    assert "07_optimizers" in out and "claim:" in out and "smoke" in out


def test_failed_execution_leaves_the_published_chapter_byte_identical(tmp_path):
    claims, results = tmp_path / "claims", tmp_path / "results"
    claims.mkdir(), results.mkdir()
    (claims / "07_optimizers.ipynb").write_text('{"published": true}')
    (results / "07_optimizers.json").write_text('{"published": true}')
    before = tree_digest(claims), tree_digest(results)
    # Every parameter passes the checks made before the kernel starts; the run itself then fails
    # in its first code cell (a start-up hook breaks the chapter's objective).
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os\nif os.environ.get('REPLICATE_TEST_BREAK'):\n"
        "    from replicate.measures import objectives\n"
        "    def broken(*a, **k):\n        raise ValueError('deliberate failure')\n"
        "    objectives.log_scale = broken\n")
    env = dict(os.environ, REPLICATE_TEST_BREAK="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])))
    result = cli("run", "07_optimizers", "--preset", "smoke", "--claims-dir", str(claims),
                 "--results-dir", str(results), timeout=300, env=env)
    assert result.returncode == 1
    assert "failed in code cell" in result.stderr and "deliberate failure" in result.stderr
    assert "left unchanged" in result.stderr
    assert (tree_digest(claims), tree_digest(results)) == before


def test_published_chapters_hold_successful_executions():
    for notebook in sorted((BOOK_DIR / "claims").glob("*.ipynb")):
        meta = json.loads(notebook.read_text())["metadata"].get("papermill", {})
        assert not meta.get("exception"), f"{notebook} holds a failed execution"
        assert (BOOK_DIR / "results" / f"{notebook.stem}.json").exists()


def test_published_paper_runs_are_pairs_at_the_paper_preset_from_clean_code():
    paper = BOOK_DIR / "results" / "paper"
    for notebook in sorted(paper.glob("*.ipynb")):
        meta = json.loads(notebook.read_text())["metadata"].get("papermill", {})
        assert not meta.get("exception"), f"{notebook} holds a failed execution"
        record = json.loads((paper / f"{notebook.stem}.json").read_text())
        # the paper preset as it is, or reduced only as its chapter.yaml declares
        spec = RunSpec.from_record(record)
        assert spec.preset == "paper" and paper_reduction(spec) is not None, notebook.stem
        assert not record["dirty"] and not record["git_commit"].endswith("+dirty"), notebook.stem
    assert sorted(p.stem for p in paper.glob("*.ipynb")) == sorted(
        p.stem for p in paper.glob("*.json") if not p.name.endswith(".seeds.json"))


MNIST_CHAPTERS = [name for name, ch in config.chapters().items() if "mnist" in ch.get("datasets", ())]


@pytest.mark.parametrize("chapter", MNIST_CHAPTERS)
def test_missing_dataset_fails_before_the_run_with_the_path_it_looked_in(chapter, tmp_path):
    # Was a 5 s limit that a loaded machine broke (6-16 s): now, what the refusal did not do.
    env = dict(os.environ, REPLICATE_DATA_DIR=str(tmp_path), REPLICATE_NO_DOWNLOAD="1")
    outcome, stderr = refused("run", chapter, "--preset", "smoke", "--claims-dir", str(tmp_path / "claims"),
                              env=env)
    assert outcome == {"code": 2, "torch": False, "kernel": False}, stderr
    assert str(tmp_path / "mnist" / "MNIST" / "raw") in stderr and "REPLICATE_DATA_DIR" in stderr
    assert not (tmp_path / "claims").exists()


def test_run_help_lists_the_chapters_and_presets_and_points_to_list():
    out = cli("run", "--help").stdout
    for ch in config.chapters().values():
        assert ch.name in out and ", ".join(ch.presets) in out
    assert "list CHAPTER" in out and "--publish" in out and "--allow-dirty" in out
    assert "runs/<chapter>/<preset>" in out


@pytest.mark.parametrize("command, reads", [
    ("list", "Reads no environment variables"),
    ("run", "REPLICATE_DATA_DIR"), ("run", "REPLICATE_CACHE_DIR"), ("run", "REPLICATE_NO_CACHE"),
    ("run", "REPLICATE_RESULTS_DIR"), ("run", "TQDM_DISABLE"), ("run", "REPLICATE_RUNS_DIR"),
    ("sweep", "REPLICATE_CACHE_DIR"), ("build", "Reads no environment variables"),
    ("validate", "REPLICATE_CACHE_DIR"), ("validate", "relative 5%"), ("bench", "REPLICATE_CACHE_DIR"),
])
def test_every_subcommand_says_what_it_does_and_which_environment_it_reads(command, reads):
    result = cli(command, "--help")
    assert result.returncode == 0
    description = result.stdout.split("\n\n")[1]  # the paragraph after the usage line(s)
    assert len(description.split()) >= 10, f"`{command} --help` needs a description"
    assert reads in " ".join(result.stdout.split())


def test_list_chapter_prints_each_parameter_with_its_type_cpu_value_and_comment():
    out = cli("list", "07_optimizers").stdout
    cpu = config.load_preset("07_optimizers", "cpu")
    for name, value in cpu.items():
        assert f"  {name}: " in out, f"{name} missing from `list 07_optimizers`"
    # the cpu preset's value, and its comment in cpu.yaml says what it is
    assert f"  iterations: int = {cpu['iterations']}" in out and "optimisation steps" in out
    bad = cli("list", "no_such_chapter")
    assert bad.returncode == 2 and "valid chapters" in bad.stderr


def test_list_names_how_to_see_a_chapters_parameters():
    assert "list CHAPTER" in cli("list").stdout


def test_a_cache_folder_that_is_a_file_is_refused_before_the_kernel(tmp_path):
    # Was: found only after the chapter's training had run and been lost.
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    env = dict(os.environ, REPLICATE_CACHE_DIR=str(blocker))
    outcome, stderr = refused("run", "07_optimizers", "--preset", "smoke", "--claims-dir",
                              str(tmp_path / "claims"), env=env)
    assert outcome == {"code": 2, "torch": False, "kernel": False}, stderr
    assert "not-a-folder" in stderr and "run cache" in stderr


@pytest.mark.parametrize("make", ["directory", "fifo"])
def test_an_mnist_file_that_is_not_a_file_is_refused_in_one_line(make, tmp_path, data_dir):
    import shutil

    raw = tmp_path / "mnist" / "MNIST" / "raw"
    shutil.copytree(data_dir / "mnist" / "MNIST" / "raw", raw)
    target = raw / "t10k-labels-idx1-ubyte.gz"
    target.unlink()
    target.mkdir() if make == "directory" else os.mkfifo(target)
    env = dict(os.environ, REPLICATE_DATA_DIR=str(tmp_path), REPLICATE_NO_DOWNLOAD="1")
    outcome, stderr = refused("run", "01_delayed_robustness", "--preset", "smoke", "--claims-dir",
                              str(tmp_path / "claims"), env=env)
    assert outcome == {"code": 2, "torch": False, "kernel": False}, stderr
    assert "t10k-labels-idx1-ubyte.gz" in stderr and len(stderr.strip().splitlines()) == 1


def test_publish_at_paper_puts_the_pair_in_results_paper_and_never_over_the_books_chapter(
        tmp_path, monkeypatch):
    from replicate.harness import cli as cli_module
    from replicate.harness import execute as ex

    went = {}
    monkeypatch.setattr(ex, "execute", lambda spec, claims, results, **kw: (
        went.update({spec.preset: (Path(claims), Path(results))}) or (True, "done")))
    assert cli_module.main(["run", "07_optimizers", "--preset", "paper", "--publish",
                            "--results-dir", str(tmp_path)]) == 0
    assert went["paper"] == (tmp_path / "paper", tmp_path / "paper")
    # the cpu preset's publication is the book's chapter, as before
    assert cli_module.main(["run", "07_optimizers", "--publish", "--allow-dirty",
                            "--results-dir", str(tmp_path)]) == 0
    assert went["cpu"] == (ex.CLAIMS_DIR, tmp_path)


def test_publish_at_paper_takes_only_the_reductions_the_chapter_declares(tmp_path, monkeypatch, capsys):
    from replicate.harness import cli as cli_module
    from replicate.harness import execute as ex

    went = {}
    monkeypatch.setattr(ex, "execute", lambda spec, claims, results, **kw: (
        went.update({spec.label: (Path(claims), Path(results))}) or (True, "done")))
    declared = {"p": {"used": 47, "why": "a CPU-sized modulus"}}
    monkeypatch.setitem(get_chapter("05_slingshot_hessian").meta, "paper_reduced", declared)
    base = ["run", "05_slingshot_hessian", "--preset", "paper", "--publish", "--allow-dirty",
            "--results-dir", str(tmp_path)]
    assert cli_module.main(base + ["-p", "p", "47", "-p", "seed", "3"]) == 0
    assert went["paper + p=47 + seed=3"] == (tmp_path / "paper", tmp_path / "paper")
    # any other -p value (or the declared one at another value) is refused before a kernel starts,
    # and never lands on the book's chapter
    for other in (["-p", "p", "53"], ["-p", "lr", "0.01"], ["-p", "p", "47", "-p", "cap", "40000"]):
        went.clear()
        assert cli_module.main(base + other) == 2 and went == {}
        assert "published at the paper preset as it is or at -p p 47" in capsys.readouterr().err
    spec = RunSpec.make("05_slingshot_hessian", "paper", {"p": 47, "seed": 3})
    assert paper_reduction(spec) == {"p": {"asked": 97, "used": 47, "why": "a CPU-sized modulus"}}
    assert paper_reduction(RunSpec.make("05_slingshot_hessian", "paper")) == {}
    assert paper_reduction(RunSpec.make("05_slingshot_hessian", "cpu", {"p": 47})) is None


def test_a_copy_without_git_history_records_the_commit_its_sender_named(monkeypatch):
    from replicate import verdict

    monkeypatch.setattr(verdict, "git_commit", lambda: "unknown")
    monkeypatch.delenv(verdict.COMMIT_ENV, raising=False)
    assert verdict.sent_commit() == {}
    monkeypatch.setenv(verdict.COMMIT_ENV, "0123456789ab")
    assert verdict.sent_commit() == {"git_commit": "0123456789ab", "dirty": False,
                                     "git_commit_from": verdict.COMMIT_ENV}
    # where git answers, the environment is ignored
    monkeypatch.setattr(verdict, "git_commit", lambda: "fedcba987654")
    assert verdict.sent_commit() == {}


@pytest.mark.parametrize("args, expected", [
    (["sweep", "07_optimizers", "--seeds", "7" * 5000], "--seeds: cannot read"),
    (["run", "07_optimizers", "-p", "iterations", "x" * 60_000], "must be of type int"),
])
def test_an_absurd_value_is_refused_in_one_short_line(args, expected):
    outcome, stderr = refused(*args)
    assert outcome["code"] == 2 and not outcome["kernel"], stderr
    assert expected in stderr and len(stderr.strip().splitlines()) == 1
    assert len(stderr) < 700


def test_a_truncated_results_file_is_named_in_one_line_before_validate_executes_anything(tmp_path):
    claims, results = tmp_path / "claims", tmp_path / "results"
    claims.mkdir(), results.mkdir()
    (claims / "07_optimizers.ipynb").write_text((BOOK_DIR / "claims" / "07_optimizers.ipynb").read_text())
    published = (BOOK_DIR / "results" / "07_optimizers.json").read_text()
    (results / "07_optimizers.json").write_text(published[:len(published) // 2])
    result = cli("validate", "07_optimizers", "--claims-dir", str(claims), "--results-dir", str(results))
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "07_optimizers.json is not a readable results file (line" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout and "nbval" not in result.stdout


def test_a_destination_without_room_for_a_page_is_refused_before_the_kernel(tmp_path, monkeypatch, capsys):
    from collections import namedtuple

    from replicate.harness import cli as cli_module, execute

    real = execute.shutil.disk_usage
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(execute.shutil, "disk_usage", lambda path: usage(10**6, 10**6 - 2**17, 2**17)
                        if str(path).startswith(str(tmp_path / "out")) else real(path))
    monkeypatch.setattr(execute, "execute", lambda *a: pytest.fail("nothing may run"))
    target = tmp_path / "out" / "deeper"
    assert cli_module.main(["run", "07_optimizers", "--preset", "smoke", "--claims-dir", str(target)]) == 2
    err = capsys.readouterr().err
    assert "has 0 MB free" in err and "nothing was run" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()  # the folders it made to look are gone again


def test_a_run_that_stops_before_writing_leaves_no_empty_folder_of_its_own(tmp_path, monkeypatch):
    from replicate.harness import cli as cli_module, execute

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(execute, "execute", interrupted)
    existing = tmp_path / "kept"
    existing.mkdir()
    for target in (tmp_path / "new" / "claims", existing):
        assert cli_module.main(["run", "07_optimizers", "--preset", "smoke", "--allow-dirty",
                                "--claims-dir", str(target)]) != 0
    assert not (tmp_path / "new").exists()
    assert existing.is_dir()  # a folder that was there stays


def test_a_published_page_prints_no_line_that_names_the_run_cache(monkeypatch, tmp_path):
    import nbformat

    from replicate.harness import execute

    monkeypatch.setenv("REPLICATE_CACHE_DIR", str(tmp_path / "cache"))
    entry = tmp_path / "cache" / "mnist_mlp" / "abc.pt"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("train()", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text=(
            f"mnist_mlp: recomputing the run cache entry {entry}: truncated\nstep 100: loss 0.3\n"))]),
        nbformat.v4.new_code_cell("again()", outputs=[nbformat.v4.new_output(
            "stream", name="stdout", text=f"could not store the run in {tmp_path / 'cache'}\n")])])
    execute.drop_cache_lines(nb)
    assert [o.text for c in nb.cells for o in c.outputs] == ["step 100: loss 0.3\n"]
