"""`python -m replicate`: list chapters, run them, sweep them, build the book, validate it.

    python -m replicate list [CHAPTER]
    python -m replicate run 07_optimizers                      # the book's preset: publishes
    python -m replicate run 07_optimizers -p iterations 5000    # -> runs/
    python -m replicate run 05_slingshot_hessian --preset paper --shape-only
    python -m replicate sweep 07_optimizers --seeds 0-4 -p check_lr 1e-2,1e-1
    python -m replicate build
    python -m replicate validate 07_optimizers
    python -m replicate bench

This module is the front end only: it reads the command line into run specs
(`config.RunSpec`), and hands them to `execute` (one run), `lanes` (several chapters at once),
`sweep` (many runs, on Ray), `seeds` (across seeds), `validate`, `bench` and the page writers.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import yaml

from ..config import (ConfigError, RunSpec, chapters, get_chapter, load_preset, paper_reduction,
                      parameter_notes, parse_seeds, parse_value, shortened, split_values)
from ..runtime import BOOK_DIR, PROJECT_ROOT, display_path, git_commit
from . import execute as ex
from . import lanes, scoreboard, seeds, sweep
from .ray_tasks import check_address
from .validate import validate


def _select(names: list[str]) -> list[str]:
    return [get_chapter(n).name for n in names] if names else list(chapters())


def cmd_list(args) -> int:
    if args.chapter:
        ch, notes = get_chapter(args.chapter), parameter_notes(args.chapter)
        print(f"{ch.name}: {ch.title}\npresets: {', '.join(ch.presets)} (values below: cpu)\n")
        for name, value in load_preset(ch.name, "cpu").items():
            print(f"  {name}: {type(value).__name__} = {json.dumps(value)}")
            if notes.get(name):
                print(textwrap.fill(notes[name], 96, initial_indent=" " * 6, subsequent_indent=" " * 6))
        print(f"\nset one with: python -m replicate run {ch.name} -p NAME VALUE")
        return 0
    for ch in chapters().values():
        print(f"{ch.name}  [{', '.join(ch.presets)}]{'' if ch.notebook.exists() else '  (no notebook)'}"
              f"\n    {ch.title}\n    claim: {ch.claim}")
    print("\n`python -m replicate list CHAPTER` lists a chapter's parameters.")
    return 0


def cmd_run(args) -> int:
    # Everything is checked before the first chapter starts: specs, data, destinations.
    if args.lanes is not None and args.lanes < 1:
        raise ConfigError("--lanes must be at least 1")
    if args.address:
        check_address(args.address)
    overrides = {name: parse_value(text) for name, text in args.param or []}
    preset = args.preset if args.preset is not None else ("paper" if args.shape_only else "cpu")
    if args.shape_only:
        if preset != "paper":
            raise ConfigError(f"--shape-only cuts down the paper preset; got --preset {preset}")
        specs = [RunSpec.shape_only(ch, overrides) for ch in _select(args.chapters)]
        args.claims_dir = args.claims_dir or tempfile.mkdtemp(prefix="replicate-shape-only-")
        args.results_dir = args.results_dir or str(Path(args.claims_dir) / "results")
    else:
        specs = [RunSpec.make(ch, preset, overrides) for ch in _select(args.chapters)]
    for spec in specs:
        ex.check_ready(spec)
    # The book only for the book's preset without overrides (or with --publish), else the run's
    # own folder; --claims-dir/--results-dir (tests, shape-only runs) name one.
    targets = {}
    for spec in specs:
        if args.claims_dir:
            claims = Path(args.claims_dir)
            targets[spec.chapter] = claims, Path(args.results_dir or claims)
        elif args.publish and spec.preset == "paper":
            if paper_reduction(spec) is None:  # never over the book's chapter, never a tuned run
                declared = get_chapter(spec.chapter).get("paper_reduced") or {}
                raise ConfigError(
                    f"{spec.chapter}: the paper verdict is published at the paper preset as it is"
                    + (" or at " + ", ".join(f"-p {k} {v['used']}" for k, v in declared.items())
                       if declared else "") + f"; {spec.label} is neither (run it without --publish)")
            paper = Path(args.results_dir or ex.RESULTS_DIR) / "paper"
            targets[spec.chapter] = paper, paper
        elif args.publish or ex.is_book_run(spec):
            targets[spec.chapter] = ex.CLAIMS_DIR, Path(args.results_dir or ex.RESULTS_DIR)
        else:
            targets[spec.chapter] = (ex.run_folder(spec),) * 2
    created = {}
    try:
        for folder in sorted({f for pair in targets.values() for f in pair}):
            created[folder] = ex.check_writable(folder)
        return _run_into(args, specs, targets)
    finally:  # a run stopped or failed before it wrote anything leaves no empty folder of its own
        for folder, top in created.items():
            ex.remove_if_empty(folder, top)


def _run_into(args, specs: list[RunSpec], targets: dict[str, tuple[Path, Path]]) -> int:
    """Run the checked specs into their destinations (`targets`: chapter -> claims, results)."""
    in_book = lambda folder: Path(folder).resolve().is_relative_to(BOOK_DIR.resolve())  # noqa: E731
    publishing = any(in_book(f) for pair in targets.values() for f in pair)
    commit = git_commit()
    if commit.endswith("+dirty"):
        if publishing and not args.allow_dirty:
            raise ConfigError("the code has uncommitted changes; commit them before publishing into "
                              "the book (or pass --allow-dirty: the verdicts then record +dirty)")
        print(f"warning: the code has uncommitted changes; the verdicts will record {commit}.",
              file=sys.stderr)
    failures = 0

    def report(spec: RunSpec, ok: bool, message: str) -> None:
        nonlocal failures
        failures += not ok
        page = f"{display_path(targets[spec.chapter][0])}/{spec.chapter}.ipynb"  # the link, not its target
        print(message if ok else f"error: {message}\n       the published {page} and its verdict "
              "were left unchanged", file=sys.stdout if ok else sys.stderr)

    # On a cluster, as many lanes as chapters unless --lanes says otherwise; here, the cores.
    at_once, ran = (args.lanes or (len(specs) if args.address else os.cpu_count() or 1)), False
    if args.address or (at_once > 1 and len(specs) > 1):
        specs = lanes.longest_first(specs, ex.RESULTS_DIR)
        at_once = min(at_once, len(specs))
        where = f"on the Ray cluster at {args.address}" if args.address else "here"
        print(f"running {len(specs)} chapters in {at_once} lanes of one thread each {where}, "
              f"longest first: {', '.join(s.chapter for s in specs)}", flush=True)
        try:
            for result in lanes.run_in_lanes([(s, *targets[s.chapter]) for s in specs], at_once,
                                             address=args.address):
                report(result["spec"], result["ok"], result["message"])
            ran = True
        except ConfigError as err:
            if args.address:  # the cluster asked for is not there: say so, run nothing here
                raise
            # Ray cannot start here: the chapters still run, in turn
            print(f"{err}\nrunning the chapters one after another instead", file=sys.stderr)
    for spec in [] if ran else specs:
        claims_dir, results_dir = targets[spec.chapter]
        where = ("" if in_book(claims_dir) else
                 f" into {display_path(claims_dir)}/ (not the book; --publish puts it there)")
        print(f"running {spec.chapter} at preset {spec.label}{where}", flush=True)
        report(spec, *ex.execute(spec, claims_dir, results_dir))
    if args.shape_only:
        print(f"shape-only runs (paper preset cut down) written to {args.claims_dir}")
    return 1 if failures else 0


def cmd_sweep(args) -> int:
    values = {name: [parse_value(v) for v in split_values(text)] for name, text in args.param or []}
    results_dir, sweeps_dir = Path(args.results_dir), Path(args.sweeps_dir)
    if args.workers is not None and args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    if args.aggregate_only:
        if any(len(v) > 1 for v in values.values()):
            raise ConfigError("--aggregate-only takes one value per parameter")
        groups = [(ch, args.preset, {k: v[0] for k, v in values.items()}) for ch in args.chapters]
    else:
        specs = sweep.cross_product(args.chapters, parse_seeds(args.seeds), args.preset, values)
        if args.address:
            check_address(args.address)
        print(f"sweep: {len(specs)} tasks ({', '.join(args.chapters)} at preset {args.preset}, seeds "
              f"{args.seeds}{', ' + str(values) if values else ''}) -> {display_path(sweeps_dir)}",
              flush=True)
        try:
            outcome = sweep.run_sweep(specs, sweeps_dir, args.workers, args.address)
        except KeyboardInterrupt:
            print("sweep interrupted: tasks cancelled, no run folder half-written", file=sys.stderr)
            return 130
        print(f"{len(outcome['done'])} tasks done, {len(outcome['failed'])} failed, in "
              f"{outcome['wall_s']:.0f} s ({outcome['workers']} slots, {outcome['threads']} thread(s) "
              f"each; Ray took {outcome['ray_start_s']:.0f} s to start)")
        ran = [e["spec"] for e in outcome["done"] + outcome["failed"]]
        groups = sorted({(s.chapter, s.preset, json.dumps(s.without_seed(), sort_keys=True)) for s in ran})
        groups = [(ch, preset, json.loads(o)) for ch, preset, o in groups]
    for chapter, preset, overrides in groups:
        path = seeds.write_seeds(chapter, preset, overrides, results_dir, sweeps_dir)
        print(seeds.describe(json.loads(path.read_text())) + f"\n    -> {display_path(path)}")
    if not args.aggregate_only:
        for entry in outcome["failed"]:
            print(f"error: {entry['spec'].chapter} {entry['spec'].run_id()} failed after "
                  f"{entry['attempts']} attempts: {entry['error']}", file=sys.stderr)
        return 1 if outcome["failed"] else 0
    return 0


STUDENT_DIR = PROJECT_ROOT / "_build" / "student"  # the student edition: _build/student/_build/html


def student_config(config: dict) -> dict:
    """The book's `_config.yml` for its student edition: the same pages, every exercise's solution
    left out (sphinx-exercise's `hide_solutions`), and a title that says which edition it is."""
    sphinx = dict(config.get("sphinx") or {})
    sphinx["config"] = {**(sphinx.get("config") or {}), "hide_solutions": True}
    return {**config, "title": f"{config['title']} (student edition)", "sphinx": sphinx}


def book_build_command(student: bool = False) -> tuple[list[str], Path]:
    """The `jupyter-book build` command line, and the folder the HTML lands in. -W: warnings are
    errors (Jupyter Book v1 otherwise exits 0 on a broken page)."""
    jb = Path(sys.executable).with_name("jupyter-book")
    config, output = PROJECT_ROOT / "_config.yml", PROJECT_ROOT
    if student:
        STUDENT_DIR.mkdir(parents=True, exist_ok=True)
        config = STUDENT_DIR / "_config.yml"
        config.write_text(yaml.safe_dump(student_config(
            yaml.safe_load((PROJECT_ROOT / "_config.yml").read_text())), sort_keys=False))
        output = STUDENT_DIR
    cmd = [str(jb) if jb.exists() else "jupyter-book", "build", str(PROJECT_ROOT), "--toc",
           str(BOOK_DIR / "_toc.yml"), "--config", str(config), "-W", "-n", "--keep-going",
           *(["--path-output", str(output)] if student else [])]
    return cmd, output / "_build" / "html"


def cmd_build(args) -> int:
    ex.check_writable(BOOK_DIR)
    try:
        ex.repair_book(results_dir=Path(args.results_dir))
        scoreboard.write_pages(Path(args.results_dir))
    except OSError as err:  # a read-only or full book/: one line, not a traceback
        where = f": {display_path(Path(err.filename))}" if err.filename else ""
        raise ConfigError(f"cannot write the book's pages ({err.strerror or err}){where}") from None
    cmd, html = book_build_command(student=args.student)
    code = subprocess.run(cmd, cwd=PROJECT_ROOT).returncode
    if code == 0:
        print(f"book built: {html / 'index.html'}")
    return code


def cmd_validate(args) -> int:
    if args.paper:  # the paper preset's published pairs, beside the book
        paper = Path(args.results_dir) / "paper"
        return validate(_select(args.chapters), paper, paper, preset="paper")
    return validate(_select(args.chapters), Path(args.claims_dir), Path(args.results_dir))


def cmd_bench(args) -> int:
    from .bench import run_benchmarks
    try:
        run_benchmarks(args.names or None)
    except ValueError as err:  # an unknown benchmark, refused before any runs
        raise ConfigError(str(err)) from None
    return 0


ENVIRONMENT = """environment variables read:
  REPLICATE_DATA_DIR     where MNIST is read from (default: data/ in the project)
  REPLICATE_CACHE_DIR    the run cache of finished trainings (default: .cache/runs/)
  REPLICATE_NO_CACHE     set to 1 to recompute every training run instead of reusing it
  REPLICATE_NO_DOWNLOAD  set to 1 to never download a dataset
  REPLICATE_DEVICE       force a device (e.g. cpu on a GPU machine); default: CUDA if present
  REPLICATE_RUNS_DIR     where runs that are not published go (default: runs/ in the project)
  REPLICATE_GIT_COMMIT   the commit a copy without git history was sent from (recorded, marked so)
  OMP_NUM_THREADS        threads per process (one per chapter is fastest on a busy machine)
set for the kernel: REPLICATE_RESULTS_DIR (staging), TQDM_DISABLE=1, JUPYTER_RUNTIME_DIR"""

HELP = {  # (one-line help, description) of each command
    "list": ("chapters, their claims and presets; or one chapter's parameters",
             "With no CHAPTER: every chapter, its claim and presets. With CHAPTER: its parameters "
             "(name, type, cpu value, what it is), read from its cpu.yaml. Reads no environment variables."),
    "run": ("execute chapters (the book's preset into book/, others into runs/)",
            "Execute chapters (all if none named). The executed notebook and its verdict are put in place "
            "together only when every cell succeeded. Preset cpu without -p publishes into book/, preset paper "
            "with --publish beside it into book/results/paper/ (both refused "
            "from uncommitted code unless --allow-dirty); any other run writes to runs/<chapter>/<preset>"
            "[-<hash of the -p values>]/ unless --publish is given. Ctrl-C or SIGTERM stops the kernel and "
            "leaves the published chapter as it was."),
    "sweep": ("run chapters over seeds and values as Ray tasks, then aggregate",
              "Run chapter x seed x every -p value as Ray tasks into book/sweeps/<chapter>/<run-id>/, then "
              "aggregate per chapter: the book's group (preset cpu, no -p) into "
              "book/results/<chapter>.seeds.json, any other into its sweeps folder."),
    "build": ("build the HTML book from the executed chapters",
              "Write the generated pages from book/results/, refresh each chapter's verdict box, then build "
              "the book into _build/html/ (warnings are errors). Executes no chapter. Reads no environment "
              "variables."),
    "validate": ("re-execute published chapters and compare them with the book",
                 "Re-execute the published chapters under nbval with an empty run cache: the verdict's words "
                 "must match exactly, and every number of the verdict within relative 5% or absolute 0.001, "
                 "whichever is looser (a chapter may set `tolerance:` in its chapter.yaml)."),
    "bench": ("time the measures and the sweep engine (book/benchmarks.json)",
              "Time the measures, the training loop and the sweep engine, each benchmark in a fresh process "
              "(all if no NAME), beside its peer where one is installed "
              "(pip install -e .[bench]), and write book/benchmarks.json and its page "
              "book/benchmarks.md (`build` renders it too). Reads "
              "REPLICATE_DATA_DIR and REPLICATE_DEVICE; sets REPLICATE_CACHE_DIR (a scratch cache), "
              "OMP_NUM_THREADS and TQDM_DISABLE for its runs."),
}
EPILOG = {"run": ENVIRONMENT,
          "sweep": ENVIRONMENT.split("\nset for")[0] + "\n  RAY_ADDRESS            a Ray cluster to join "
                                                        "(as --address)",
          "validate": "environment variables read: REPLICATE_DATA_DIR, REPLICATE_DEVICE, OMP_NUM_THREADS "
                      "(as for run)\nset for the kernels: REPLICATE_RESULTS_DIR and REPLICATE_CACHE_DIR "
                      "(a scratch folder)"}


def build_parser() -> argparse.ArgumentParser:
    raw, hidden, book = argparse.RawDescriptionHelpFormatter, argparse.SUPPRESS, str(ex.RESULTS_DIR)
    parser = argparse.ArgumentParser(prog="python -m replicate", description=__doc__, formatter_class=raw)
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {}
    for name, (short, long) in HELP.items():
        description = textwrap.fill(long, 92)
        if name == "run":
            description += "\n\nchapters and their presets:\n" + "\n".join(
                f"  {ch.name:28s} {', '.join(ch.presets)}" for ch in chapters().values())
            description += "\n`python -m replicate list CHAPTER` shows a chapter's parameters and cpu values."
        commands[name] = sub.add_parser(name, help=short, description=description, formatter_class=raw,
                                        epilog=EPILOG.get(name))
        commands[name].set_defaults(func=globals()[f"cmd_{name}"])
    commands["list"].add_argument("chapter", nargs="?", metavar="CHAPTER")

    run = commands["run"]
    run.add_argument("chapters", nargs="*", metavar="CHAPTER")
    run.add_argument("--preset", default=None, help="smoke, cpu (default) or paper")
    run.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                     help="override one parameter, e.g. -p iterations 5000 (repeatable)")
    run.add_argument("--publish", action="store_true", help="put this run into book/ whatever its preset (paper: beside the book, in book/results/paper/)")
    run.add_argument("--allow-dirty", action="store_true",
                     help="publish from uncommitted code (the verdict records the commit as +dirty)")
    run.add_argument("--shape-only", action="store_true",
                     help="the paper preset with step counts cut to a handful: proves it runs, in minutes")
    run.add_argument("--lanes", type=int, default=None,
                     help="chapters run at once, one thread each, on a local Ray (default: the "
                          "cores; 1: one after another)")
    run.add_argument("--address", default=None,
                     help="run the chapters' lanes on a Ray cluster (auto, or HOST:6379); its "
                          "nodes must share this project's folders")
    run.add_argument("--claims-dir", default=None, help=hidden)
    run.add_argument("--results-dir", default=None, help=hidden)

    sweep = commands["sweep"]
    sweep.add_argument("chapters", nargs="+", metavar="CHAPTER")
    sweep.add_argument("--seeds", default="0-2", help="e.g. 0-4, or 0,3,7 (default 0-2)")
    sweep.add_argument("--preset", default="cpu", help="smoke, cpu (default) or paper")
    sweep.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUES"),
                       help="one parameter's values, comma-separated, e.g. -p lr 1e-3,1e-2 (repeatable)")
    sweep.add_argument("--workers", type=int, default=None, help="task slots (default: the cores)")
    sweep.add_argument("--address", default=None, help="join a Ray cluster (auto, or HOST:6379)")
    sweep.add_argument("--aggregate-only", action="store_true", help="run nothing: rewrite the seeds files")
    sweep.add_argument("--sweeps-dir", default=str(BOOK_DIR / "sweeps"), help=hidden)
    sweep.add_argument("--results-dir", default=book, help=hidden)

    commands["build"].add_argument("--results-dir", default=book, help=hidden)
    commands["build"].add_argument("--student", action="store_true",
                                   help="the student edition: the same pages without the exercises' "
                                        "solutions, into _build/student/_build/html/")
    commands["validate"].add_argument("chapters", nargs="*", metavar="CHAPTER")
    commands["validate"].add_argument("--claims-dir", default=str(ex.CLAIMS_DIR), help=hidden)
    commands["validate"].add_argument("--results-dir", default=book, help=hidden)
    commands["validate"].add_argument("--paper", action="store_true",
                                      help="the paper preset's published runs (book/results/paper/)")
    commands["bench"].add_argument("names", nargs="*", metavar="NAME")
    return parser


def main(argv: list[str] | None = None) -> int:
    with ex.signals_interrupt():
        try:
            args = build_parser().parse_args(argv)
            return args.func(args)
        except ConfigError as err:
            print(f"error: {shortened(str(err), 600)}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as err:
            name = str(err) if isinstance(err, ex.Interrupted) else "SIGINT"
            done = (f"{', '.join(ex.PUBLISHED)} had been published before it; the others were left "
                    "unchanged" if ex.PUBLISHED else "the published chapters were left unchanged")
            print(f"interrupted ({name}): stopped the kernel and removed the staging folder; {done}",
                  file=sys.stderr)
            return 130
