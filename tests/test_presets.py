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


@pytest.mark.parametrize("text", ["nan", "inf", "-inf"])
def test_non_finite_numbers_are_rejected(text):
    with pytest.raises(ConfigError, match="finite number.*For example: -p check_lr 0.01"):
        presets.validate("07_optimizers", {"check_lr": presets.parse_value(text)})
    with pytest.raises(ConfigError, match="finite"):
        presets.validate("07_optimizers", {"learning_rates": presets.parse_value(f"0.1,{text}")})


def test_parse_value_strings_stay_strings_and_list_items_are_numbers():
    assert presets.parse_value("*") == "*"
    assert presets.parse_value("-") == "-"
    assert presets.parse_value("s5") == "s5"
    assert presets.parse_value("1e-3,1e-2") == [1e-3, 1e-2]
    assert presets.parse_value("[1e-3, 0.01]") == [1e-3, 0.01]
    assert presets.parse_value("[]") == []
    assert presets.parse_value("sgd,adam") == ["sgd", "adam"]
    assert presets.parse_value("{mse: [0], ce: [1e-3]}") == {"mse": [0], "ce": [1e-3]}
    for op in ("*", "-", "+"):
        checked = presets.validate("05_slingshot_hessian", {"operation": presets.parse_value(op)})
        assert checked == {"operation": op}
    checked = presets.validate("07_optimizers", {"learning_rates": presets.parse_value("[1e-3, 0.01]"),
                                                 "check_lr": 0.01})
    assert checked["learning_rates"] == [1e-3, 0.01]


def test_bad_values_show_an_example_of_a_good_one():
    with pytest.raises(ConfigError, match=r"For example: -p learning_rates 0.0001,0.0003"):
        presets.validate("07_optimizers", {"learning_rates": ["fast"]})
    with pytest.raises(ConfigError, match=r"For example: -p iterations 3000"):
        presets.validate("07_optimizers", {"iterations": "many"})
    with pytest.raises(ConfigError, match=r"e.g. '\[0.1, 0.2\]'"):
        presets.parse_value("[1, [2")


def test_ranges_choices_and_rules_between_parameters():
    with pytest.raises(ConfigError, match="must be one of .*check_lr=0.02"):
        presets.resolve("07_optimizers", "smoke", {"check_lr": 0.02})
    # No learning rate <= 0.3: the Rastrigin check would have nothing to judge.
    with pytest.raises(ConfigError, match="at least one must be listed"):
        presets.resolve("07_optimizers", "smoke", {"learning_rates": [0.5, 1.0], "check_lr": 0.5})
    with pytest.raises(ConfigError, match="must be one of \\+, -, \\*, s5"):
        presets.validate("05_slingshot_hessian", {"operation": "/"})
    with pytest.raises(ConfigError, match=r"must lie in \(0, 1\)"):
        presets.validate("05_slingshot_hessian", {"train_fraction": 1.0})
    with pytest.raises(ConfigError, match="one step budget per training fraction"):
        presets.resolve("08_predicting_grokking", "smoke", {"steps": [100]})
    with pytest.raises(ConfigError, match="three different classes"):
        presets.resolve("02_region_migration", "smoke", {"triad_classes": [1, 1, 2]})
    with pytest.raises(ConfigError, match="one of lc_radii"):
        presets.resolve("01_delayed_robustness", "smoke", {"check_radius": 0.07})
    # A rule is checked only once all its parameters are known (check_ready sees overrides only).
    assert presets.validate("07_optimizers", {"check_lr": 0.02}) == {"check_lr": 0.02}
    with pytest.raises(ConfigError, match="must be one of learning_rates"):
        presets.preflight("07_optimizers", "cpu", {"check_lr": 0.02})


def test_every_rule_reads_only_parameters_of_its_chapter():
    for name, ch in presets.chapters().items():
        schema = presets.load_preset(name, "cpu")
        for expression, because in ch.rules:
            assert presets._rule_names(expression) <= set(schema), (name, expression)
            assert because, (name, expression)
        for pname, _ in ch.ranges + ch.choices:
            assert pname in schema, (name, pname)
        for _, pname in ch.data_needs:
            assert isinstance(pname, list) or pname in schema, (name, pname)


def test_data_capacity_and_readability_fail_before_the_kernel(tmp_path, monkeypatch, data_dir):
    # Chapter 03's paper preset asks for 512 digits per class; the offline split has fewer zeros.
    with pytest.raises(ConfigError, match=r"512 digits per class .*only \d+ of digit 0.*would go in"):
        presets.preflight("03_centroid_ntk", "paper")
    presets.preflight("03_centroid_ntk", "cpu")
    # A corrupt file is named before anything runs.
    import shutil

    raw = tmp_path / "mnist" / "MNIST" / "raw"
    shutil.copytree(data_dir / "mnist" / "MNIST" / "raw", raw)
    (raw / "t10k-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b broken")
    monkeypatch.setenv("REPLICATE_DATA_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="t10k-images-idx3-ubyte.gz"):
        presets.preflight("01_delayed_robustness", "smoke")
