"""`python -m replicate`: list chapters, run them at a preset, build the book, validate it.

    python -m replicate list
    python -m replicate list 07_optimizers
    python -m replicate run 07_optimizers                      # the book's preset: publishes
    python -m replicate run 07_optimizers --preset cpu -p iterations 5000   # -> runs/
    python -m replicate run 05_slingshot_hessian --preset paper --shape-only
    python -m replicate sweep 07_optimizers --seeds 0-4 -p check_lr 1e-2,1e-1
    python -m replicate build
    python -m replicate validate 07_optimizers
    python -m replicate bench

`run` executes a chapter's source notebook with papermill into a staging folder and moves the
executed notebook and its verdict into place together, only when every cell succeeded, so a
failed or interrupted run never replaces a good chapter. Only the book's preset (`cpu`) without
`-p` overrides publishes into `book/claims/` and `book/results/`; any other run goes to its own
run folder `runs/<chapter>/<preset>[-<hash of the overrides>]/` unless `--publish` is given.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from . import presets
from ..runtime import BOOK_DIR, PROJECT_ROOT, display_path, runs_dir

SANITIZE_FILE = Path(__file__).resolve().parent / "nbval_sanitize.cfg"
JUDGING_DIR = BOOK_DIR / "judging"
DEFAULT_CLAIMS = str(BOOK_DIR / "claims")
DEFAULT_RESULTS = str(BOOK_DIR / "results")
PUBLISHED_PRESET = "cpu"  # the book's preset: the only one `run` publishes without --publish
# Staging folders live in the project, named <chapter>-<host>-<pid>-<random>: a run removes its
# own when it ends, however it ends, and sweeps those of dead processes (a killed run's) first.
STAGING_DIR = PROJECT_ROOT / ".cache" / "staging"
KERNEL_CONFIG = Path(__file__).resolve().parent / "kernel_quiet.py"


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _select(names: list[str]) -> list[presets.Chapter]:
    known = presets.chapters()
    if not names:
        return list(known.values())
    return [presets.get_chapter(n) for n in names]


def cmd_list(args) -> int:
    if args.chapter:
        return _list_parameters(presets.get_chapter(args.chapter))
    for ch in presets.chapters().values():
        status = "" if ch.notebook.exists() else "  (notebook missing)"
        print(f"{ch.name}  [{', '.join(ch.presets)}]{status}\n    {ch.title}\n    claim: {ch.claim}")
    print("\n`python -m replicate list CHAPTER` lists a chapter's parameters.")
    return 0


PARAMETER_LINE = re.compile(r"^(\w+)\s*:\s*([^=]+?)\s*=\s*(.+?)\s*(?:#\s*(.*))?$")


def notebook_parameters(ch: presets.Chapter) -> list[tuple[str, str, str, str]]:
    """(name, type, cpu value, comment) for each line `name: type = value  # comment` of the
    source notebook's `parameters` cell."""
    nb = json.loads(ch.notebook.read_text())
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    if not cells:
        raise presets.ConfigError(f"{ch.notebook} has no cell tagged `parameters`")
    found = []
    for line in "".join(cells[0]["source"]).splitlines():
        match = PARAMETER_LINE.match(line.strip())
        if match:
            name, kind, value, comment = match.groups()
            found.append((name, kind, value, comment or ""))
        elif found and line.strip().startswith("#"):  # a comment continued on the next line
            name, kind, value, comment = found[-1]
            found[-1] = (name, kind, value, f"{comment} {line.strip().lstrip('#').strip()}".strip())
    return found


def _list_parameters(ch: presets.Chapter) -> int:
    params = notebook_parameters(ch)
    print(f"{ch.name}: {ch.title}\npresets: {', '.join(ch.presets)} (values below: cpu)\n")
    for name, kind, value, comment in params:
        print(f"  {name}: {kind} = {value}")
        if comment:
            print(textwrap.fill(comment, 96, initial_indent=" " * 6, subsequent_indent=" " * 6))
    print(f"\nset one with: python -m replicate run {ch.name} -p NAME VALUE")
    return 0


def _parse_overrides(pairs: list[list[str]]) -> dict:
    return {name: presets.parse_value(text) for name, text in pairs}


class PublishError(RuntimeError):
    """The executed notebook and its verdict could not both be put in place (neither was)."""


def _block_signals():
    """Hold Ctrl-C/SIGTERM/SIGHUP until the block ends: a swap is never cut in half."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    return contextlib.ExitStack() if not hasattr(signal, "pthread_sigmask") else _Masked(held)


class _Masked:
    def __init__(self, held):
        self.held = held

    def __enter__(self):
        self.old = signal.pthread_sigmask(signal.SIG_BLOCK, self.held)

    def __exit__(self, *exc):
        signal.pthread_sigmask(signal.SIG_SETMASK, self.old)


def publish_together(pairs: list[tuple[Path, Path]]) -> None:
    """Put each `src` at its `dest`, all or none: on any failure every `dest` keeps its old file.

    The new files are first copied beside their destinations (`.<name>.incoming`), the old ones
    kept as `.<name>.previous`; then each is renamed into place, and a failure part-way renames
    the old ones back. No temporary file remains either way. Raises PublishError.
    """
    incoming = [dest.with_name(f".{dest.name}.incoming") for _, dest in pairs]
    previous = [dest.with_name(f".{dest.name}.previous") for _, dest in pairs]
    swapped: list[int] = []
    try:
        with _block_signals():
            for (src, dest), tmp, old in zip(pairs, incoming, previous):
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, tmp)
                if dest.exists():
                    shutil.copy2(dest, old)
            try:
                for i, ((_, dest), tmp) in enumerate(zip(pairs, incoming)):
                    os.replace(tmp, dest)
                    swapped.append(i)
            except OSError:
                for i in reversed(swapped):
                    dest = pairs[i][1]
                    if previous[i].exists():
                        os.replace(previous[i], dest)
                    else:
                        dest.unlink(missing_ok=True)
                raise
    except OSError as err:
        raise PublishError(f"{type(err).__name__}: {err}") from None
    finally:
        for path in (*incoming, *previous):
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_staging(root: Path = STAGING_DIR) -> None:
    """Remove staging folders left by runs on this host whose process is gone (killed -9)."""
    host = socket.gethostname().replace("-", "_")
    for folder in root.glob("*-*-*-*") if root.is_dir() else ():
        match = re.fullmatch(r"(.+)-(.+)-(\d+)-[^-]+", folder.name)
        if match and match.group(2) == host and not _alive(int(match.group(3))):
            shutil.rmtree(folder, ignore_errors=True)


def _new_staging(chapter: str, root: Path | None = None) -> Path:
    root = Path(root or STAGING_DIR)
    root.mkdir(parents=True, exist_ok=True)
    sweep_staging(root)
    host = socket.gethostname().replace("-", "_")
    return Path(tempfile.mkdtemp(prefix=f"{chapter}-{host}-{os.getpid()}-", dir=root))


@contextlib.contextmanager
def _environ(**values: str):
    """Set environment variables (the kernel inherits them), restoring them afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _stop_kernels() -> None:
    """Kill kernels this process started that are still alive (after an interrupt)."""
    try:
        import psutil
    except ImportError:
        return
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "ipykernel" in " ".join(child.cmdline()):
                child.kill()


def _shown(verdict: Path, claims_dir: Path) -> str:
    """Where the notebook says its verdict went: the book or a run folder by its project path; a
    folder outside the project or a hidden one (a sweep's, renamed when done) by no path."""
    shown = display_path(verdict)
    if Path(shown).is_absolute() or any(part.startswith(".") for part in Path(shown).parts):
        return (f"{verdict.name}, beside this notebook" if verdict.parent == Path(claims_dir)
                else f"results/{verdict.name}")
    return shown


def run_chapter(ch: presets.Chapter, preset: str, overrides: dict, claims_dir: Path,
                results_dir: Path, staging_root: Path | None = None) -> tuple[bool, str]:
    """Execute one chapter; on success publish its notebook and verdict together. (ok, message)

    The staging folder goes under `staging_root` (default `.cache/staging/`); a caller that
    removes a folder of its own after a crash (a sweep's task) can pass that one.
    """
    import papermill as pm

    claims_dir, results_dir = Path(claims_dir), Path(results_dir)
    staging = _new_staging(ch.name, staging_root)
    out = staging / f"{ch.name}.ipynb"
    started = time.perf_counter()
    # The kernel's connection file is a temporary file of this process (jupyter_client): it goes
    # into the staging folder too, so that nothing outlives the run.
    (staging / "runtime").mkdir()
    saved_tempdir, tempfile.tempdir = tempfile.tempdir, str(staging / "runtime")
    try:
        # The kernel inherits this process's environment: the verdict goes to the staging
        # folder (the notebook prints where it will be published), the kernel's connection file
        # too, and tqdm stays quiet (its bars would be saved into the published notebook).
        # REPLICATE_OVERRIDES names the parameters set on purpose, so that one set to its cpu
        # value still overrides another preset's (e.g. `--preset paper -p n_per_class 500`).
        with _environ(REPLICATE_RESULTS_DIR=str(staging / "results"), TQDM_DISABLE="1",
                      JUPYTER_RUNTIME_DIR=str(staging / "runtime"),
                      REPLICATE_RESULTS_SHOWN=_shown(results_dir / f"{ch.name}.json", claims_dir),
                      **{presets.OVERRIDES_ENV: json.dumps(sorted(overrides))}):
            try:
                pm.execute_notebook(str(ch.notebook), str(out),
                                    parameters={"preset": preset, **overrides},
                                    kernel_name="python3", progress_bar=sys.stderr.isatty(),
                                    cwd=str(PROJECT_ROOT),
                                    extra_arguments=[f"--config={KERNEL_CONFIG}"])
            except pm.PapermillExecutionError as err:
                return False, (f"{ch.name} failed in code cell {err.exec_count} (cell index "
                               f"{err.cell_index}): {err.ename}: {err.evalue}")
            except Exception as err:  # kernel died, timeout, ...
                return False, f"{ch.name} failed: {type(err).__name__}: {err}"
        result = staging / "results" / f"{ch.name}.json"
        if not result.exists():
            return False, f"{ch.name} ran but wrote no verdict (did the notebook call run.save()?)"
        try:
            _prepare_page(out, ch, json.loads(result.read_text()), results_dir)
        except Exception as err:  # a malformed verdict or notebook: report it, publish nothing
            return False, f"{ch.name} ran but its page could not be prepared: {type(err).__name__}: {err}"
        try:
            publish_together([(result, results_dir / result.name), (out, claims_dir / out.name)])
        except PublishError as err:
            return False, f"{ch.name} ran but could not be put in place: {err}"
        return True, (f"{ch.name} done in {time.perf_counter() - started:.0f} s -> "
                      f"{display_path(claims_dir / out.name)}")
    finally:
        tempfile.tempdir = saved_tempdir
        _stop_kernels()
        shutil.rmtree(staging, ignore_errors=True)


def _prepare_page(notebook: Path, ch: presets.Chapter, record: dict, results_dir: Path) -> None:
    """Reader-facing touches on an executed chapter: no staging paths, the verdict box on top."""
    import nbformat

    from .book_pages import load_json, refresh_chapter_page
    from .scoreboard import judging_label

    nb = nbformat.read(notebook, as_version=4)
    meta = nb.metadata.get("papermill", {})
    meta.update(input_path=f"notebooks/{ch.name}.ipynb", output_path=f"book/claims/{ch.name}.ipynb")
    nbformat.write(nb, notebook)
    refresh_chapter_page(notebook, record, load_json(Path(results_dir) / f"{ch.name}.seeds.json"),
                         judging_label(ch.name, JUDGING_DIR))


def run_folder(chapter: str, preset: str, overrides: dict) -> Path:
    """`runs/<chapter>/<preset>[-<hash>]/`: where a run that is not published goes."""
    if not overrides:
        return runs_dir() / chapter / preset
    text = json.dumps(overrides, sort_keys=True, default=str)
    return runs_dir() / chapter / f"{preset}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def _check_writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise presets.ConfigError(f"cannot create {display_path(folder)}: {err.strerror}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise presets.ConfigError(f"{display_path(folder)} is not writable; nothing was run")


def _in_book(folder: Path) -> bool:
    return Path(folder).resolve().is_relative_to(BOOK_DIR.resolve())


def cmd_run(args) -> int:
    # Everything is checked before the first chapter starts.
    chosen = _select(args.chapters)
    overrides = _parse_overrides(args.param or [])
    preset = args.preset or ("paper" if args.shape_only else PUBLISHED_PRESET)
    per_chapter = {ch.name: overrides for ch in chosen}
    if args.shape_only:
        preset, per_chapter, scratch = _shape_only_setup(args, chosen, preset, overrides)
    for ch in chosen:
        check_ready(ch, preset, per_chapter[ch.name])
    # Where each chapter goes: the book only for the book's preset without overrides (or with
    # --publish), else its run folder; --claims-dir/--results-dir (tests, sweeps) name one.
    targets = {}
    for ch in chosen:
        if args.claims_dir:
            claims = Path(args.claims_dir)
            targets[ch.name] = claims, Path(args.results_dir) if args.results_dir else claims
        elif args.publish or (preset == PUBLISHED_PRESET and not per_chapter[ch.name]):
            targets[ch.name] = Path(DEFAULT_CLAIMS), Path(args.results_dir or DEFAULT_RESULTS)
        else:
            folder = run_folder(ch.name, preset, per_chapter[ch.name])
            targets[ch.name] = folder, folder
    publishing = any(_in_book(f) for pair in targets.values() for f in pair)
    for folder in sorted({f for pair in targets.values() for f in pair}):
        _check_writable(folder)
    from ..runtime import git_commit

    commit = git_commit()
    if commit.endswith("+dirty"):
        if publishing and not args.allow_dirty:
            raise presets.ConfigError(
                "the code has uncommitted changes; commit them before publishing into the book "
                "(or pass --allow-dirty: the verdicts then record the commit as +dirty)")
        print(f"warning: the code has uncommitted changes; the verdicts will record {commit}.",
              file=sys.stderr)
    failures = 0
    for ch in chosen:
        overrides = per_chapter[ch.name]
        claims_dir, results_dir = targets[ch.name]
        where = ("" if _in_book(claims_dir) else
                 f" into {display_path(claims_dir)}/ (not the book; --publish puts it there)")
        print(f"running {ch.name} at preset {preset}" +
              (f" with {overrides}" if overrides else "") + where, flush=True)
        ok, message = run_chapter(ch, preset, overrides, claims_dir, results_dir)
        if ok:
            print(message)
        else:
            failures += 1
            print(f"error: {message}\n       the published {display_path(claims_dir / ch.notebook.name)} "
                  f"and its verdict were left unchanged", file=sys.stderr)
    if args.shape_only:
        print(f"shape-only runs (paper preset cut down) written to {scratch}")
    return 1 if failures else 0


def check_ready(ch: presets.Chapter, preset: str, overrides: dict) -> None:
    """Everything a run needs, checked before anything executes: notebook, preset, parameters, data."""
    if not ch.notebook.exists():
        raise presets.ConfigError(f"chapter {ch.name} has no notebook at {ch.notebook}")
    presets.load_preset(ch.name, preset)
    presets.validate(ch.name, overrides)
    presets.preflight(ch.name, preset, overrides)  # cross-parameter rules, data readable and big enough
    if "mnist" in ch.datasets:
        from ..data import require_mnist

        try:
            require_mnist()
        except FileNotFoundError as err:
            raise presets.ConfigError(f"chapter {ch.name} needs MNIST. {err}") from None


def _shape_only_setup(args, chosen, preset, overrides):
    """`run --shape-only`: the paper preset with each chapter's shape_only overrides (then -p on
    top), executed into a scratch folder unless --claims-dir names one: never the published book."""
    if preset != presets.SHAPE_ONLY_BASE:
        raise presets.ConfigError(f"--shape-only cuts down the {presets.SHAPE_ONLY_BASE} preset; "
                                  f"got --preset {preset}")
    per_chapter = {ch.name: {**presets.shape_only(ch.name), **overrides} for ch in chosen}
    if not args.claims_dir:
        args.claims_dir = tempfile.mkdtemp(prefix="replicate-shape-only-")
    if not args.results_dir:
        args.results_dir = str(Path(args.claims_dir) / "results")
    return preset, per_chapter, args.claims_dir


def cmd_sweep(args) -> int:
    from .sweep import main_sweep

    return main_sweep(args)


def refresh_pages(results_dir: Path, claims_dir: Path = BOOK_DIR / "claims") -> int:
    """Rewrite every executed chapter's verdict box and across-seeds section from its results."""
    from .book_pages import load_json, refresh_chapter_page
    from .scoreboard import judging_label

    changed = 0
    for ch in presets.chapters():
        notebook, record = claims_dir / f"{ch}.ipynb", load_json(results_dir / f"{ch}.json")
        if notebook.exists() and record:
            changed += refresh_chapter_page(notebook, record,
                                            load_json(results_dir / f"{ch}.seeds.json"),
                                            judging_label(ch, JUDGING_DIR))
    return changed


def cmd_build(args) -> int:
    from .scoreboard import load_results, provenance, write_judging, write_scoreboard, write_toc
    from .scoreboard import write_teaching

    results_dir = Path(args.results_dir)
    write_teaching(results_dir, BOOK_DIR / "teaching.md")  # before the toc, which lists it
    write_toc(BOOK_DIR / "claims", BOOK_DIR / "_toc.yml")
    write_judging(JUDGING_DIR, BOOK_DIR / "judging.md")
    refresh_pages(results_dir)
    page = write_scoreboard(results_dir, BOOK_DIR / "scoreboard.md")
    mixed = provenance(load_results(results_dir))
    if mixed.startswith("**"):
        print("warning: " + mixed.replace("**", "").strip(), file=sys.stderr)
    from .bench import RESULTS_FILE, render_page, with_current_chapters

    if RESULTS_FILE.exists():
        record = with_current_chapters(json.loads(RESULTS_FILE.read_text()), results_dir)
        (BOOK_DIR / "benchmarks.md").write_text(render_page(record))
    print(f"scoreboard and table of contents written to {page.parent}")
    # -W: warnings are errors (Jupyter Book v1 otherwise exits 0 on a broken page).
    cmd = ["jupyter-book", "build", str(PROJECT_ROOT), "--toc", str(BOOK_DIR / "_toc.yml"),
           "--config", str(PROJECT_ROOT / "_config.yml"), "-W", "-n", "--keep-going"]
    jb = Path(sys.executable).with_name("jupyter-book")
    if jb.exists():
        cmd[0] = str(jb)
    code = subprocess.run(cmd, cwd=PROJECT_ROOT).returncode
    if code == 0:
        print(f"book built: {PROJECT_ROOT / '_build' / 'html' / 'index.html'}")
    return code


def cmd_validate(args) -> int:
    from .drift import chapter_tolerances, compare, table

    chosen = _select(args.chapters)
    notebooks = [Path(args.claims_dir) / f"{ch.name}.ipynb" for ch in chosen]
    missing = [str(nb) for nb in notebooks if not nb.exists()]
    if missing:
        return _fail(f"no executed chapter at {', '.join(missing)}; run `python -m replicate run` first")
    STAGING_DIR.mkdir(parents=True, exist_ok=True)
    sweep_staging()
    host = socket.gethostname().replace("-", "_")
    with tempfile.TemporaryDirectory(prefix=f"validate-{host}-{os.getpid()}-", dir=STAGING_DIR) as scratch:
        # An empty run cache: validation re-computes every training run, it never re-reads one.
        env = dict(os.environ, TQDM_DISABLE="1", REPLICATE_RESULTS_DIR=scratch,
                   REPLICATE_CACHE_DIR=str(Path(scratch) / "cache"),
                   JUPYTER_RUNTIME_DIR=str(Path(scratch) / "runtime"))
        env.pop("REPLICATE_NO_CACHE", None)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
               "--nbval-sanitize-with", str(SANITIZE_FILE), *map(str, notebooks)]
        code = subprocess.run(cmd, env=env, cwd=PROJECT_ROOT).returncode
        # nbval compared the words; the numbers are compared here, within the stated tolerance.
        drifted = 0
        for ch in chosen:
            published = Path(args.results_dir) / f"{ch.name}.json"
            now = Path(scratch) / f"{ch.name}.json"
            if not (published.exists() and now.exists()):
                print(f"{ch.name}: no verdict to compare "
                      f"({'re-execution wrote none' if published.exists() else 'none published'})")
                drifted += 1
                continue
            differences = compare(json.loads(published.read_text()), json.loads(now.read_text()),
                                  *chapter_tolerances(ch.name))
            print(table(ch.name, differences))
            drifted += any(not d.within for d in differences)
    if drifted:
        print(f"error: {drifted} chapter(s) differ from their published verdict beyond tolerance",
              file=sys.stderr)
    return code or (1 if drifted else 0)


def cmd_bench(args) -> int:
    from .bench import BENCHMARKS, run_benchmarks

    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        return _fail(f"unknown benchmark(s) {', '.join(unknown)}; valid: {', '.join(BENCHMARKS)}")
    run_benchmarks(args.names or None)
    return 0


ENV_RUN = """environment variables read:
  REPLICATE_DATA_DIR     where MNIST is read from (default: data/ in the project)
  REPLICATE_CACHE_DIR    the run cache of finished trainings (default: .cache/runs/)
  REPLICATE_NO_CACHE     set to 1 to recompute every training run instead of reusing it
  REPLICATE_NO_DOWNLOAD  set to 1 to never download a dataset
  REPLICATE_DEVICE       force a device (e.g. cpu on a GPU machine); default: CUDA if present
  REPLICATE_RUNS_DIR     where runs that are not published go (default: runs/ in the project)
  OMP_NUM_THREADS        threads per process (one per chapter is fastest on a busy machine)
set by `run` for the kernel: REPLICATE_RESULTS_DIR (staging), TQDM_DISABLE=1 (no progress bars in
the saved notebook), REPLICATE_OVERRIDES (the -p names), JUPYTER_RUNTIME_DIR (kernel files)"""


def _paragraphs(*texts: str) -> str:
    """Description text wrapped to the terminal's usual width (the raw formatter keeps lines)."""
    return "\n".join(textwrap.fill(t, 92) for t in texts)


def _chapters_help() -> str:
    lines = ["chapters and their presets:"]
    lines += [f"  {ch.name:28s} {', '.join(ch.presets)}" for ch in presets.chapters().values()]
    lines.append("`python -m replicate list CHAPTER` shows a chapter's parameters, types and cpu values.")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="python -m replicate", description=__doc__,
                                     formatter_class=raw)
    sub = parser.add_subparsers(dest="command", required=True)

    lister = sub.add_parser(
        "list", help="chapters, their claims and presets; or one chapter's parameters",
        formatter_class=raw,
        description=_paragraphs("With no CHAPTER: every chapter, its claim and presets. With "
                                "CHAPTER: its parameters (name, type, cpu value, what it is), read "
                                "from the source notebook's `parameters` cell.",
                                "Reads no environment variables."))
    lister.add_argument("chapter", nargs="?", metavar="CHAPTER")
    lister.set_defaults(func=cmd_list)

    run = sub.add_parser(
        "run", help="execute chapters (the book's preset into book/, others into runs/)",
        formatter_class=raw,
        description=_paragraphs(
            "Execute chapters (all if none named) with papermill. The executed notebook and its "
            "verdict are put in place together only when every cell succeeded.",
            f"Preset {PUBLISHED_PRESET} without -p publishes into book/claims/ and book/results/ "
            "(refused from uncommitted code unless --allow-dirty); any other preset or -p writes "
            "to runs/<chapter>/<preset>[-<hash of the -p values>]/ unless --publish is given. "
            "Ctrl-C or SIGTERM stops the kernel and leaves the published chapter as it was.",
            "") + "\n" + _chapters_help(),
        epilog=ENV_RUN)
    run.add_argument("chapters", nargs="*", metavar="CHAPTER")
    run.add_argument("--preset", default=None, help="smoke, cpu (default) or paper")
    run.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                     help="override one parameter, e.g. -p iterations 5000 (repeatable); "
                          "`list CHAPTER` names them")
    run.add_argument("--publish", action="store_true",
                     help="put this run into book/ even though it is not the book's preset")
    run.add_argument("--allow-dirty", action="store_true",
                     help="publish from uncommitted code (the verdict records the commit as +dirty)")
    run.add_argument("--shape-only", action="store_true",
                     help="the paper preset with step counts and repetitions cut to a handful: proves "
                          "the paper configuration runs, in minutes (results go to a scratch folder)")
    run.add_argument("--claims-dir", default=None, help=argparse.SUPPRESS)
    run.add_argument("--results-dir", default=None, help=argparse.SUPPRESS)
    run.set_defaults(func=cmd_run)

    sweep = sub.add_parser(
        "sweep", help="run chapters over seeds and parameter values as Ray tasks, "
                      "then aggregate across seeds", formatter_class=raw,
        description=_paragraphs(
            "Run the cross product chapter x seed x every -p value as Ray tasks into "
            "book/sweeps/<chapter>/<run-id>/, then aggregate the runs per chapter into "
            "book/results/<chapter>.seeds.json."), epilog=ENV_RUN.split("\nset by")[0]
        + "\n  RAY_ADDRESS            a Ray cluster to join (as --address)")
    sweep.add_argument("chapters", nargs="+", metavar="CHAPTER")
    sweep.add_argument("--seeds", default="0-2", help="e.g. 0-4, or 0,3,7 (default 0-2)")
    sweep.add_argument("--preset", default="cpu", help="smoke, cpu (default) or paper")
    sweep.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUES"),
                       help="one parameter's values, comma-separated, e.g. -p lr 1e-3,1e-2 (repeatable)")
    sweep.add_argument("--workers", type=int, default=None,
                       help="task slots (default: the cores / the threads one chapter uses)")
    sweep.add_argument("--address", default=None,
                       help="join an existing Ray cluster (e.g. auto, or HOST:6379) instead of a local one")
    sweep.add_argument("--aggregate-only", action="store_true",
                       help="run nothing: rewrite the seeds files from the runs already on disk")
    sweep.add_argument("--sweeps-dir", default=str(BOOK_DIR / "sweeps"), help=argparse.SUPPRESS)
    sweep.add_argument("--results-dir", default=DEFAULT_RESULTS, help=argparse.SUPPRESS)
    sweep.set_defaults(func=cmd_sweep)

    build = sub.add_parser(
        "build", help="build the HTML book from the executed chapters", formatter_class=raw,
        description=_paragraphs(
            "Write the scoreboard, table of contents and judging page from book/results/, refresh "
            "each chapter's verdict box, then build the HTML book with Jupyter Book into "
            "_build/html/ (warnings are errors). Executes no chapter.",
            "Reads no environment variables of its own."))
    build.add_argument("--results-dir", default=str(BOOK_DIR / "results"), help=argparse.SUPPRESS)
    build.set_defaults(func=cmd_build)

    validate = sub.add_parser(
        "validate", help="re-execute published chapters and compare them with the book",
        formatter_class=raw,
        description=_paragraphs(
            "Re-execute the published chapters (book/claims/) under nbval with an empty run "
            "cache. nbval compares the verdict cell's words (PASS/FAIL/REPORT, check names, the "
            "verdict) exactly, numbers masked; then each number of the re-executed verdict is "
            "compared with book/results/<chapter>.json within a tolerance: relative 5% or "
            "absolute 0.001, whichever is looser (a chapter may set `tolerance:` in its "
            "chapter.yaml). A table lists the numbers that moved; drift beyond tolerance fails."),
        epilog="environment variables read:\n  REPLICATE_DATA_DIR, REPLICATE_DEVICE, "
               "OMP_NUM_THREADS (as for run)\nset for the kernels: REPLICATE_RESULTS_DIR, "
               "REPLICATE_CACHE_DIR (both in a scratch folder), TQDM_DISABLE=1")
    validate.add_argument("chapters", nargs="*", metavar="CHAPTER")
    validate.add_argument("--claims-dir", default=str(BOOK_DIR / "claims"), help=argparse.SUPPRESS)
    validate.add_argument("--results-dir", default=DEFAULT_RESULTS, help=argparse.SUPPRESS)
    validate.set_defaults(func=cmd_validate)

    bench = sub.add_parser(
        "bench", help="time the measures and chapters (writes book/benchmarks.json)",
        formatter_class=raw,
        description=_paragraphs(
            "Time the measures and the chapters at smoke (all benchmarks if no NAME) and write "
            "book/benchmarks.json; `build` renders it as a page.",
            "Environment variables read: REPLICATE_DATA_DIR, REPLICATE_DEVICE; it sets "
            "REPLICATE_CACHE_DIR (a scratch cache), OMP_NUM_THREADS and TQDM_DISABLE for its runs."))
    bench.add_argument("names", nargs="*", metavar="NAME")
    bench.set_defaults(func=cmd_bench)
    return parser


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP: unwinds like Ctrl-C so every `finally` cleans up."""


def _on_signal(signum, frame):
    # Further signals are ignored while the run cleans up (kernel, staging folder).
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    # The kernel goes first: asked to shut down in the middle of a cell, it would print its own
    # traceback; killed, it says nothing, and papermill's clean-up finds it gone.
    _stop_kernels()
    # Papermill, nbclient and asyncio would each log the kernel's death (with tracebacks); the
    # one line `main` prints says what happened.
    logging.disable(logging.CRITICAL)
    raise Interrupted(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    saved = {sig: signal.getsignal(sig) for sig in handled}
    for sig in handled:
        signal.signal(sig, _on_signal)
    try:
        return args.func(args)
    except presets.ConfigError as err:
        return _fail(str(err))
    except KeyboardInterrupt as err:
        name = str(err) if isinstance(err, Interrupted) else "SIGINT"
        print(f"interrupted ({name}): stopped the kernel and removed the staging folder; "
              "the published chapters were left unchanged", file=sys.stderr)
        return 130
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
