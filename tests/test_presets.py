import ast
import json

import pytest

from replicate.harness import presets
from replicate.harness.presets import ConfigError


def test_every_chapter_has_three_presets_that_validate():
    chapters = presets.chapters()
    assert "07_optimizers" in chapters
    for name, ch in chapters.items():
        assert {"smoke", "cpu", "paper"} <= set(ch.presets), name
        schema = presets.load_preset(name, "cpu")
        for preset in ch.presets:
            values = presets.load_preset(name, preset)
            assert set(values) == set(schema), f"{name}/{preset} names other parameters than cpu"
            presets.validate(name, values)


def _parameters_cell(notebook):
    nb = json.loads(notebook.read_text())
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"{notebook} needs exactly one cell tagged 'parameters'"
    values = {}
    for node in ast.parse("".join(cells[0]["source"])).body:
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
        values[target.id] = ast.literal_eval(node.value)
    return values


def test_notebook_parameter_defaults_equal_the_cpu_preset():
    # So a plain re-execution of a notebook reproduces the published chapter.
    for name, ch in presets.chapters().items():
        values = _parameters_cell(ch.notebook)
        assert values.pop("preset") == "cpu"
        assert values == presets.load_preset(name, "cpu"), name


def test_unknown_chapter_and_preset_list_the_valid_choices():
    with pytest.raises(ConfigError, match="valid chapters: .*07_optimizers"):
        presets.get_chapter("no_such_chapter")
    with pytest.raises(ConfigError, match="valid presets: cpu, paper, smoke"):
        presets.load_preset("07_optimizers", "nope")


def test_wrong_names_types_and_signs_are_rejected():
    with pytest.raises(ConfigError, match="valid parameters: .*iterations"):
        presets.validate("07_optimizers", {"iteration": 10})
    with pytest.raises(ConfigError, match="must be of type int"):
        presets.validate("07_optimizers", {"iterations": "many"})
    with pytest.raises(ConfigError, match="must be of type int"):
        presets.validate("07_optimizers", {"iterations": 2.5})
    with pytest.raises(ConfigError, match=r"learning_rates\[0\]' must be of type float"):
        presets.validate("07_optimizers", {"learning_rates": ["fast"]})
    with pytest.raises(ConfigError, match="positive"):
        presets.validate("07_optimizers", {"iterations": -5})
    assert presets.validate("07_optimizers", {"log_offset": 1}) == {"log_offset": 1.0}


def test_parse_value_reads_numbers_lists_and_strings():
    assert presets.parse_value("20000") == 20000
    assert presets.parse_value("1e-3") == 1e-3  # YAML alone would give the string "1e-3"
    assert presets.parse_value("[0.1, 1]") == [0.1, 1]
    assert presets.parse_value("true") is True
    assert presets.parse_value("adam") == "adam"


def test_notebook_rule_preset_values_unless_overridden():
    cpu = presets.load_preset("07_optimizers", "cpu")
    smoke = presets.load_preset("07_optimizers", "smoke")
    params, overrides = presets.from_notebook("07_optimizers", "smoke", dict(cpu))
    assert params == smoke and overrides == {}
    params, overrides = presets.from_notebook("07_optimizers", "smoke", {**cpu, "iterations": 77})
    assert params["iterations"] == 77 and overrides == {"iterations": 77}
    assert params["learning_rates"] == smoke["learning_rates"]
    with pytest.raises(ConfigError, match="lacks"):
        presets.from_notebook("07_optimizers", "cpu", {})
