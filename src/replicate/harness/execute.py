"""One run of one chapter: check it (`check_ready`, before any kernel and without torch), stage
and execute it with papermill, and publish its notebook and verdict together (`publish`), so a
failed or interrupted run never replaces a good chapter. Ctrl-C, SIGTERM or SIGHUP stop the
kernel and remove the staging folder; `PUBLISHED` says which chapters were put in place first."""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

from .. import data
from ..config import SCHEMA_PRESET, ConfigError, RunSpec, get_chapter
from ..runtime import (BOOK_DIR, PROJECT_ROOT, atomic_write, cache_dir, check_cache_dir, display_path,
                       runs_dir)
from . import publish
from .book_pages import load_paper, paper_summary, refresh_chapter_page
from .seeds import load_seeds

STAGING_DIR = PROJECT_ROOT / ".cache" / "staging"
KERNEL_CONFIG = Path(__file__).resolve().parent / "kernel_quiet.py"
CLAIMS_DIR, RESULTS_DIR, JUDGING_DIR = BOOK_DIR / "claims", BOOK_DIR / "results", BOOK_DIR / "judging"
# The `paper` preset's published runs: notebook and verdict side by side, outside the book's
# table of contents; the chapter's page and the scoreboard read the verdict from there.
PAPER_DIR = RESULTS_DIR / "paper"
PUBLISHED: list[str] = []  # chapters put into place by this process (the truth after a signal)


def check_ready(spec: RunSpec) -> None:
    """What a run needs besides valid parameters (RunSpec.make checked those): its notebook, its
    data present, regular, readable and large enough, and a cache folder it can write to."""
    ch = get_chapter(spec.chapter)
    if not ch.notebook.exists():
        raise ConfigError(f"chapter {ch.name} has no notebook at {display_path(ch.notebook)}")
    if "mnist" in ch.get("datasets", ()):
        needs = dict(ch.get("data_needs", {}))
        # The paper preset's own counts are lowered to what the split holds when the run starts
        # (`verdict.fit_to_mnist_split`, recorded in the verdict); counts given with -p are not.
        if spec.preset == "paper":
            needs = {k: v for k, v in needs.items() if k == "classes" or v in spec.overrides}
        try:
            data.check_mnist_files(data.require_mnist())
            data.check_mnist_capacity(
                n_train=spec.params.get(needs["n_train"]) if "n_train" in needs else None,
                n_per_class=spec.params.get(needs["n_per_class"]) if "n_per_class" in needs else None,
                classes=tuple(needs.get("classes", range(10))))
        except (OSError, ValueError) as err:
            raise ConfigError(f"chapter {ch.name} needs MNIST. {err}") from None
    try:
        check_cache_dir()
    except (OSError, ValueError) as err:
        raise ConfigError(f"the run cache cannot be used: {err}") from None


def run_folder(spec: RunSpec) -> Path:
    """`runs/<chapter>/<preset>[-<hash of the overrides>]/`: where a run that is not published goes."""
    if not spec.overrides:
        return runs_dir() / spec.chapter / spec.preset
    text = json.dumps(spec.overrides, sort_keys=True, default=str)
    return runs_dir() / spec.chapter / f"{spec.preset}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def is_book_run(spec: RunSpec) -> bool:
    return spec.preset == SCHEMA_PRESET and not spec.overrides  # else runs/ unless --publish


# Room a chapter's page needs where it lands (an executed notebook with its figures is a few MB):
# a full disk is found before the kernel starts, not after the chapter has run for minutes.
MIN_FREE_MB = 50


def check_writable(folder: Path) -> Path | None:
    """Create `folder` if missing and make sure a page can be written there; returns the topmost
    folder this created (None if it existed), so that a run that writes nothing can remove it."""
    folder = Path(folder)
    created = next((f for f in reversed([folder, *folder.parents]) if not f.exists()), None)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot create {display_path(folder)}: {err.strerror}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        remove_if_empty(folder, created)
        raise ConfigError(f"{display_path(folder)} is not writable; nothing was run")
    free_mb = shutil.disk_usage(folder).free / 2**20
    if free_mb < MIN_FREE_MB:
        remove_if_empty(folder, created)
        raise ConfigError(f"{display_path(folder)} has {free_mb:.0f} MB free, less than the "
                          f"{MIN_FREE_MB} MB a chapter's page needs; nothing was run")
    return created


def remove_if_empty(folder: Path, created: Path | None) -> None:
    """Remove `folder` and its parents up to `created` (what `check_writable` made) while empty."""
    if created is None:
        return
    for path in [Path(folder), *Path(folder).parents]:
        try:
            path.rmdir()  # only an empty folder goes
        except OSError:
            return
        if path == created:
            return


# Staging folders: <chapter>-<host>-<pid>-<random>, removed by their run however it ends; those
# of dead processes on this host (a run killed -9) are removed by the next run.
HOST = socket.gethostname().replace("-", "_")


def remove_stale_staging(root: Path = STAGING_DIR) -> None:
    import psutil
    for folder in root.glob("*-*-*-*") if root.is_dir() else ():
        match = re.fullmatch(r"(.+)-(.+)-(\d+)-[^-]+", folder.name)
        if match and match.group(2) == HOST and not psutil.pid_exists(int(match.group(3))):
            shutil.rmtree(folder, ignore_errors=True)


def new_staging(chapter: str, root: Path | None = None) -> Path:
    root = Path(root or STAGING_DIR)
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(root)
    return Path(tempfile.mkdtemp(prefix=f"{chapter}-{HOST}-{os.getpid()}-", dir=root))


def stop_kernels() -> None:
    """Kill kernels this process started that are still alive (after an interrupt)."""
    import psutil
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "ipykernel" in " ".join(child.cmdline()):
                child.kill()


def _shown(verdict: Path, claims_dir: Path) -> str:
    """Where the notebook says its verdict went: nowhere for the book (its reader has no such
    file: ""), a run folder by its project path, a folder outside the project or a hidden one (a
    sweep's, renamed when done) by no path."""
    if verdict.resolve().is_relative_to(BOOK_DIR.resolve() / "results"):
        return ""
    shown = display_path(verdict)
    if Path(shown).is_absolute() or any(part.startswith(".") for part in Path(shown).parts):
        return (f"{verdict.name}, beside this notebook" if verdict.parent == Path(claims_dir)
                else f"results/{verdict.name}")
    return shown


def execute(spec: RunSpec, claims_dir: Path, results_dir: Path,
            staging_root: Path | None = None) -> tuple[bool, str]:
    """Execute one chapter; on success publish its notebook and verdict together. (ok, message)"""
    import papermill as pm
    claims_dir, results_dir, name = Path(claims_dir), Path(results_dir), spec.chapter
    staging = new_staging(name, staging_root)
    out, result = staging / f"{name}.ipynb", staging / "results" / f"{name}.json"
    started = time.perf_counter()
    # The kernel's connection file is a temporary file of this process (jupyter_client): it goes
    # into the staging folder too, so that nothing outlives the run.
    (staging / "runtime").mkdir()
    saved_tempdir, tempfile.tempdir = tempfile.tempdir, str(staging / "runtime")
    # The kernel inherits this environment. tqdm stays quiet there: its bars would be saved into
    # the published notebook.
    kernel_env = dict(REPLICATE_RESULTS_DIR=str(result.parent), TQDM_DISABLE="1",
                      JUPYTER_RUNTIME_DIR=str(staging / "runtime"),
                      REPLICATE_RESULTS_SHOWN=_shown(results_dir / result.name, claims_dir))
    saved_env = {k: os.environ.get(k) for k in kernel_env}
    os.environ.update(kernel_env)
    try:
        try:
            called = time.perf_counter()
            pm.execute_notebook(str(get_chapter(name).notebook), str(out),
                                parameters={"spec": spec.as_parameter()}, kernel_name="python3",
                                progress_bar=sys.stderr.isatty(), cwd=str(PROJECT_ROOT),
                                extra_arguments=[f"--config={KERNEL_CONFIG}"])
        except pm.PapermillExecutionError as err:
            return False, (f"{name} failed in code cell {err.exec_count} (cell index "
                           f"{err.cell_index}): {err.ename}: {err.evalue}")
        except Exception as err:  # kernel died, timeout, ...
            return False, f"{name} failed: {type(err).__name__}: {err}"
        finally:
            for key, value in saved_env.items():
                os.environ.pop(key) if value is None else os.environ.update({key: value})
        if not result.exists():
            return False, f"{name} ran but wrote no verdict (did the notebook call run.save()?)"
        try:
            record = json.loads(result.read_text()) | {
                "notebook_s": notebook_costs(out, time.perf_counter() - called),
                "cpu_model": cpu_model()}
            atomic_write(result, json.dumps(record, indent=2) + "\n")
            prepare_page(out, record, results_dir)
        except Exception as err:  # a malformed verdict or notebook: report it, publish nothing
            return False, f"{name} ran but its page could not be prepared: {type(err).__name__}: {err}"
        try:
            pairs = [(result, results_dir / result.name), (out, claims_dir / out.name)]
            publish.publish_together(pairs, journal_path(results_dir, name),
                                     on_done=lambda: PUBLISHED.append(name))
        except publish.PublishError as err:
            return False, f"{name} ran but could not be put in place: {err}"
        took = time.perf_counter() - started
        # The link's own path (display_path would follow it into the publication's folder).
        return True, f"{name} done in {took:.0f} s -> {display_path(claims_dir) + '/' + out.name}"
    finally:
        tempfile.tempdir = saved_tempdir
        stop_kernels()
        shutil.rmtree(staging, ignore_errors=True)


def cpu_model() -> str:
    """The processor's model name (beside the record's vector unit, `cpu_capability`): float
    reductions, and so a long run's path, can differ between two CPUs with the same unit."""
    import platform

    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    return platform.processor() or platform.machine() or "unknown"


def notebook_costs(notebook: Path, wall: float | None = None, shown: int = 6) -> dict:
    """Where an executed notebook's time went, from papermill's timestamps: the cells' total, the
    kernel's start and shutdown (`wall`, papermill's whole call, less the cells), and the `shown`
    slowest code cells, each by its number among the code cells and its first line."""
    nb = json.loads(Path(notebook).read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    timed = [(i, c) for i, c in enumerate(code, 1) if (c["metadata"].get("papermill") or {})
             .get("duration") is not None]
    if not timed:
        return {}
    slowest = sorted(timed, key=lambda ic: -ic[1]["metadata"]["papermill"]["duration"])[:shown]

    def first_line(cell: dict) -> str:
        lines = [ln for ln in "".join(cell["source"]).splitlines()
                 if ln.strip() and not ln.startswith("# NBVAL")]
        return (lines[0][:60] if lines else "")

    cells = sum(c["metadata"]["papermill"]["duration"] for _, c in timed)
    return {"cells": round(cells, 1),
            **({"kernel start and shutdown": round(max(wall - cells, 0.0), 1)}
               if wall is not None else {}),
            "slowest cells": [{"cell": i, "first line": first_line(c),
                               "s": round(c["metadata"]["papermill"]["duration"], 1)}
                              for i, c in slowest]}


def journal_path(results_dir: Path, chapter: str) -> Path:
    return Path(results_dir) / f".{chapter}.journal"


def repair_book(claims_dir: Path = CLAIMS_DIR, results_dir: Path = RESULTS_DIR) -> None:
    """Before anything reads the book: remove what killed publications left beside its chapters
    (their pairs are whole: `publish`), and give a pair still held in plain files (published
    before the links) its links, so that its next publication is one swap too."""
    results_dir = Path(results_dir)
    for verdicts, pages in ((results_dir, Path(claims_dir)), (results_dir / "paper",) * 2):
        for verdict in sorted(verdicts.glob("[!.]*.json")):
            name = verdict.name[:-len(".json")]
            if name.endswith(".seeds") or not (pages / f"{name}.ipynb").exists():
                continue
            if done := publish.repair(journal_path(verdicts, name)):
                print(f"{name}: {done}", file=sys.stderr)
            publish.adopt(journal_path(verdicts, name), [verdict, pages / f"{name}.ipynb"])


def prepare_page(notebook: Path, record: dict, results_dir: Path) -> None:
    """Reader-facing touches on an executed chapter: no staging paths, the verdict box on top."""
    import nbformat
    nb, name = nbformat.read(notebook, as_version=4), record["chapter"]
    nb.metadata.get("papermill", {}).update(input_path=f"notebooks/{name}.ipynb",
                                            output_path=f"book/claims/{name}.ipynb")
    drop_cache_lines(nb)
    nbformat.write(nb, notebook)
    published = load_paper(name, results_dir) if record["preset"] == SCHEMA_PRESET else None
    paper = paper_summary(name, *published) if published else None
    refresh_chapter_page(notebook, record, load_seeds(name, results_dir), JUDGING_DIR, paper,
                         paper_seeds=published[1] if published else None,
                         paper=published[0] if published else None)


def drop_cache_lines(nb) -> None:
    """Remove printed lines that name the run cache (a corrupt entry recomputed, a run that could
    not be stored): how a page was made is in its record, not among a reader's outputs."""
    folder = cache_dir()
    names = {str(folder), str(folder.resolve()), display_path(folder)}
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if output.get("output_type") == "stream":
                lines = output["text"].splitlines(keepends=True)
                output["text"] = "".join(ln for ln in lines if not any(n in ln for n in names))
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs
                            if o.get("output_type") != "stream" or o.get("text")]


SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # unwind like Ctrl-C: every `finally` runs


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP, by name."""


def _on_signal(signum, frame):
    for sig in SIGNALS:  # further signals are ignored while the run cleans up
        signal.signal(sig, signal.SIG_IGN)
    # The kernel goes first: asked to shut down in the middle of a cell, it would print its own
    # traceback; killed, it says nothing, and papermill's clean-up finds it gone.
    stop_kernels()
    logging.disable(logging.CRITICAL)  # papermill, nbclient and asyncio would each log the death
    raise Interrupted(signal.Signals(signum).name)


@contextlib.contextmanager
def signals_interrupt():
    saved = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        signal.signal(sig, _on_signal)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
