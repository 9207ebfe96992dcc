"""The judging page's comparison of the training digits with the test split, on planted seeds."""
import json

from replicate.data import SOURCE_LABELS
from replicate.harness import data_sources


def _seeds(per_check: dict[str, list[bool]], value: float) -> dict:
    n = len(next(iter(per_check.values())))
    reproduced = sum(all(passes[i] for passes in per_check.values()) for i in range(n))
    return {"reproduced": {"k": reproduced, "n": n},
            "checks": [{"id": cid, "name": f"check {cid}", "kind": "claim", "k": sum(p), "n": n}
                       for cid, p in per_check.items()],
            "values": [{"id": "a", "key": "onset step", "median": value, "range": [value, value + 10]}]}


def _plant(root, folder, chapter, seeds, source=None):
    where = root / folder
    where.mkdir(parents=True, exist_ok=True)
    (where / f"{chapter}.seeds.json").write_text(json.dumps(seeds))
    record = {"chapter": chapter, **({"mnist_source": source} if source else {})}
    (where / f"{chapter}.json").write_text(json.dumps(record))


CHAPTER = "10_what_changes_grokking"


def test_a_check_whose_verdict_across_seeds_moved_with_the_data_is_named_and_bold(tmp_path):
    _plant(tmp_path, "test-split", CHAPTER, _seeds({"a": [True] * 5, "b": [False] * 5}, 931))
    _plant(tmp_path, "", CHAPTER, _seeds({"a": [True, False, True, True, True], "b": [False] * 5}, 470),
           SOURCE_LABELS["training-digits"])
    rows = data_sources.compare(CHAPTER, "cpu", tmp_path)
    assert [(r.check_id, r.before.verdict, r.after.verdict, r.moved) for r in rows] == [
        ("a", "passes", "fragile", True), ("b", "fails", "fails", False)]
    assert data_sources.verdicts(CHAPTER, "cpu", tmp_path)[1].passes == "0/5"
    page = data_sources.comparison_section(tmp_path)
    assert "1 of 2 re-run checks changed their verdict across seeds (in bold)." in page
    assert "| 10 `cpu` | **check a** | passes (5/5)<br>onset step: 931 (931 to 941) | fragile (4/5)" in page
    assert "| 10 `cpu` | 0/5 | 0/5 |" in page


def test_a_chapter_not_yet_re_run_on_the_training_digits_says_so_rather_than_comparing(tmp_path):
    seeds = _seeds({"a": [True] * 5}, 931)
    _plant(tmp_path, "test-split", CHAPTER, seeds)
    _plant(tmp_path, "", CHAPTER, seeds)  # the published verdict names no source: the test split
    assert [r.after for r in data_sources.compare(CHAPTER, "cpu", tmp_path)] == [None]
    page = data_sources.comparison_section(tmp_path)
    assert "Not re-run on the training digits yet: 10 at `cpu`." in page
    assert "| 10 `cpu` | 5/5 | not re-run yet |" in page
    assert data_sources.compare(CHAPTER, "paper", tmp_path) == []  # no archive: no rows


def test_without_any_archive_the_judging_page_has_no_comparison(tmp_path):
    assert data_sources.comparison_section(tmp_path) == ""


def test_the_scoreboard_names_each_check_that_moved_with_both_verdicts(tmp_path):
    _plant(tmp_path, "test-split", CHAPTER, _seeds({"a": [True] * 5, "b": [False] * 5}, 931))
    _plant(tmp_path, "", CHAPTER, _seeds({"a": [False] * 5, "b": [False] * 5}, 470),
           SOURCE_LABELS["training-digits"])
    _plant(tmp_path, "test-split", "03_centroid_ntk", _seeds({"a": [True] * 5}, 1))
    lines = data_sources.scoreboard_paragraph(tmp_path)
    assert "Re-run on the training digits: 10 at `cpu`; 1 of their 2 claim checks changed" in lines[0]
    assert "Not yet re-run on them: 03 at `cpu`." in lines[0]
    assert lines[1] == ("- 10 at `cpu`, *check a*: passes on the test split (5/5 seeds), fails on "
                        "the training digits (0/5).")
