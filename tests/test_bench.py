"""The benchmark bookkeeping (the timings themselves run with `python -m replicate bench`)."""
import json

from replicate.harness import bench, scoreboard


def test_ratio_direction_and_table():
    faster = bench.row("x", 2.0, "s", seed=4.0, higher_is_better=False, target="t", met=True)
    assert faster["ratio"] == 2.0
    assert bench.row("y", 6000, "points/s", seed=1800)["ratio"] == 6000 / 1800
    assert bench.row("z", 1.0, "s")["ratio"] is None
    table = bench.format_table([faster])
    assert "[met]" in table and "x" in table


def test_median_seconds_counts_the_calls():
    calls = []
    bench.median_seconds(lambda: calls.append(1), repeat=3, warmup=2)
    assert len(calls) == 5


def test_chapter_rows_and_page(tmp_path):
    (tmp_path / "07_optimizers.json").write_text(json.dumps({"chapter": "07_optimizers", "preset": "cpu",
                                                             "duration_s": 120.0}))
    # An across-seed file beside it is not a chapter run.
    (tmp_path / "07_optimizers.seeds.json").write_text(json.dumps({"chapter": "07_optimizers"}))
    rows = bench.chapter_rows(tmp_path)
    assert len(rows) == 2
    assert rows[0]["ours"] == 2.0 and rows[0]["met"] is True and rows[-1]["met"] is True
    page = scoreboard.render_page({"threads": 2, "rows": rows})
    assert page.startswith("# How fast is this book?") and "| chapter 07_optimizers at preset cpu | 2 |" in page


def test_a_chapter_over_its_target_says_so_and_counts_runs_in_words(tmp_path):
    (tmp_path / "04_grokalign_speedup.json").write_text(json.dumps(
        {"chapter": "04_grokalign_speedup", "preset": "cpu", "duration_s": 726.0,
         "runs": {"reused": 1, "computed": 3}}))
    row = bench.chapter_rows(tmp_path)[0]
    assert row["ours"] == 12.1 and row["met"] is False
    assert row["figure"].endswith("(1 run reused from the cache)")


def test_timing_one_benchmark_again_keeps_the_others(tmp_path, monkeypatch):
    # `bench sweep_overhead` alone must not drop the rows of the benchmarks it did not run.
    monkeypatch.setattr(bench, "BENCHMARKS", {"first": None, "second": None})
    results = tmp_path / "benchmarks.json"
    measured = {"first": [bench.row("first figure", 1.0, "s")], "second": [bench.row("second figure", 2.0, "s")]}
    bench.run_benchmarks(results_file=results, runner=lambda name: measured[name])
    measured["second"] = [bench.row("second figure", 3.0, "s")]
    bench.run_benchmarks(["second"], results_file=results, runner=lambda name: measured[name])
    record = json.loads(results.read_text())
    ours = {r["figure"]: r["ours"] for r in record["rows"] if r.get("benchmark")}
    assert ours == {"first figure": 1.0, "second figure": 3.0}
    assert [r["benchmark"] for r in record["rows"] if r.get("benchmark")] == ["first", "second"]
    assert set(record["measured"]) == {"first", "second"}
    page = scoreboard.render_page(record)
    assert f"| {record['measured']['first']} |" in page


def test_the_page_shows_the_chapters_current_times(tmp_path):
    record = {"threads": 2, "measured": {"first": "2026-01-01"},
              "rows": [{**bench.row("first figure", 1.0, "s"), "benchmark": "first"},
                       bench.row("chapter 07_optimizers at preset cpu", 9.0, "min")]}
    (tmp_path / "07_optimizers.json").write_text(json.dumps({"chapter": "07_optimizers", "preset": "cpu",
                                                             "duration_s": 60.0}))
    rows = scoreboard.with_current_chapters(record, tmp_path)["rows"]
    assert [r["figure"] for r in rows][:2] == ["first figure", "chapter 07_optimizers at preset cpu"]
    assert rows[1]["ours"] == 1.0  # the chapter's time now, not the 9 min stored with the benchmarks
