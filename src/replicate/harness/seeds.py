"""The verdict across seeds: which runs belong together (a group: one chapter, preset and set of
non-seed overrides), and their statistics. Only a published group (preset `cpu` or `paper`, no
overrides, or at `paper` only the reduced sizes its chapter.yaml declares) is written beside its
published verdict (`published_dir`), so a sweep at `smoke` or with another `-p` never touches it.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Iterable

from ..config import SCHEMA_PRESET, ConfigError, RunSpec, format_value, get_chapter, paper_reduction
from ..runtime import BOOK_DIR, atomic_write, display_path
from ..verdict import check_key, inconclusive_count, reproduced as all_claims_pass
from .result_code import code_provenance, difference_text
from .records import read_record

SWEEPS_DIR, RESULTS_DIR = BOOK_DIR / "sweeps", BOOK_DIR / "results"
ROBUST_SHARE = 0.8
ROBUST_RULE = "each claim check passes in at least 80% of seeds"
MIN_SEEDS_FOR_INTERVAL = 5
BOOTSTRAP_RESAMPLES = 10_000
PASS_RATE_INTERVAL = "95% Clopper-Pearson (exact) interval of the pass rate"
INTERVAL = (f"95% bootstrap percentile interval of the mean ({BOOTSTRAP_RESAMPLES:,} resamples; "
            f"with fewer than {MIN_SEEDS_FOR_INTERVAL} seeds only the median and the range)")


PUBLISHED_PRESETS = {SCHEMA_PRESET: "", "paper": "paper"}  # preset: its folder in results/


def published_dir(preset: str, results_dir: Path = RESULTS_DIR) -> Path | None:
    """Where a preset's published run (`run --publish`) and its seeds file live: the book's own
    in `results/`, the paper preset's in `results/paper/`; None for a preset never published."""
    if preset not in PUBLISHED_PRESETS:
        return None
    return Path(results_dir) / PUBLISHED_PRESETS[preset]


def group_of(record: dict) -> tuple[str, str, str] | None:
    """(chapter, preset, non-seed overrides as JSON) of a verdict or task record, or None."""
    try:
        spec = RunSpec.from_record(record)
    except (ConfigError, KeyError):  # its spec is no longer valid (a renamed parameter, say)
        return None
    return spec.chapter, spec.preset, json.dumps(spec.without_seed(), sort_keys=True)


def data_of(record: dict) -> str | None:
    """The MNIST source a record's run trained on (`data.SOURCE_LABELS`), None for a chapter
    without MNIST. A record that names none trained on the test split: it was the only source
    offline before the source was recorded."""
    from ..data import SOURCE_LABELS

    try:
        datasets = get_chapter(record["chapter"]).get("datasets", ())
    except (ConfigError, KeyError):
        return None
    return record.get("mnist_source", SOURCE_LABELS["test-split"]) if "mnist" in datasets else None


def current_data(chapter: str) -> str | None:
    """The MNIST source a run of `chapter` would train on in this process, as `data_of` names it."""
    from ..verdict import mnist_source_label

    return mnist_source_label() if "mnist" in get_chapter(chapter).get("datasets", ()) else None


def collect_runs(chapter: str, preset: str, overrides: dict, results_dir: Path = RESULTS_DIR,
                 sweeps_dir: Path = SWEEPS_DIR) -> tuple[dict[int, dict], list[dict], dict | None]:
    """The group's runs by seed, failed tasks no run replaced, and a note on the published run.
    Runs on another MNIST source than this process's belong to another group."""
    wanted = (chapter, preset, json.dumps(overrides, sort_keys=True))
    data = current_data(chapter)
    runs, note = {}, None
    folder = Path(sweeps_dir) / chapter
    published = (published_dir(preset, results_dir) or Path(results_dir)) / f"{chapter}.json"
    if published.exists():
        record, source = read_record(published), display_path(published)
        if group_of(record) == wanted and data_of(record) == data:
            runs[record["seed"]] = {"record": record, "source": source}
            note = {"source": source, "seed": record["seed"], "included": True}
        else:
            note = {"source": source, "preset": record.get("preset"), "included": False,
                    "why": ("another preset or other parameters than this group"
                            if group_of(record) != wanted else "another MNIST source")}
    for path in sorted(folder.glob(f"[!.]*/{chapter}.json")):  # not the hidden, unfinished ones
        record = read_record(path)
        if group_of(record) == wanted and data_of(record) == data:
            if note and note.get("included") and note["seed"] == record["seed"]:
                note.update(included=False,
                            why=f"replaced by the sweep's run of seed {record['seed']}")
            runs[record["seed"]] = {"record": record, "source": display_path(path)}
    failed = [{"seed": r["seed"], "overrides": r.get("overrides", {}), "error": r.get("error")}
              for r in (read_record(p) for p in sorted(folder.glob("*.failed.json")))
              if group_of(r) == wanted and r["seed"] not in runs]
    return dict(sorted(runs.items())), failed, note


def bootstrap_interval(values: list[float], resamples: int = BOOTSTRAP_RESAMPLES,
                       level: float = 0.95, seed: int = 0) -> list[float]:
    """Percentile bootstrap interval of the mean: the (1 - level) / 2 and (1 + level) / 2
    quantiles of the means of `resamples` resamples with replacement. Every resampled mean lies
    between the smallest and the largest value, so the interval never leaves the range the
    seeds can take (a Student-t interval over three skewed seeds can, even below zero for a
    count). Seeded, so that the seeds file is the same on every aggregation."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    draws = np.random.default_rng(seed).integers(0, len(x), size=(resamples, len(x)))
    means = x[draws].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return [float(max(low, x.min())), float(min(high, x.max()))]  # rounding must not leave it


def prediction_interval(values: list[float], level: float = 0.95) -> list[float] | None:
    """Where one more seed's value falls with probability `level`, if the seeds' values are
    normal: mean +- t * sd * sqrt(1 + 1/n), t the Student quantile at (1 + level) / 2 with n - 1
    degrees of freedom. Wider than the interval of the mean: it holds a new draw, not the mean
    (five seeds: mean +- 3.04 sd). When every value is positive (a count, an area, a ratio, a
    step: skewed, bounded by zero) the same on their logarithms, then exponentiated, so the
    interval stays positive. None below `MIN_SEEDS_FOR_INTERVAL` seeds."""
    from scipy.stats import t

    n = len(values)
    if n < MIN_SEEDS_FOR_INTERVAL:
        return None
    positive = all(v > 0 for v in values)
    x = [math.log(v) for v in values] if positive else list(values)
    mean = sum(x) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in x) / (n - 1))
    half = float(t.ppf((1 + level) / 2, n - 1)) * sd * math.sqrt(1 + 1 / n)
    low, high = mean - half, mean + half
    return [math.exp(low), math.exp(high)] if positive else [low, high]


def clopper_pearson(k: int, n: int, level: float = 0.95) -> list[float] | None:
    """The exact (Clopper-Pearson) interval of a pass rate from k passes in n seeds: the rates p
    at which k or more passes (for the lower end), or k or fewer (for the upper end), would have
    had a chance of at least (1 - level) / 2. 3/3 gives [0.29, 1]: three passes out of three
    cannot tell a claim that always holds from one that holds a third of the time. None for
    n = 0."""
    from scipy.stats import beta

    if n == 0:
        return None
    tail = (1 - level) / 2
    low = 0.0 if k == 0 else float(beta.ppf(tail, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - tail, k + 1, n - k))
    return [round(low, 4), round(high, 4)]


def summarise(values: list[float]) -> dict:
    """Mean, sample standard deviation and, from `MIN_SEEDS_FOR_INTERVAL` seeds on, the 95%
    bootstrap interval of the mean; with them the median and the range, which is how the papers
    report a handful of seeds (and all this file says for fewer)."""
    def rounded(value: float) -> float:  # six significant digits keep the seeds file readable
        return float(f"{value:.6g}")

    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "ci95": None, "median": None, "range": None}
    mean, ordered, median = sum(values) / n, sorted(values), statistics.median(values)
    sd = ci95 = None
    if n > 1:  # one seed has no spread to estimate
        sd = rounded(math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)))
    span = [rounded(ordered[0]), rounded(ordered[-1])]
    if n >= MIN_SEEDS_FOR_INTERVAL:
        # held inside the range as written, so that rounding cannot carry it past either end
        low, high = bootstrap_interval(values)
        ci95 = [max(rounded(low), span[0]), min(rounded(high), span[1])]
    return {"n": n, "mean": rounded(mean), "sd": sd, "ci95": ci95, "median": rounded(median),
            "range": span}


PAIRED_LEVEL = 0.05
PAIRED_RULE = ("each seed's run against itself, in the paper's direction when the value the paper "
               "says is larger is the larger one; PASS when a one-sided sign test rejects 'either "
               "direction is as likely' at 5%; FAIL when at most half of the seeds go the paper's "
               "way; INCONCLUSIVE in between, too few seeds to tell")


def sign_test_p(k: int, n: int) -> float:
    """One-sided sign test: the chance of k or more of n seeds in one direction when each seed
    is a fair coin, sum over j >= k of C(n, j) / 2^n. Five seeds out of five give 1/32 = 0.031;
    four of five, 6/32 = 0.19."""
    return sum(math.comb(n, j) for j in range(k, n + 1)) / 2 ** n


def seeds_needed(n: int, level: float = PAIRED_LEVEL) -> int | None:
    """The fewest of n seeds in the paper's direction that the sign test accepts at `level`
    (None: not even n of n, as for four seeds or fewer at 5%)."""
    return next((k for k in range(n + 1) if sign_test_p(k, n) <= level), None)


def value_at(ours, where):
    """The number a paired clause reads from a check's `ours`: `where` is a key, or [key, index]
    for one item of a listed pair (e.g. ["clipped", 1]: the largest peak of (count, peak))."""
    key, index = (where, None) if isinstance(where, str) else where
    value = ours.get(key) if isinstance(ours, dict) else None
    if index is not None:
        value = value[index] if isinstance(value, (list, tuple)) and len(value) > index else None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def paired_clause(clause: dict, records: dict[int, dict]) -> dict:
    """A clause one seed cannot test (a report in each run), judged over the seeds: in each seed
    the two values of the report `clause["check"]` that the paper orders (`larger` above
    `smaller`), the count of seeds in the paper's direction, the sign test's p, the exact
    interval of that share, and the ratio larger / smaller (median and range)."""
    per_seed = {}
    for seed in sorted(records):
        check = next((c for c in records[seed].get("checks", []) if c.get("id") == clause["check"]),
                     None)
        pair = [value_at(check.get("ours"), clause[side]) for side in ("larger", "smaller")] \
            if check else [None, None]
        if None not in pair:
            per_seed[str(seed)] = pair
    n, k = len(per_seed), sum(a > b for a, b in per_seed.values())
    ratios = sorted(float(f"{a / b:.4g}") for a, b in per_seed.values() if b > 0)
    p_value, needed = (sign_test_p(k, n), seeds_needed(n)) if n else (None, None)
    passed = n > 0 and p_value <= PAIRED_LEVEL
    inconclusive = not passed and (n == 0 or k > n / 2)
    if passed:
        diagnosis = None
    elif n == 0:
        diagnosis = "no seed's run reports both values"
    elif inconclusive:
        diagnosis = (f"{k} of {n} seeds in the paper's direction: most, but " + (
            f"the sign test needs {needed} of {n} at 5%" if needed else
            f"{n} seed{'s' if n != 1 else ''} cannot reach 5% even all in one direction")
            + f" (p = {p_value:.3g})")
    else:
        diagnosis = (f"{k} of {n} seeds in the paper's direction (p = {p_value:.3g}): "
                     f"no more than half")
    return {"id": clause["id"], "clause": clause["clause"], "check": clause["check"],
            "larger": clause["larger"], "smaller": clause["smaller"], "kind": "claim",
            "per_seed": per_seed, "k": k, "n": n,
            "p_value": None if p_value is None else round(p_value, 4),
            "share_ci95": clopper_pearson(k, n),
            "ratio": {"median": float(f"{statistics.median(ratios):.4g}"),
                      "range": [ratios[0], ratios[-1]]}
            if ratios else None,
            "passed": passed, "inconclusive": inconclusive, "diagnosis": diagnosis}


def clauses_for(clauses: list[dict] | None, params: dict) -> list[dict] | None:
    """The chapter's across-seeds clauses (`across_seeds:`) for one group's parameters. An entry
    with `for_each: NAME` stands for one clause per item of the list parameter NAME, with `{i}`
    (counting from 1) and `{value}` filled in its id, clause and check: chapter 05 clips at one
    threshold at cpu and at two at paper, and each threshold's run is its own check."""
    if not clauses:
        return clauses
    out = []
    for clause in clauses:
        name = clause.get("for_each")
        if name is None:
            out.append(clause)
            continue
        for i, value in enumerate(params[name], start=1):
            fill = {"i": i, "value": format_value(value)}
            out.append({k: v.format(**fill) if k in ("id", "clause", "check") else v
                        for k, v in clause.items() if k != "for_each"})
    return out


def same_in_every_seed(values: list[float], noise: float = 1e-9) -> bool:
    """Whether the seeds' values agree up to float rounding (`noise` of their size)."""
    return max(values) - min(values) <= noise * max(abs(v) for v in values) if values else True


def ids_by_name(checks: Iterable[dict]) -> dict[str, str]:
    """{name: id} of the checks that have an id."""
    return {c["name"]: c["id"] for c in checks if c.get("id")}


def with_ids(checks: list[dict], ids: dict[str, str]) -> list[dict]:
    """The checks, each one without an id given the id `ids` holds for its name: a record written
    before checks had ids, read beside one written after, then keys on the same id
    (`verdict.check_key`). Copies: the records stay as they were read."""
    return [c if c.get("id") or c["name"] not in ids else {**c, "id": ids[c["name"]]}
            for c in checks]


def aggregate_records(records: dict[int, dict], deterministic: bool = False,
                      paired: list[dict] | None = None) -> dict:
    """The across-seed part of a seeds file from {seed: verdict record}, each check matched
    across seeds by its id (a seed written before ids takes the id of the same name in the
    others), or by its name where no seed has an id. `deterministic`: the chapter says the seed
    enters nothing it computes (else: every number agrees to rounding). `paired`: the chapter's
    clauses judged across seeds (`across_seeds:` in its chapter.yaml; `paired_clause`)."""
    seeds, n = sorted(records), len(records)
    ids = ids_by_name(c for r in records.values() for c in r.get("checks", []))
    # found: check key -> {"name", "kind", "per_seed", ...}; numbers: (check key, key) -> {seed: v}
    found, numbers = {}, {}
    for seed in seeds:
        for check in with_ids(records[seed].get("checks", []), ids):
            entry = found.setdefault(check_key(check), {
                "id": check.get("id"), "name": check["name"], "kind": check["kind"],
                "per_seed": {}, "inconclusive": [], "diagnoses": {}})
            entry["per_seed"][str(seed)] = check["passed"] if check["kind"] == "claim" else None
            if check["kind"] == "claim" and check.get("inconclusive"):
                entry["inconclusive"].append(seed)
            if check["kind"] == "claim" and not check["passed"] and check.get("diagnosis"):
                entry["diagnoses"][str(seed)] = check["diagnosis"]
            ours = check.get("ours")
            for key, v in (ours.items() if isinstance(ours, dict) else [(None, ours)]):
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    numbers.setdefault((check_key(check), key), {})[str(seed)] = float(v)
    # a seed that lacks a check counts as not passing it
    checks = []
    for e in found.values():
        k = sum(map(bool, e["per_seed"].values())) if e["kind"] == "claim" else None
        # INCONCLUSIVE seeds count as not passing, as in the run itself: listed, never excused
        checks.append({"id": e["id"], "name": e["name"], "kind": e["kind"], "k": k, "n": n,
                       "pass_rate_ci95": None if k is None else clopper_pearson(k, n),
                       "per_seed": e["per_seed"], "inconclusive_seeds": e["inconclusive"],
                       "diagnoses": e["diagnoses"]})
    unmatched = [{"id": e["id"], "name": e["name"], "seeds": [int(s) for s in e["per_seed"]]}
                 for e in found.values() if len(e["per_seed"]) < n]
    values = [{"check": found[check]["name"], "id": found[check]["id"], "key": key,
               **summarise(list(per_seed.values())), "per_seed": per_seed}
              for (check, key), per_seed in numbers.items()]
    claims = [c["k"] for c in checks if c["kind"] == "claim"]
    # Nothing the seed reaches: n identical runs are one run, and say nothing about robustness.
    deterministic = n > 1 and (deterministic or all(
        len(set(c["per_seed"].values())) == 1 for c in checks) and all(
        same_in_every_seed(list(per_seed.values())) for per_seed in numbers.values()))
    robust = None if n < 2 or deterministic else bool(claims) and all(
        k >= ROBUST_SHARE * n - 1e-9 for k in claims)
    k = sum(all_claims_pass(records[s].get("checks", [])) for s in seeds)
    untested = [s for s in seeds if inconclusive_count(records[s].get("checks", []))]
    return {"seeds": seeds, "n": n, "robust": robust, "robust_rule": ROBUST_RULE,
            "deterministic": deterministic,
            "inconclusive_seeds": untested,
            "interval": INTERVAL, "pass_rate_interval": PASS_RATE_INTERVAL,
            "reproduced": {"k": k, "n": n, "ci95": clopper_pearson(k, n)}, "checks": checks,
            "values": values, "unmatched": unmatched,
            **({"paired_rule": PAIRED_RULE,
                "paired": [paired_clause(c, records) for c in paired]} if paired else {})}


def aggregate(chapter: str, preset: str = SCHEMA_PRESET, overrides: dict | None = None,
              results_dir: Path = RESULTS_DIR, sweeps_dir: Path = SWEEPS_DIR) -> dict:
    """The seeds file's content for one group."""
    spec = RunSpec.make(chapter, preset, overrides)
    if "seed" in spec.overrides:
        raise ConfigError("aggregate over seeds: do not fix the seed")
    runs, failed, note = collect_runs(chapter, preset, spec.overrides, results_dir, sweeps_dir)
    body = aggregate_records({seed: run["record"] for seed, run in runs.items()},
                             bool(get_chapter(chapter).get("deterministic")),
                             clauses_for(get_chapter(chapter).get("across_seeds"), spec.params))
    home = published_dir(preset, results_dir) or Path(results_dir)
    publication = home / f"{chapter}.json"
    published = json.loads(publication.read_text()).get("git_commit") if publication.exists() else None
    return {"chapter": chapter, "preset": preset, "overrides": spec.overrides, **body,
            "code": code_provenance(chapter, runs, published),
            "runs": [{"seed": seed, "source": run["source"],
                      "reproduced": all_claims_pass(run["record"].get("checks", [])),
                      "inconclusive": inconclusive_count(run["record"].get("checks", [])),
                      "duration_s": run["record"].get("duration_s")} for seed, run in runs.items()],
            "failed": failed, "published": note}


def seeds_path(chapter: str, preset: str, overrides: dict, results_dir: Path = RESULTS_DIR,
               sweeps_dir: Path = SWEEPS_DIR) -> Path:
    """`<chapter>.seeds.json` beside the published run for a published group (the book's, or the
    paper preset's as published: as it is, or at the reduced size its chapter.yaml declares); any
    other in its sweeps folder."""
    home, spec = published_dir(preset, results_dir), RunSpec.make(chapter, preset, overrides)
    if home is not None and (not overrides or paper_reduction(spec) is not None):
        return home / f"{chapter}.seeds.json"
    name = spec.run_id(with_seed=False)
    return Path(sweeps_dir) / chapter / f"{name}.seeds.json"


def write_seeds(chapter: str, preset: str = SCHEMA_PRESET, overrides: dict | None = None,
                results_dir: Path = RESULTS_DIR, sweeps_dir: Path = SWEEPS_DIR) -> Path:
    """Aggregate one group and write its seeds file where `seeds_path` says; returns the path."""
    record = aggregate(chapter, preset, overrides, results_dir, sweeps_dir)
    path = seeds_path(chapter, preset, record["overrides"], results_dir, sweeps_dir)
    atomic_write(path, json.dumps(record, indent=2) + "\n")
    return path


def load_seeds(chapter: str, results_dir: Path = RESULTS_DIR) -> dict | None:
    """The book's seeds file of a chapter, or None when no sweep has been aggregated for it."""
    return read_record(Path(results_dir) / f"{chapter}.seeds.json")


def describe(record: dict) -> str:
    """A seeds file in a few lines for the terminal: the verdict, then what not every seed met."""
    robust = {True: "robust", False: "NOT robust", None: "too few seeds to say"}[record["robust"]]
    if record.get("deterministic"):
        robust = "deterministic: the seed changes nothing, so the repeats say nothing"
    lines = [f"{record['chapter']} at {record['preset']}: reproduced in {record['reproduced']['k']}"
             f"/{record['reproduced']['n']} seeds {record['seeds']}; {robust}"]
    for c in record["checks"]:
        if c["kind"] == "claim" and c["k"] < c["n"]:
            untested = c.get("inconclusive_seeds") or []
            why = f"; inconclusive in seeds {untested}" if untested else ""
            lines.append(f"    not every seed: {c['name']} ({c['k']}/{c['n']}{why})")
            lines += [f"        seed {s}: {text}" for s, text in c.get("diagnoses", {}).items()]
    lines += [f"    failed seed {f['seed']}: {f['error']}" for f in record["failed"]]
    lines += [f"    check not matched across seeds: {u['name']} (seeds {u['seeds']})"
              for u in record.get("unmatched", [])]
    lines += [f"    seeds {c['seeds']} ran at {c['commit']}, whose result code differs from the "
              f"published run's: {difference_text(c)}"
              for c in (record.get("code") or {}).get("commits", []) if c["differs"] != []]
    return "\n".join(lines)
