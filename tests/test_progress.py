"""The onset rule and the two baseline measures of chapter 09, against answers known by
construction: curves whose half-move is placed by hand, embeddings built from chosen waves."""
import math

import numpy as np
import pytest
import torch
from torch import nn

from replicate.measures import progress


def log_linear_curve(steps, start_step, end_step, low, high):
    """low before start_step, high after end_step, linear in log(1 + step) between them."""
    x = np.log1p(np.asarray(steps, dtype=float))
    a, b = math.log1p(start_step), math.log1p(end_step)
    return low + (high - low) * np.clip((x - a) / (b - a), 0, 1)


STEPS = np.unique(np.round(np.logspace(0, 4, 40))).astype(float)


def test_the_onset_of_a_log_linear_ramp_is_its_midpoint_in_log_step():
    values = log_linear_curve(STEPS, 100, 3000, 2.0, 10.0)
    found = progress.onset(STEPS, values, t2=50)
    midpoint = math.expm1((math.log1p(100) + math.log1p(3000)) / 2)
    assert found.step == pytest.approx(midpoint, rel=1e-9)
    assert (found.start, found.end) == pytest.approx((2.0, 10.0))


def test_a_falling_curve_has_its_onset_where_it_has_fallen_half_way():
    values = log_linear_curve(STEPS, 200, 2000, 5.0, 1.0)
    found = progress.onset(STEPS, values, t2=10)
    assert found.move == pytest.approx(-4.0)
    assert found.step == pytest.approx(math.expm1((math.log1p(200) + math.log1p(2000)) / 2), rel=1e-9)


def test_another_fraction_moves_the_onset_along_the_ramp():
    values = log_linear_curve(STEPS, 100, 10000, 0.0, 1.0)
    quarter = progress.onset(STEPS, values + 1, t2=1, fraction=0.25).step
    assert quarter == pytest.approx(math.expm1(math.log1p(100) + 0.25 * (math.log1p(10000) - math.log1p(100))),
                                    rel=1e-9)


def test_the_move_is_measured_from_the_value_at_t2_not_from_the_start_of_training():
    # Up by 10 before t2, then down by 2 after it: the onset is the midpoint of the fall.
    rise = log_linear_curve(STEPS, 1, 20, 0.0, 10.0)
    fall = log_linear_curve(STEPS, 500, 5000, 0.0, -2.0)
    found = progress.onset(STEPS, rise + fall, t2=100)
    assert found.start == pytest.approx(10.0)
    assert found.step == pytest.approx(math.expm1((math.log1p(500) + math.log1p(5000)) / 2), rel=1e-9)


def test_a_curve_that_barely_moves_has_no_onset():
    values = 100 + log_linear_curve(STEPS, 100, 1000, 0.0, 1.0)  # 1% of its size
    found = progress.onset(STEPS, values, t2=10, min_relative_move=0.05)
    assert found.step is None and not found.moved
    assert progress.onset(STEPS, values, t2=10, min_relative_move=0.005).moved


def test_a_jump_between_two_checkpoints_is_placed_half_way_between_them_in_log_step():
    steps = np.array([0.0, 10, 100, 1000, 10000])
    values = np.array([0.0, 0.0, 0.0, 1.0, 1.0])
    assert progress.onset(steps, values, t2=10).step == pytest.approx(math.expm1(
        (math.log1p(100) + math.log1p(1000)) / 2), rel=1e-9)


def test_the_first_crossing_counts_even_if_the_curve_comes_back():
    values = np.where((STEPS >= 200) & (STEPS < 400), 1.0, 0.0)
    values[-1] = 0.8  # ends above its start, after a spike that crossed the half level early
    found = progress.onset(STEPS, values, t2=10)
    assert 100 < found.step <= 200


def test_bad_curves_are_refused():
    with pytest.raises(ValueError, match="increase"):
        progress.onset([1, 1, 2], [0, 1, 2], t2=1)
    with pytest.raises(ValueError, match="outside"):
        progress.onset([1, 2, 3], [0, 1, 2], t2=5)
    with pytest.raises(ValueError, match="fraction"):
        progress.onset([1, 2, 3], [0, 1, 2], t2=1, fraction=1.0)


def test_lead_time_counts_steps_before_generalisation_and_their_share_of_the_gap():
    assert progress.lead_time(t4=1000, onset_step=400, t2=200) == (600.0, 0.75)
    assert progress.lead_time(t4=1000, onset_step=1500, t2=200) == (-500.0, -0.625)
    assert progress.lead_time(t4=1000, onset_step=None, t2=200) == (None, None)


def test_weight_norm_is_the_norm_of_all_parameters_together():
    model = nn.Linear(3, 2)
    with torch.no_grad():
        model.weight.fill_(1.0)  # six ones
        model.bias.copy_(torch.tensor([3.0, 4.0]))
    assert progress.weight_norm(model) == pytest.approx(math.sqrt(6 + 9 + 16))


def waves(p, frequencies, d=16, seed=0):
    """An embedding (p, d) whose columns are random mixtures of cos and sin at `frequencies`."""
    gen = torch.Generator().manual_seed(seed)
    t = torch.arange(p, dtype=torch.float64)[:, None]
    columns = torch.zeros(p, d, dtype=torch.float64)
    for k in frequencies:
        a, b = torch.randn(2, d, generator=gen, dtype=torch.float64)
        columns += torch.cos(2 * math.pi * k * t / p) * a + torch.sin(2 * math.pi * k * t / p) * b
    return columns


def test_an_embedding_made_of_three_waves_puts_all_its_energy_in_those_frequencies():
    p = 47
    embedding = waves(p, [3, 11, 20]) + 5.0  # a constant offset is frequency 0, left out
    energy = progress.fourier_energy(embedding)
    assert energy.shape == (23,)
    assert set(np.flatnonzero(energy > 1e-9 * energy.max()) + 1) == {3, 11, 20}
    assert progress.fourier_sparsity(embedding, top=3) == pytest.approx(1.0, abs=1e-12)
    assert progress.fourier_sparsity(embedding, top=1) < 0.9


def test_the_energy_at_each_frequency_matches_a_direct_sum_of_projections():
    # Parseval: the energy at k is p/2 times the squared length of the projection of each column
    # on cos and sin at k, summed over the columns (k != 0, p/2).
    p = 13
    e = torch.randn(p, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    centred = e - e.mean(0)
    t = torch.arange(p, dtype=torch.float64)
    direct = []
    for k in range(1, p // 2 + 1):
        c, s = torch.cos(2 * math.pi * k * t / p), torch.sin(2 * math.pi * k * t / p)
        direct.append(float(2 * ((c @ centred) ** 2 + (s @ centred) ** 2).sum()))
    assert progress.fourier_energy(e) == pytest.approx(direct, rel=1e-10)
    # and the frequencies together hold all the energy of the centred embedding
    assert progress.fourier_energy(e).sum() == pytest.approx(p * float((centred ** 2).sum()), rel=1e-10)


def test_an_even_modulus_counts_the_nyquist_frequency_once():
    p = 8
    t = torch.arange(p, dtype=torch.float64)[:, None]
    alternating = torch.cos(math.pi * t)  # frequency p/2 = 4
    energy = progress.fourier_energy(alternating)
    assert energy.shape == (4,)
    assert energy[3] == pytest.approx(p * p)  # |X_4|^2 = p^2, once
    assert energy[:3] == pytest.approx([0, 0, 0], abs=1e-9)


def test_a_random_embedding_is_far_from_sparse():
    e = torch.randn(97, 128, generator=torch.Generator().manual_seed(2))
    share = progress.fourier_sparsity(e, top=5)
    assert 5 / 48 * 0.8 < share < 5 / 48 * 1.6


def test_the_modular_mlp_after_its_embedding_is_the_mlp_the_measures_see():
    from replicate.experiments.progress import embedding_head
    from replicate.models import ModularMLP
    torch.manual_seed(0)
    model = ModularMLP(11, embed_dim=6, hidden=9)
    pairs = torch.randint(0, 11, (20, 2))
    head = embedding_head(model)
    embedded = model.representations(pairs)["embedding"]
    assert torch.equal(head(embedded), model.representations(pairs)["logits"])
    assert torch.allclose(head(embedded), model(pairs), rtol=1e-5, atol=1e-6)  # factorised forward
    # it shares the model's layers, so training the model moves the head too
    with torch.no_grad():
        model.out.bias.add_(1.0)
    assert torch.equal(head(embedded), model.representations(pairs)["logits"])
    assert torch.allclose(head(embedded), model(pairs), rtol=1e-5, atol=1e-6)  # factorised forward


def test_a_crossing_is_the_first_step_on_a_per_step_curve_and_interpolated_between_checkpoints():
    from replicate.experiments.progress import crossing_step
    assert crossing_step([1, 2, 3, 4], [0.1, 0.5, 0.995, 1.0], 0.99) == 3.0
    assert crossing_step([1, 2, 3], [0.1, 0.5, 0.9], 0.99) is None
    # 0.5 -> 1.0 between steps 99 and 9999: 0.8 is 60% of the way in log(1 + step)
    found = crossing_step([0, 99, 9999], [0.0, 0.5, 1.0], 0.8)
    assert found == pytest.approx(math.expm1(math.log(100) + 0.6 * (math.log(10000) - math.log(100))))
