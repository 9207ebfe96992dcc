"""`python -m replicate`: list chapters, run them at a preset, build the book, validate it.

    python -m replicate list
    python -m replicate run 07_optimizers --preset cpu -p iterations 5000
    python -m replicate run 05_slingshot_hessian --preset paper --shape-only
    python -m replicate sweep 07_optimizers --seeds 0-4 -p check_lr 1e-2,1e-1
    python -m replicate build
    python -m replicate validate 07_optimizers
    python -m replicate bench

`run` executes a chapter's source notebook with papermill into a staging folder and moves the
executed notebook (to `book/claims/`) and its verdict (to `book/results/`) into place only when
every cell succeeded, so a failed run never replaces a good chapter.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import presets
from ..runtime import BOOK_DIR, PACKAGE_DIR, PROJECT_ROOT

SANITIZE_FILE = Path(__file__).resolve().parent / "nbval_sanitize.cfg"
JUDGING_DIR = BOOK_DIR / "judging"
DEFAULT_CLAIMS = str(BOOK_DIR / "claims")
DEFAULT_RESULTS = str(BOOK_DIR / "results")


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _select(names: list[str]) -> list[presets.Chapter]:
    known = presets.chapters()
    if not names:
        return list(known.values())
    return [presets.get_chapter(n) for n in names]


def cmd_list(args) -> int:
    for ch in presets.chapters().values():
        status = "" if ch.notebook.exists() else "  (notebook missing)"
        print(f"{ch.name}  [{', '.join(ch.presets)}]{status}\n    {ch.title}\n    claim: {ch.claim}")
    return 0


def _parse_overrides(pairs: list[list[str]]) -> dict:
    return {name: presets.parse_value(text) for name, text in pairs}


def _move_into_place(src: Path, dest: Path) -> None:
    """Copy next to `dest` then rename, so `dest` is either the old file or the whole new one."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.incoming")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def run_chapter(ch: presets.Chapter, preset: str, overrides: dict, claims_dir: Path,
                results_dir: Path) -> tuple[bool, str]:
    import papermill as pm

    with tempfile.TemporaryDirectory(prefix=f"replicate-{ch.name}-") as staging:
        staging = Path(staging)
        out = staging / f"{ch.name}.ipynb"
        # The kernel inherits this process's environment: the verdict goes to the staging
        # folder, and tqdm stays quiet (its bars would be saved into the published notebook).
        # REPLICATE_OVERRIDES names the parameters set on purpose, so that one set to its cpu
        # value still overrides another preset's (e.g. `--preset paper -p n_per_class 500`).
        saved_env = {k: os.environ.get(k) for k in ("REPLICATE_RESULTS_DIR", "TQDM_DISABLE",
                                                     presets.OVERRIDES_ENV)}
        os.environ.update(REPLICATE_RESULTS_DIR=str(staging / "results"), TQDM_DISABLE="1")
        os.environ[presets.OVERRIDES_ENV] = json.dumps(sorted(overrides))
        started = time.perf_counter()
        try:
            pm.execute_notebook(str(ch.notebook), str(out), parameters={"preset": preset, **overrides},
                                kernel_name="python3", progress_bar=sys.stderr.isatty(),
                                cwd=str(PROJECT_ROOT))
        except pm.PapermillExecutionError as err:
            return False, (f"{ch.name} failed in code cell {err.exec_count} (cell index "
                           f"{err.cell_index}): {err.ename}: {err.evalue}")
        except Exception as err:  # kernel died, timeout, ...
            return False, f"{ch.name} failed: {type(err).__name__}: {err}"
        finally:
            for key, value in saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        result = staging / "results" / f"{ch.name}.json"
        if not result.exists():
            return False, f"{ch.name} ran but wrote no verdict (did the notebook call run.save()?)"
        _prepare_page(out, ch, json.loads(result.read_text()), results_dir)
        _move_into_place(result, results_dir / result.name)
        _move_into_place(out, claims_dir / out.name)
        return True, f"{ch.name} done in {time.perf_counter() - started:.0f} s -> {claims_dir / out.name}"


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


def cmd_run(args) -> int:
    # Everything is checked before the first chapter starts.
    chosen = _select(args.chapters)
    overrides = _parse_overrides(args.param or [])
    preset = args.preset or ("paper" if args.shape_only else "cpu")
    per_chapter = {ch.name: overrides for ch in chosen}
    if args.shape_only:
        preset, per_chapter, scratch = _shape_only_setup(args, chosen, preset, overrides)
    for ch in chosen:
        check_ready(ch, preset, per_chapter[ch.name])
    from ..runtime import git_commit

    commit = git_commit()
    if commit.endswith("+dirty"):
        print(f"warning: the code has uncommitted changes; the verdicts will record {commit}. "
              "Publish chapters from a clean commit.", file=sys.stderr)
    failures = 0
    for ch in chosen:
        overrides = per_chapter[ch.name]
        print(f"running {ch.name} at preset {preset}" +
              (f" with {overrides}" if overrides else ""), flush=True)
        ok, message = run_chapter(ch, preset, overrides, Path(args.claims_dir), Path(args.results_dir))
        if ok:
            print(message)
        else:
            failures += 1
            print(f"error: {message}\n       the published {Path(args.claims_dir) / ch.notebook.name} "
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
    if args.claims_dir == DEFAULT_CLAIMS:
        args.claims_dir = tempfile.mkdtemp(prefix="replicate-shape-only-")
    if args.results_dir == DEFAULT_RESULTS:
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
    from .bench import RESULTS_FILE, render_page

    if RESULTS_FILE.exists():
        (BOOK_DIR / "benchmarks.md").write_text(render_page(json.loads(RESULTS_FILE.read_text())))
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
    chosen = _select(args.chapters)
    notebooks = [Path(args.claims_dir) / f"{ch.name}.ipynb" for ch in chosen]
    missing = [str(nb) for nb in notebooks if not nb.exists()]
    if missing:
        return _fail(f"no executed chapter at {', '.join(missing)}; run `python -m replicate run` first")
    with tempfile.TemporaryDirectory(prefix="replicate-validate-") as scratch:
        # An empty run cache: validation re-computes every training run, it never re-reads one.
        env = dict(os.environ, TQDM_DISABLE="1", REPLICATE_RESULTS_DIR=scratch,
                   REPLICATE_CACHE_DIR=str(Path(scratch) / "cache"))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
               "--nbval-sanitize-with", str(SANITIZE_FILE), *map(str, notebooks)]
        return subprocess.run(cmd, env=env, cwd=PROJECT_ROOT).returncode


def cmd_bench(args) -> int:
    from .bench import BENCHMARKS, run_benchmarks

    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        return _fail(f"unknown benchmark(s) {', '.join(unknown)}; valid: {', '.join(BENCHMARKS)}")
    run_benchmarks(args.names or None)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m replicate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="chapters, their claims and presets").set_defaults(func=cmd_list)

    run = sub.add_parser("run", help="execute chapters into book/claims (all chapters if none named)")
    run.add_argument("chapters", nargs="*", metavar="CHAPTER")
    run.add_argument("--preset", default=None, help="smoke, cpu (default) or paper")
    run.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                     help="override one parameter, e.g. -p iterations 5000 (repeatable)")
    run.add_argument("--shape-only", action="store_true",
                     help="the paper preset with step counts and repetitions cut to a handful: proves "
                          "the paper configuration runs, in minutes (results go to a scratch folder)")
    run.add_argument("--claims-dir", default=DEFAULT_CLAIMS, help=argparse.SUPPRESS)
    run.add_argument("--results-dir", default=DEFAULT_RESULTS, help=argparse.SUPPRESS)
    run.set_defaults(func=cmd_run)

    sweep = sub.add_parser("sweep", help="run chapters over seeds and parameter values as Ray tasks, "
                                         "then aggregate across seeds")
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

    build = sub.add_parser("build", help="build the HTML book from the executed chapters")
    build.add_argument("--results-dir", default=str(BOOK_DIR / "results"), help=argparse.SUPPRESS)
    build.set_defaults(func=cmd_build)

    validate = sub.add_parser("validate", help="re-execute executed chapters under nbval")
    validate.add_argument("chapters", nargs="*", metavar="CHAPTER")
    validate.add_argument("--claims-dir", default=str(BOOK_DIR / "claims"), help=argparse.SUPPRESS)
    validate.set_defaults(func=cmd_validate)

    bench = sub.add_parser("bench", help="time the measures and chapters (writes book/benchmarks.json)")
    bench.add_argument("names", nargs="*", metavar="NAME")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except presets.ConfigError as err:
        return _fail(str(err))
