"""Where runs go: only `run` at the book's preset publishes into book/, notebook and verdict
together or not at all; anything else (other presets, -p, a notebook run by hand) goes to a run
folder outside the book."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from replicate import runtime
from replicate.harness import cli, execute, publish
from replicate.config import RunSpec
from replicate.verdict import ChapterRun, claim, report
from replicate.runtime import BOOK_DIR, PROJECT_ROOT

CHAPTER = "07_optimizers"  # the fastest chapter


def book_digest() -> dict:
    """Every file the book's outputs hold (claims, results, sweeps), by content."""
    return {str(p.relative_to(BOOK_DIR)): hashlib.sha256(p.read_bytes()).hexdigest()
            for folder in ("claims", "results", "sweeps") for p in sorted((BOOK_DIR / folder).rglob("*"))
            if p.is_file()}


def test_a_smoke_run_goes_to_its_run_folder_and_never_touches_the_book(tmp_path):
    before = book_digest()
    env = dict(os.environ, REPLICATE_RUNS_DIR=str(tmp_path / "runs"), REPLICATE_CACHE_DIR=str(tmp_path / "c"))
    proc = subprocess.Popen([sys.executable, "-m", "replicate", "run", CHAPTER, "--preset", "smoke"],
                            cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    stdout, stderr = proc.communicate(timeout=300)
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "runs" / CHAPTER / "smoke"
    assert str(folder) in result.stdout and "not the book" in result.stdout
    record = json.loads((folder / f"{CHAPTER}.json").read_text())
    assert (folder / f"{CHAPTER}.ipynb").exists() and record["preset"] == "smoke"
    # provenance: commit (with its dirty flag), torch, and the CPU's vector unit or the GPU
    assert record["git_commit"] and isinstance(record["dirty"], bool) and record["torch"]
    assert record.get("cpu_capability") or record.get("gpu")
    # the notebook says where its verdict went, never the staging folder
    text = (folder / f"{CHAPTER}.ipynb").read_text()
    # (a run folder outside the project, as here, is named by no path)
    assert f"Verdict written to {CHAPTER}.json, beside this notebook" in text
    assert "staging" not in text and str(execute.STAGING_DIR) not in text
    assert "without encryption" not in result.stderr  # the kernel's TCP warning is filtered
    assert book_digest() == before
    assert not list(execute.STAGING_DIR.glob(f"{CHAPTER}-*-{proc.pid}-*")), "staging folder left behind"


def test_overrides_get_their_own_run_folder():
    folder = lambda preset, o: execute.run_folder(RunSpec.make(CHAPTER, preset, o))  # noqa: E731
    plain = folder("smoke", {})
    a = folder("cpu", {"iterations": 10})
    assert plain.name == "smoke" and a.name.startswith("cpu-") and len(a.name) == len("cpu-") + 8
    assert a != folder("cpu", {"iterations": 11})
    assert not a.resolve().is_relative_to(BOOK_DIR.resolve())


def test_a_notebook_executed_by_hand_leaves_the_book_byte_identical(monkeypatch, tmp_path, capsys):
    """As in Jupyter or papermill by hand: no REPLICATE_RESULTS_DIR, the verdict goes to a scratch
    run folder and the notebook says where."""
    monkeypatch.delenv("REPLICATE_RESULTS_DIR")
    monkeypatch.delenv("REPLICATE_RESULTS_SHOWN", raising=False)
    monkeypatch.setenv("REPLICATE_RUNS_DIR", str(tmp_path / "runs"))
    before = book_digest()
    run = ChapterRun(RunSpec.make(CHAPTER, "smoke"))
    run.verdict([claim("a", True, 1.0, "x"), report("b", 2.0, "y")])
    path = Path(run.save())
    assert path == tmp_path / "runs" / CHAPTER / "interactive" / f"{CHAPTER}.json"
    assert f"Verdict written to {path}" in capsys.readouterr().out
    assert book_digest() == before


def test_a_published_chapter_prints_its_verdict_but_no_file_time_or_cache(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("REPLICATE_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("REPLICATE_RESULTS_SHOWN", "")  # what `run` sets for the book
    run = ChapterRun(RunSpec.make(CHAPTER, "smoke"))
    run.verdict([claim("a", True, 1.0, "x")])
    run.save()
    out = capsys.readouterr().out
    assert "REPRODUCED" in out and " s on " not in out and "cache" not in out
    assert "written to" not in out and str(tmp_path) not in out


def _old_pair(tmp_path):
    src_nb, src_json = tmp_path / "new.ipynb", tmp_path / "new.json"
    src_nb.write_text("new notebook"), src_json.write_text("new verdict")
    claims, results = tmp_path / "claims", tmp_path / "results"
    claims.mkdir(), results.mkdir()
    (claims / "c.ipynb").write_text("old notebook"), (results / "c.json").write_text("old verdict")
    return [(src_json, results / "c.json"), (src_nb, claims / "c.ipynb")], claims, results


def _beside(*folders: Path) -> list[str]:
    """What the folders hold but the chapter's lock (it stays: removing it would race another
    publisher), its pointer and the publication folder the pointer names."""
    keep = {".c.lock", ".c.current"}
    for folder in folders:
        if (folder / ".c.current").is_symlink():
            keep.add(os.readlink(folder / ".c.current"))
    return sorted(p.name for folder in folders for p in folder.iterdir() if p.name not in keep)


def test_publishing_swaps_both_files(tmp_path):
    pairs, claims, results = _old_pair(tmp_path)
    publish.publish_together(pairs, results / ".c.journal")
    assert (results / "c.json").read_text() == "new verdict"
    assert (claims / "c.ipynb").read_text() == "new notebook"
    assert _beside(claims, results) == ["c.ipynb", "c.json"]
    assert (claims / "c.ipynb").is_symlink() and (results / "c.json").is_symlink()


@pytest.mark.parametrize("failing", range(1, 5))
def test_a_failed_rename_at_any_point_keeps_both_old_files_and_no_temp_file(
        tmp_path, monkeypatch, failing):
    pairs, claims, results = _old_pair(tmp_path)
    real, calls = os.replace, []

    def one_fails(src, dest):
        calls.append(dest)
        if len(calls) == failing:
            raise PermissionError(13, "Permission denied", str(dest))
        return real(src, dest)

    monkeypatch.setattr(publish.os, "replace", one_fails)
    with pytest.raises(publish.PublishError, match="Permission denied"):
        publish.publish_together(pairs, results / ".c.journal")
    assert (results / "c.json").read_text() == "old verdict"
    assert (claims / "c.ipynb").read_text() == "old notebook"
    assert _beside(claims, results) == ["c.ipynb", "c.json"]


def test_run_reports_a_failed_publication_in_one_line(tmp_path, monkeypatch, capsys):
    """The whole `run` path with the execution faked: a failed swap says `left unchanged`."""
    import papermill

    def fake_execute(src, out, **kwargs):
        Path(out).write_text(Path(src).read_text())
        folder = Path(os.environ["REPLICATE_RESULTS_DIR"])
        folder.mkdir(parents=True)
        (folder / f"{CHAPTER}.json").write_text('{"new": true}')

    claims = tmp_path / "claims"
    claims.mkdir()
    (claims / f"{CHAPTER}.ipynb").write_text("old notebook")
    (claims / f"{CHAPTER}.json").write_text("old verdict")
    monkeypatch.setattr(papermill, "execute_notebook", fake_execute)
    monkeypatch.setattr(execute, "prepare_page", lambda *a: None)
    real, calls = os.replace, []

    def second_fails(src, dest):
        calls.append(dest)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(src, dest)

    monkeypatch.setattr(publish.os, "replace", second_fails)
    code = cli.main(["run", CHAPTER, "--preset", "smoke", "--claims-dir", str(claims)])
    err = capsys.readouterr().err
    assert code == 1 and "could not be put in place" in err and "left unchanged" in err
    assert "Traceback" not in err
    keep = {f".{CHAPTER}.lock", f".{CHAPTER}.current"}
    if (claims / f".{CHAPTER}.current").is_symlink():
        keep.add(os.readlink(claims / f".{CHAPTER}.current"))
    assert sorted(p.name for p in claims.iterdir() if p.name not in keep) == [
        f"{CHAPTER}.ipynb", f"{CHAPTER}.json"]
    assert (claims / f"{CHAPTER}.json").read_text() == "old verdict"
    assert not [p for p in execute.STAGING_DIR.glob(f"{CHAPTER}-*-{os.getpid()}-*")]


def test_publishing_from_uncommitted_code_is_refused_before_anything_runs(monkeypatch, capsys):
    monkeypatch.setattr(cli, "git_commit", lambda: "0123456789ab+dirty")
    monkeypatch.setattr(execute, "execute", lambda *a: pytest.fail("nothing may run"))
    before = book_digest()
    assert cli.main(["run", CHAPTER]) == 2
    assert "--allow-dirty" in capsys.readouterr().err
    assert book_digest() == before


def test_a_verdict_from_uncommitted_code_says_so(monkeypatch):
    monkeypatch.setattr(runtime, "git_commit", lambda: "0123456789ab+dirty")
    run = ChapterRun(RunSpec.make(CHAPTER, "smoke"))
    run.verdict([claim("a", True, 1.0, "x")])
    record = json.loads(Path(run.save()).read_text())
    assert record["dirty"] is True and record["git_commit"].endswith("+dirty")


def test_the_dirty_check_ignores_the_books_generated_outputs():
    for path in ("book/claims", "book/results", "book/sweeps"):
        assert path in runtime.GENERATED_PATHS


def test_an_unwritable_book_is_reported_before_anything_runs(monkeypatch, capsys):
    real = os.access
    monkeypatch.setattr(execute.os, "access", lambda path, mode: not str(path).startswith(str(BOOK_DIR))
                        and real(path, mode))
    monkeypatch.setattr(cli, "git_commit", lambda: "0123456789ab")
    monkeypatch.setattr(execute, "execute", lambda *a: pytest.fail("nothing may run"))
    assert cli.main(["run", CHAPTER]) == 2
    assert "book/claims is not writable" in capsys.readouterr().err


def test_the_notebook_names_no_temporary_path_for_its_verdict_and_no_path_in_the_book(tmp_path):
    # The book's reader has no book/results/ folder: a published chapter names no file.
    assert execute._shown(BOOK_DIR / "results" / "c.json", BOOK_DIR / "claims") == ""
    assert execute._shown(tmp_path / "c.json", tmp_path) == "c.json, beside this notebook"
    hidden = BOOK_DIR / "sweeps" / "c" / ".cpu-seed1.incoming-x"
    assert execute._shown(hidden / "c.json", hidden) == "c.json, beside this notebook"
    assert execute._shown(tmp_path / "r" / "c.json", tmp_path) == "results/c.json"


def test_an_empty_preset_is_refused_and_never_publishes(capsys):
    before = book_digest()
    assert cli.main(["run", CHAPTER, "--preset", ""]) == 2
    assert "unknown preset ''" in capsys.readouterr().err
    assert book_digest() == before


def test_a_kill_leaves_a_whole_pair_and_build_and_validate_tidy_what_it_left(tmp_path, capsys):
    """A run killed after copying its new pair and before the swap: the book shows the old pair
    with no repair; the folder it left goes before the book is read."""
    pairs, claims, results = _old_pair(tmp_path)
    journal = results / ".c.journal"
    kill = ("import os, signal, sys\nfrom pathlib import Path\nfrom replicate.harness import publish\n"
            "publish._after_step = lambda step: step == 'copied' and os.kill(os.getpid(), signal.SIGKILL)\n"
            f"publish.publish_together({[(str(a), str(b)) for a, b in pairs]!r}, Path({str(journal)!r}))\n")
    assert subprocess.run([sys.executable, "-c", kill]).returncode == -9
    assert (results / "c.json").read_text() == "old verdict"
    assert (claims / "c.ipynb").read_text() == "old notebook"
    assert len(_beside(claims, results)) == 3  # the two links and the new pair's folder
    execute.repair_book(claims, results)
    assert _beside(claims, results) == ["c.ipynb", "c.json"]
    assert (results / "c.json").read_text() == "old verdict"
    assert "removed 1 leftover" in capsys.readouterr().err


def _held(lock: Path) -> bool:
    """Whether someone holds the lock file (a second open file description cannot take it)."""
    import fcntl

    with open(lock, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
        return False


def test_build_reads_each_verdict_and_rewrites_its_page_under_the_chapters_lock(tmp_path, monkeypatch):
    """So that `build` beside a publication renders a page from one publication: a results file
    read before a swap and a notebook rewritten after it is what the lock rules out."""
    from replicate.harness import scoreboard

    claims, results = tmp_path / "claims", tmp_path / "results"
    claims.mkdir(), results.mkdir()
    shutil.copy(BOOK_DIR / "claims" / f"{CHAPTER}.ipynb", claims / f"{CHAPTER}.ipynb")
    shutil.copy(BOOK_DIR / "results" / f"{CHAPTER}.json", results / f"{CHAPTER}.json")
    lock = execute.journal_path(results, CHAPTER).with_suffix(".lock")
    seen, read, refresh = [], scoreboard.read_record, scoreboard.refresh_chapter_page

    def reading(path):
        if Path(path).name == f"{CHAPTER}.json":
            seen.append(("read", _held(lock)))
        return read(path)

    def refreshing(notebook, *args, **kwargs):
        seen.append(("write", _held(lock)))
        return refresh(notebook, *args, **kwargs)

    monkeypatch.setattr(scoreboard, "read_record", reading)
    monkeypatch.setattr(scoreboard, "refresh_chapter_page", refreshing)
    scoreboard.refresh_pages(results, claims)
    assert seen and seen[0] == ("read", True) and ("write", True) in seen
    assert all(held for _, held in seen)


def _execution_faked(monkeypatch, verdict: str) -> None:
    """`run` with papermill faked: the notebook is copied as it is and writes `verdict`."""
    import papermill

    def fake_execute(src, out, **kwargs):
        Path(out).write_text(Path(src).read_text())
        folder = Path(os.environ["REPLICATE_RESULTS_DIR"])
        folder.mkdir(parents=True)
        (folder / f"{CHAPTER}.json").write_text(verdict)

    monkeypatch.setattr(papermill, "execute_notebook", fake_execute)
    monkeypatch.setattr(execute, "prepare_page", lambda *a: None)


def test_every_verdict_records_the_cpus_model_beside_its_vector_unit(tmp_path, monkeypatch):
    """Two CPUs with one vector unit can still take a long run down different paths."""
    _execution_faked(monkeypatch, '{"cpu_capability": "AVX512"}')
    claims = tmp_path / "claims"
    assert cli.main(["run", CHAPTER, "--preset", "smoke", "--claims-dir", str(claims)]) == 0
    record = json.loads((claims / f"{CHAPTER}.json").read_text())
    assert record["cpu_capability"] == "AVX512"
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                  .splitlines() if line.startswith("model name")), None)
    assert record["cpu_model"] == (model and " ".join(model.split())) and record["cpu_model"]


def test_a_published_chapter_is_named_by_its_place_in_the_book_not_its_publications_folder(
        tmp_path, monkeypatch, capsys):
    _execution_faked(monkeypatch, "{}")
    claims = tmp_path / "claims"
    for _ in range(2):  # the second publication goes through the links the first made
        assert cli.main(["run", CHAPTER, "--preset", "smoke", "--claims-dir", str(claims)]) == 0
    out = capsys.readouterr().out
    assert f"-> {claims}/{CHAPTER}.ipynb" in out and ".v-" not in out
