"""Where a chapter's time goes: the phase clocks (`runtime.phase`), the training loop's use of
them, the record's `cost_s` and papermill's cell timings (`execute.notebook_costs`). A fake clock
makes every duration exact, so no test depends on how fast this machine is."""
import json

import nbformat
import pytest

from replicate import runtime, training
from replicate.harness import execute


@pytest.fixture
def clock(monkeypatch):
    """A clock that advances only when told: `clock.tick(s)`."""
    class Clock:
        now = 100.0

        def tick(self, seconds):
            self.now += seconds

    fake = Clock()
    monkeypatch.setattr(runtime.time, "perf_counter", lambda: fake.now)
    monkeypatch.setattr(runtime, "COST", {})
    return fake


def test_a_nested_phase_pauses_the_outer_one_so_each_second_is_charged_once(clock):
    with runtime.phase("evaluation"):
        clock.tick(1.0)
        with runtime.phase("local complexity"):
            clock.tick(5.0)
        clock.tick(2.0)
    assert runtime.COST == {"evaluation": 3.0, "local complexity": 5.0}
    assert runtime.cost_since({"evaluation": 1.0}, total=10.0) == {
        "local complexity": 5.0, "evaluation": 2.0, "other": 3.0}


def test_a_costed_function_is_a_phase_even_when_it_raises(clock):
    @runtime.costed("exact 2D partition")
    def fails():
        clock.tick(4.0)
        raise ValueError("bad plane")

    with pytest.raises(ValueError):
        fails()
    assert runtime.COST == {"exact 2D partition": 4.0}
    with runtime.phase("afterwards"):  # the failed phase was closed: nothing stays open
        clock.tick(1.0)
    assert runtime.COST["afterwards"] == 1.0 and runtime.COST["exact 2D partition"] == 4.0


def test_the_training_loop_charges_its_steps_and_its_evaluations_apart(clock):
    def step(t):
        clock.tick(0.5)
        return 1.0

    def evaluate(t):
        clock.tick(2.0)
        return {}

    training.train_loop(step, 10, [0, 5, 10], evaluate)
    assert runtime.COST == {training.TRAINING: 5.0, training.EVALUATION: 6.0}


def test_the_results_record_says_where_its_time_went(clock):
    from replicate.config import RunSpec
    from replicate.verdict import ChapterRun, claim

    run = ChapterRun(RunSpec.make("07_optimizers", "smoke"))
    with runtime.phase(training.TRAINING):
        clock.tick(30.0)
    clock.tick(12.0)  # notebook code outside every phase
    run.verdict([claim("a", True, 1, 1)])
    record = run.record()
    assert record["duration_s"] == 42.0
    assert record["cost_s"] == {training.TRAINING: 30.0, "other": 12.0}


def test_notebook_costs_reads_papermills_cell_timings(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# title")]
    for source, seconds in (("import torch", 3.0), ("# NBVAL_CHECK_OUTPUT\nchecks = []", 0.5),
                            ("runs = train()\nmore", 120.0)):
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["papermill"] = {"duration": seconds}
        nb.cells.append(cell)
    path = tmp_path / "chapter.ipynb"
    path.write_text(json.dumps(nb))
    costs = execute.notebook_costs(path, wall=130.0, shown=2)
    assert costs == {"cells": 123.5, "kernel start and shutdown": 6.5, "slowest cells": [
        {"cell": 3, "first line": "runs = train()", "s": 120.0},
        {"cell": 1, "first line": "import torch", "s": 3.0}]}
    assert execute.notebook_costs(path, shown=3)["slowest cells"][2]["first line"] == "checks = []"


def test_the_benchmarks_page_shows_each_chapters_phases_and_slowest_cells(tmp_path):
    from replicate.harness import scoreboard

    (tmp_path / "results").mkdir()
    record = {"chapter": "07_optimizers", "title": "t", "claim": "c", "preset": "cpu",
              "overrides": {}, "seed": 0, "reproduced": True, "checks": [], "duration_s": 42.0,
              "cost_s": {training.TRAINING: 30.0, "other": 12.0},
              "notebook_s": {"cells": 43.0, "kernel start and shutdown": 2.5, "slowest cells": [
                  {"cell": 4, "first line": "a | b", "s": 33.0}]}}
    (tmp_path / "results" / "07_optimizers.json").write_text(json.dumps(record))
    text = scoreboard.cost_section(tmp_path / "results", tmp_path / "claims")
    assert ("- **07_optimizers**, 42 s. Phases: training steps 30 s; other 12 s. Slowest cells: "
            "cell 4 (`a | b`) 33 s. Kernel start and shutdown: 2.5 s.") in text
