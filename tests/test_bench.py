"""The benchmark bookkeeping (the timings themselves run with `python -m replicate bench`)."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from replicate.harness import bench, bench_peers as peers, scoreboard


def test_ratio_direction_and_table():
    faster = bench.row("x", 2.0, "s", peer=4.0, higher_is_better=False, target="t", met=True)
    assert faster["ratio"] == 2.0
    assert bench.row("y", 6000, "points/s", peer=1800)["ratio"] == 6000 / 1800
    assert bench.row("z", 1.0, "s")["ratio"] is None
    table = bench.format_table([faster])
    assert "[met]" in table and "x" in table


def test_median_seconds_counts_the_calls():
    calls = []
    bench.median_seconds(lambda: calls.append(1), repeat=3, warmup=2)
    assert len(calls) == 5


def fake_clock(durations: dict[str, list[float]]):
    """A clock that each fake call moves on by that call's next duration: (clock, call maker)."""
    now = [0.0]

    def call(name: str):
        def run():
            now[0] += durations[name].pop(0)
            return name
        return run
    return (lambda: now[0]), call


def test_a_time_is_the_median_of_five_with_its_extremes_and_the_warm_up_left_out():
    clock, call = fake_clock({"f": [100.0, 3.0, 1.0, 5.0, 2.0, 4.0]})
    timing = bench.time_calls(call("f"), clock=clock)
    assert (timing.median, timing.low, timing.high) == (3.0, 1.0, 5.0)
    # As a rate the slowest call gives the lowest figure.
    assert bench.Timing(2.0, 1.0, 4.0).rate(8).spread == [2.0, 8.0]


def test_ours_and_the_peer_take_turns_and_each_is_summarised_apart():
    order = []
    clock, call = fake_clock({"ours": [9.0, 1.0, 2.0, 1.0, 3.0, 1.0],
                              "peer": [9.0, 4.0, 4.0, 6.0, 4.0, 2.0]})

    def logged(name):
        run = call(name)

        def run_and_log():
            order.append(name)
            return run()
        return run_and_log
    timed = bench.side_by_side(logged("ours"), logged("peer"), clock=clock)
    assert order[:4] == ["ours", "peer", "peer", "ours"]  # the order swaps every round
    assert order.count("ours") == order.count("peer") == 6
    assert (timed.ours.median, timed.ours.low, timed.ours.high) == (1.0, 1.0, 3.0)
    assert (timed.peer.median, timed.peer.low, timed.peer.high) == (4.0, 2.0, 6.0)
    assert (timed.ours_result, timed.peer_result) == ("ours", "peer")


def test_a_peer_row_says_ours_is_faster_when_the_peer_takes_longer():
    ours, slower, faster = (bench.Timing(0.5, 0.4, 0.7), bench.Timing(2.0, 1.5, 2.5),
                            bench.Timing(0.25, 0.2, 0.3))
    beaten = bench.peer_row("PGD", bench.SideBySide(ours, slower, None), "torchattacks 3.5.1",
                            1.5, scale=1e3, unit="ms")
    assert beaten["ratio"] == 4.0 and beaten["met"] is True
    assert beaten["ours"] == 500.0 and beaten["peer_spread"] == [1500.0, 2500.0]
    assert beaten["peer_name"] == "torchattacks 3.5.1" and beaten["load"] == 1.5
    behind = bench.peer_row("PGD", bench.SideBySide(ours, faster, None), "torchattacks 3.5.1", 1.5)
    assert behind["ratio"] == 0.5 and behind["met"] is False


def test_a_missing_peer_is_named_not_fatal():
    absent = peers.Peer("no_such_peer_module", "no-such-peer")
    assert absent.load() is None
    assert absent.label() == "no-such-peer: peer not installed (pip install -e .[bench])"
    timed = bench.side_by_side(lambda: 42, None, repeat=2, warmup=0)
    assert timed.peer is None and timed.ours_result == 42
    missing = bench.peer_row("MLE (k = 2)", timed, absent.label(), 0.5)
    assert missing["peer"] is None and missing["ratio"] is None and missing["met"] is None
    page = scoreboard.render_page({"threads": 2, "rows": [missing]})
    assert "| no-such-peer: peer not installed (pip install -e .[bench]) |" in page
    assert "[MISSED]" not in bench.format_table([missing])


def test_the_page_shows_each_measure_beside_its_peer_from_the_same_run():
    timed = bench.SideBySide(bench.Timing(0.1, 0.09, 0.12), bench.Timing(0.3, 0.25, 0.4), 1, 1)
    record = {"threads": 2, "measured": {"pgd": "2026-12-01"},
              "rows": [{**bench.peer_row("PGD", timed, "torchattacks 3.5.1", 1.25),
                        "benchmark": "pgd"}]}
    page = scoreboard.render_page(record)
    assert "| Figure | Ours | Peer | Ratio | Peer (version) |" in page
    assert ("| PGD | 0.1 (0.09–0.12) | 0.3 (0.25–0.4) | 3 | torchattacks 3.5.1 | s | "
            ">= 1x the peer | yes | 2026-12-01, load 1.2 |") in page


def test_a_figure_recorded_once_for_the_authors_code_says_so():
    # Rows written before peers ran side by side kept the recorded figure as `seed`.
    old = {"figure": "local complexity", "ours": 9500.0, "unit": "points/s", "seed": 1800,
           "ratio": 9500 / 1800, "target": "", "met": None, "benchmark": "local_complexity"}
    page = scoreboard.render_page({"threads": 2, "rows": [old]})
    assert ("| local complexity | 9.5e+03 | 1.8e+03 | 5.28 | "
            "authors' code (recorded 2026-11-29, not re-run) |") in page
    # A row that never had a comparison gets no peer's name.
    assert scoreboard.upgrade_row({**old, "seed": None})["peer_name"] == ""


def test_chapter_rows_state_each_chapters_time_from_an_empty_run_cache(tmp_path, monkeypatch):
    """A chapter re-executed from the run cache takes seconds: its row is its measured cold time."""
    monkeypatch.setattr(scoreboard, "chapters", lambda: {
        "07_optimizers": {"cpu_cold_s": 120}, "04_grokalign_speedup": {"cpu_cold_s": 726},
        "11_not_measured": {}})
    (tmp_path / "07_optimizers.json").write_text(json.dumps(
        {"chapter": "07_optimizers", "preset": "cpu", "duration_s": 4.0,
         "runs": {"reused": 3, "computed": 0}}))
    rows = bench.chapter_rows(tmp_path)
    assert [r["ours"] for r in rows] == [2.0, 12.1, 14.1]
    assert [r["met"] for r in rows] == [True, False, True]
    assert all("empty run cache" in r["figure"] and "reused" not in r["figure"] for r in rows)
    page = scoreboard.render_page({"threads": 2, "rows": rows})
    assert page.startswith("# How fast is this book?")
    assert "| chapter 07_optimizers at preset cpu, from an empty run cache (one thread) | 2 |" in page


def test_timing_one_benchmark_again_keeps_the_others(tmp_path, monkeypatch):
    # `bench sweep_overhead` alone must not drop the rows of the benchmarks it did not run.
    monkeypatch.setattr(bench, "BENCHMARKS", {"first": None, "second": None})
    results = tmp_path / "benchmarks.json"
    measured = {"first": [bench.row("first figure", 1.0, "s")], "second": [bench.row("second figure", 2.0, "s")]}
    monkeypatch.setattr(bench.torch, "get_num_threads", lambda: 2)
    bench.run_benchmarks(results_file=results, runner=lambda name: measured[name])
    measured["second"] = [bench.row("second figure", 3.0, "s")]
    monkeypatch.setattr(bench.torch, "get_num_threads", lambda: 1)
    bench.run_benchmarks(["second"], results_file=results, runner=lambda name: measured[name])
    record = json.loads(results.read_text())
    ours = {r["figure"]: r["ours"] for r in record["rows"] if r.get("benchmark")}
    assert ours == {"first figure": 1.0, "second figure": 3.0}
    assert [r["benchmark"] for r in record["rows"] if r.get("benchmark")] == ["first", "second"]
    assert set(record["measured"]) == {"first", "second"}
    # Each kept row keeps the threads it was timed with.
    assert record["threads_by_benchmark"] == {"first": 2, "second": 1}
    page = scoreboard.render_page(record)
    assert f"| {record['measured']['first']}, 2 threads |" in page
    assert f"| {record['measured']['second']}, 1 thread |" in page
    results = bench.BOOK_DIR / "results"
    assert (tmp_path / "benchmarks.md").read_text() == scoreboard.render_page(
        scoreboard.with_current_chapters(record, results)) + scoreboard.cost_section(
        results, bench.BOOK_DIR / "claims")  # beside the file, with where the time goes


def test_the_page_shows_the_chapters_current_cold_times(tmp_path, monkeypatch):
    monkeypatch.setattr(scoreboard, "chapters", lambda: {"07_optimizers": {"cpu_cold_s": 60}})
    record = {"threads": 2, "measured": {"first": "2026-01-01"},
              "rows": [{**bench.row("first figure", 1.0, "s"), "benchmark": "first"},
                       bench.row("chapter 07_optimizers at preset cpu", 9.0, "min")]}
    rows = scoreboard.with_current_chapters(record, tmp_path)["rows"]
    assert rows[0]["figure"] == "first figure"
    assert rows[1]["figure"].startswith("chapter 07_optimizers at preset cpu")
    assert rows[1]["ours"] == 1.0  # the chapter's time now, not the 9 min stored with the benchmarks


def test_pyhessian_at_matched_accuracy_gets_the_loosest_tolerance_that_lands_close_enough(
        monkeypatch):
    # A fake power iteration whose error is ten times its stopping tolerance.
    monkeypatch.setattr(peers, "pyhessian_top_eigenvalue",
                        lambda pyhessian, model, x, y, tol, max_iter: 2.0 * (1 + 10 * tol))
    assert bench.loosest_pyhessian_tol(None, None, None, None, reference=2.0,
                                       accuracy=1e-3) == 1e-4
    assert bench.loosest_pyhessian_tol(None, None, None, None, reference=2.0,
                                       accuracy=1e-6) is None


def test_the_make_book_benchmark_times_the_cold_chapters_and_the_build_and_compares_verdicts(
        tmp_path, monkeypatch):
    # `run` and `build` stood in for: run writes each chapter's verdict where it was told to,
    # with the book's published verdict but for chapter 05, whose verdict word turned.
    from replicate.config import chapters
    from replicate.runtime import BOOK_DIR
    calls = []

    def fake_python(args, env=None):
        calls.append((args, env))
        if args[2] == "run":
            folder = Path(args[args.index("--results-dir") + 1])
            assert Path(env["REPLICATE_CACHE_DIR"]).parent == folder  # an empty cache of its own
            for c in chapters():
                record = json.loads((BOOK_DIR / "results" / f"{c}.json").read_text())
                if c == "05_slingshot_hessian":
                    record["reproduced"] = not record["reproduced"]
                record["duration_s"] = 100.0 if c != "04_grokalign_speedup" else 400.0
                (folder / f"{c}.json").write_text(json.dumps(record))
            return "", 14 * 60.0
        return "", 60.0
    monkeypatch.setattr(bench, "_python", fake_python)
    rows = bench.make_book()
    assert [a[2] for a, _ in calls] == ["run", "build"]
    assert "--lanes" in calls[0][0] and calls[0][0][calls[0][0].index("--lanes") + 1] == "2"
    first = rows[0]
    assert first["ours"] == 15.0 and first["met"] is True and first["unit"] == "min"
    n = len(chapters())
    assert f"{n - 1} of {n} verdicts as published" in first["figure"]
    assert rows[1]["ours"] == 100.0 * (n - 1) + 400.0
    assert rows[2]["figure"] == "  the slowest chapter (04_grokalign_speedup)"


def test_the_arpack_peer_finds_both_ends_of_a_dense_hessians_spectrum():
    """The peer the Lanczos row is timed against, against the eigenvalues of the Hessian written
    out in full: a peer that got them wrong would make the comparison meaningless."""
    from replicate.measures.landscape import dense_hessian

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    x, y = torch.randn(40, 6), torch.randint(0, 3, (40,))
    exact = np.linalg.eigvalsh(dense_hessian(model, x, y).double().numpy())
    top, bottom, products = peers.arpack_extremes(model, x, y, tol=1e-6)
    assert top == pytest.approx(exact[-1], rel=1e-4) and bottom == pytest.approx(exact[0], rel=1e-3)
    assert products > 2
