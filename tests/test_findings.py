"""Each claim check's finding: one sentence a reader takes away, filled from the check's record."""
import json

import pytest
import yaml

from replicate import config
from replicate.harness import findings
from replicate.runtime import BOOK_DIR

CHECK = {"id": "size-descent-earlier", "kind": "claim", "name": "the descent comes earlier",
         "passed": False, "inconclusive": False,
         "ours": {"500 digits": 662, "1000 digits": 931, "2000 digits": 931.0, "4000 digits": None},
         "paper": "increasing training data size expedites region migration"}


@pytest.fixture
def chapter(tmp_path, monkeypatch):
    """A chapter folder of findings with one check's sentences."""
    (tmp_path / "99_planted").mkdir()
    (tmp_path / "99_planted" / findings.FILE).write_text(yaml.safe_dump({
        "lead": "size-descent-earlier",
        "checks": {"size-descent-earlier": {
            "pass": "Earlier with more digits, as in the paper: {ours.values}.",
            "fail": "Later with more digits, not earlier: {ours.first} to {ours.last} steps; "
                    "at 1,000 digits {ours[1000 digits]}, at 9 {ours[9 digits]}.",
            "inconclusive": "Untested: {paper}."}}}))
    monkeypatch.setattr(findings, "PRESETS_DIR", tmp_path)
    findings.sentences.cache_clear()
    yield "99_planted"
    findings.sentences.cache_clear()


def test_a_finding_is_the_sentence_of_its_outcome_filled_with_the_values_as_a_person_reads_them(chapter):
    assert findings.finding(chapter, CHECK) == (
        "Later with more digits, not earlier: 662 to none steps; at 1,000 digits 931, at 9 n/a.")
    assert findings.finding(chapter, dict(CHECK, passed=True)) == (
        "Earlier with more digits, as in the paper: 662, 931, 931, none.")
    assert findings.finding(chapter, dict(CHECK, inconclusive=True)) == (
        "Untested: increasing training data size expedites region migration.")
    assert findings.finding(chapter, dict(CHECK, id="another")) is None
    assert findings.finding_or_name(chapter, dict(CHECK, id="another")) == (
        "the descent comes earlier: fail")


def test_a_run_is_said_by_its_first_failing_check_or_else_its_lead(chapter):
    passing = dict(CHECK, passed=True)
    other = dict(CHECK, id="other", name="other check", passed=False)
    record = {"chapter": chapter, "checks": [passing, other]}
    assert findings.lead_finding(record) == "other check: fail"
    record["checks"] = [dict(other, passed=True), passing]
    assert findings.lead_finding(record).startswith("Earlier with more digits")


def test_a_findings_file_without_a_fail_sentence_is_refused(tmp_path, monkeypatch):
    (tmp_path / "98_bad").mkdir()
    (tmp_path / "98_bad" / findings.FILE).write_text("checks:\n  x:\n    pass: yes\n")
    monkeypatch.setattr(findings, "PRESETS_DIR", tmp_path)
    findings.sentences.cache_clear()
    with pytest.raises(ValueError, match="needs 'pass' and 'fail'"):
        findings.sentences("98_bad")
    findings.sentences.cache_clear()


def test_problems_names_a_long_sentence_a_nested_bracket_and_a_missing_finding(chapter):
    long = dict(CHECK, passed=True, ours={f"{i} digits": i for i in range(40)})
    assert "words" in findings.problems(chapter, [long])[0]
    assert findings.problems(chapter, [dict(CHECK, id="missing")]) == [f"{chapter} missing: no finding"]
    assert findings.problems(chapter, [CHECK]) == []


def _published():
    for name in config.chapters():
        for folder in ("", "paper", "test-split", "test-split/paper"):
            path = BOOK_DIR / "results" / folder / f"{name}.json"
            if path.exists():
                yield name, folder or "cpu", json.loads(path.read_text())


@pytest.mark.parametrize("name,folder,record", list(_published()),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_every_published_claim_check_has_a_finding_of_at_most_35_words(name, folder, record):
    assert findings.problems(name, record["checks"]) == []
