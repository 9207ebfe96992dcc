"""Clauses one seed cannot test, judged across seeds: paired comparisons within each seed."""
import pytest

from replicate.harness import seeds


def _planted(pairs, check="clip-report", key_a="t4 clipped", key_b="t4 unclipped"):
    """Seed -> a run whose report `check` holds one planted pair of values."""
    return {seed: {"checks": [{"id": check, "name": check, "kind": "report", "passed": None,
                               "ours": {key_a: a, key_b: b}}]} for seed, (a, b) in enumerate(pairs)}


CLAUSE = {"id": "slows-across-seeds", "clause": "clipping slows", "check": "clip-report",
          "larger": "t4 clipped", "smaller": "t4 unclipped"}


def test_the_sign_test_and_the_seeds_it_needs_are_the_binomial_tail():
    assert seeds.sign_test_p(5, 5) == 1 / 32 and seeds.sign_test_p(4, 5) == 6 / 32
    assert seeds.sign_test_p(0, 5) == 1.0
    assert seeds.seeds_needed(5) == 5 and seeds.seeds_needed(4) is None  # 1/16 > 5%
    assert seeds.seeds_needed(10) == 9  # 11/1024 <= 5% < 56/1024


def test_a_paired_clause_passes_only_when_every_one_of_five_seeds_goes_the_papers_way():
    five = seeds.paired_clause(CLAUSE, _planted([(2, 1), (3, 1), (5, 4), (9, 1), (4, 3)]))
    assert five["passed"] and not five["inconclusive"] and five["diagnosis"] is None
    assert (five["k"], five["n"], five["p_value"]) == (5, 5, 0.0312)
    assert five["ratio"] == {"median": 2.0, "range": [1.25, 9.0]}
    four = seeds.paired_clause(CLAUSE, _planted([(2, 1), (3, 1), (5, 4), (9, 1), (1, 3)]))
    assert not four["passed"] and four["inconclusive"] and "needs 5 of 5" in four["diagnosis"]


def test_a_paired_clause_fails_at_half_or_fewer_and_a_tie_is_not_the_papers_way():
    two = seeds.paired_clause(CLAUSE, _planted([(2, 1), (3, 1), (1, 4), (1, 1), (3, 3)]))
    assert (two["k"], two["passed"], two["inconclusive"]) == (2, False, False)
    assert "no more than half" in two["diagnosis"]
    # four seeds can never reach 5%: INCONCLUSIVE even at 4 of 4, and it says why
    all_four = seeds.paired_clause(CLAUSE, _planted([(2, 1)] * 4))
    assert all_four["inconclusive"] and "cannot reach 5%" in all_four["diagnosis"]


def test_a_paired_clause_reads_items_of_listed_pairs_and_skips_seeds_without_both_values():
    clause = {**CLAUSE, "check": "spikes", "larger": ["unclipped", 1], "smaller": ["clipped", 1]}
    runs = {seed: {"checks": [{"id": "spikes", "kind": "report", "passed": None,
                               "ours": {"unclipped": [7, peak], "clipped": [21, 0.5]}}]}
            for seed, peak in enumerate([0.8, 0.9, 0.7, 0.6, 0.75])}
    runs[5] = {"checks": [{"id": "spikes", "kind": "report", "ours": {"clipped": [3, 0.1]}}]}
    runs[6] = {"checks": []}
    out = seeds.paired_clause(clause, runs)
    assert out["n"] == 5 and out["k"] == 5 and out["passed"] and "5" not in out["per_seed"]
    none = seeds.paired_clause(clause, {0: {"checks": []}})
    assert none["n"] == 0 and none["inconclusive"] and "no seed" in none["diagnosis"]


def test_the_seeds_file_carries_the_chapters_paired_clauses_and_the_page_shows_them():
    from replicate.harness import book_pages

    body = seeds.aggregate_records(_planted([(2, 1), (3, 1), (1, 4), (1, 1), (3, 3)]),
                                   paired=[CLAUSE])
    assert body["paired_rule"] == seeds.PAIRED_RULE and body["paired"][0]["id"] == CLAUSE["id"]
    assert "paired" not in seeds.aggregate_records(_planted([(2, 1)]))
    lines = book_pages.paired_lines(body)
    row = next(line for line in lines if line.startswith("| clipping slows"))
    assert "**FAIL**: 2 of 5 seeds" in row and "| 2/5 (share" in row
    assert book_pages.paired_lines({"paired": []}) == []


def test_a_clause_for_each_threshold_is_one_clause_per_item_with_its_value_and_check():
    template = {**CLAUSE, "id": "slows-{i}", "clause": "clipping at {value} slows",
                "check": "clipped-run-{i}-slower", "for_each": "clip_norms"}
    one, two = (seeds.clauses_for([template, CLAUSE], {"clip_norms": norms})
                for norms in ([0.01], [1.0, 0.01]))
    assert [c["clause"] for c in one] == ["clipping at 0.01 slows", "clipping slows"]
    assert [(c["id"], c["check"]) for c in two[:2]] == [("slows-1", "clipped-run-1-slower"),
                                                         ("slows-2", "clipped-run-2-slower")]
    assert two[0]["clause"] == "clipping at 1 slows" and "for_each" not in two[0]
    assert seeds.clauses_for(None, {}) is None


def test_chapter_05s_paper_group_judges_each_of_its_two_clipping_thresholds_by_its_own_run():
    from replicate.config import RunSpec, get_chapter

    params = RunSpec.make("05_slingshot_hessian", "paper", {"p": 47}).params
    clauses = seeds.clauses_for(get_chapter("05_slingshot_hessian").get("across_seeds"), params)
    slows = [c for c in clauses if c["check"].endswith("-slower")]
    assert [(c["clause"].split(" slows")[0], c["check"]) for c in slows] == [
        ("clipping the gradient norm at 1", "clipped-run-1-slower"),
        ("clipping the gradient norm at 0.01", "clipped-run-2-slower")]


def test_a_seeds_file_that_is_not_an_object_is_named_not_read(tmp_path):
    from replicate.config import ConfigError
    from replicate.harness.seeds import load_seeds
    (tmp_path / "07_optimizers.seeds.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="07_optimizers.seeds.json is not a results file"):
        load_seeds("07_optimizers", tmp_path)
    assert load_seeds("06_intrinsic_dimension", tmp_path) is None
