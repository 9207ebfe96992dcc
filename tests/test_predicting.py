"""Spectral signature, ROC/AUROC and the t4(r) + epsilon stopping rule against known answers."""
import numpy as np
import pytest

from replicate.measures.intrinsic_dimension import PowerLaw
from replicate.measures.predicting import (amplitude_spectrum, auroc, bootstrap_auroc, detrend,
                                  hjorth_activity, label_run, low_frequency_activity, lr_threshold,
                                  periodogram, roc_curve, spectral_signature, stopping_rule)


# --- the spectrum -----------------------------------------------------------------------------

@pytest.mark.parametrize("n, k, amp, phase",
                         [(256, 5, 2.0, 0.0), (200, 17, 0.3, 1.1), (101, 3, 7.0, -0.4)])
def test_pure_tone_has_its_amplitude_at_its_frequency(n, k, amp, phase):
    t = np.arange(n)
    x = amp * np.sin(2 * np.pi * k * t / n + phase)
    freqs, spectrum = amplitude_spectrum(x)
    assert freqs[k] == pytest.approx(k / n)
    assert spectrum[k] == pytest.approx(amp, rel=1e-9)
    others = np.delete(spectrum, k)
    assert np.all(others < 1e-9 * amp)


def test_constant_has_its_amplitude_at_zero_frequency():
    freqs, spectrum = amplitude_spectrum(np.full(64, 3.0))
    assert freqs[0] == 0 and spectrum[0] == pytest.approx(3.0)
    assert np.all(spectrum[1:] < 1e-12)


def test_white_noise_spectrum_is_flat_in_expectation():
    gen = np.random.default_rng(0)
    sigma, n = 1.5, 128
    spectra = np.stack([periodogram(gen.normal(0, sigma, n))[1] for _ in range(4000)])
    mean = spectra.mean(axis=0)[1:-1]  # the periodogram's expectation is sigma^2 at every frequency
    assert mean == pytest.approx(np.full(len(mean), sigma ** 2), rel=0.08)
    low, high = mean[: len(mean) // 2].mean(), mean[len(mean) // 2:].mean()
    assert low == pytest.approx(high, rel=0.03)


def test_decaying_exponential_puts_its_energy_at_low_frequency():
    t = np.arange(256)
    freqs, power = periodogram(detrend(np.exp(-t / 30.0), degree=0))
    band = freqs <= 0.05
    assert power[band].sum() > 0.9 * power[1:].sum()
    # and the low-frequency activity of a slow exponential exceeds that of fast white noise of
    # the same variance
    x = detrend(np.exp(-t / 30.0), degree=0)
    noise = np.random.default_rng(1).normal(0, x.std(), len(t))
    assert low_frequency_activity(x, 0.05) > 5 * low_frequency_activity(noise, 0.05)


def test_hjorth_activity_is_the_variance():
    x = np.random.default_rng(2).normal(3.0, 2.0, 500)
    assert hjorth_activity(x) == pytest.approx(np.var(x))
    assert hjorth_activity(np.full(10, 4.0)) == 0.0


@pytest.mark.parametrize("n", [128, 129])
def test_low_frequency_activity_is_the_variance_of_the_low_band(n):
    # Parseval: with every frequency in the band, the activity is the variance of the signal.
    x = np.random.default_rng(3).normal(0, 1, n)
    assert low_frequency_activity(x, 0.5) == pytest.approx(np.var(x))
    # a tone at frequency 4/n carries amp^2 / 2, a tone above the cutoff nothing
    t = np.arange(n)
    two_tones = 2.0 * np.cos(2 * np.pi * 4 * t / n) + 5.0 * np.cos(2 * np.pi * 40 * t / n)
    assert low_frequency_activity(two_tones, 10 / n) == pytest.approx(2.0, rel=1e-9)


def test_detrend_removes_a_line_exactly():
    t = np.arange(50, dtype=float)
    assert np.allclose(detrend(3 - 0.2 * t, degree=1), 0)
    assert np.allclose(detrend(3 - 0.2 * t, degree=0), -0.2 * (t - t.mean()))


def test_spectral_signature_sees_oscillations_on_a_decaying_loss():
    t = np.arange(1, 1001)
    smooth = 4.0 * np.exp(-t / 100.0) + 1e-3
    wobbly = smooth * np.exp(0.5 * np.sin(2 * np.pi * t / 40.0))
    quiet = spectral_signature(smooth, start=0, steps=400, cutoff=0.05, degree=3)
    loud = spectral_signature(wobbly, start=0, steps=400, cutoff=0.05, degree=3)
    assert loud > 10 * quiet
    # a tone above the cutoff frequency does not count
    fast = smooth * np.exp(0.5 * np.sin(2 * np.pi * t / 4.0))
    assert spectral_signature(fast, start=0, steps=400, cutoff=0.05, degree=3) < 0.1 * loud


def test_spectral_signature_rejects_a_short_curve():
    with pytest.raises(ValueError, match="steps"):
        spectral_signature(np.ones(100), start=50, steps=100, cutoff=0.1)


# --- ROC and AUROC ----------------------------------------------------------------------------

def test_auroc_hand_computed_with_ties():
    # positives 0.9, 0.6, 0.6; negatives 0.6, 0.3.  Pairs (pos, neg): (0.9,0.6)=1, (0.9,0.3)=1,
    # (0.6,0.6)=1/2 twice, (0.6,0.3)=1 twice: (1 + 1 + 0.5 + 0.5 + 1 + 1) / 6 = 5/6.
    scores = [0.9, 0.6, 0.6, 0.6, 0.3]
    labels = [1, 1, 1, 0, 0]
    assert auroc(scores, labels) == pytest.approx(5 / 6)
    fpr, tpr, thresholds = roc_curve(scores, labels)
    # thresholds at each distinct score, descending: >= 0.9, >= 0.6, >= 0.3
    assert np.allclose(fpr, [0, 0, 0.5, 1])
    assert np.allclose(tpr, [0, 1 / 3, 1, 1])
    assert np.allclose(thresholds[1:], [0.9, 0.6, 0.3])
    # the trapezoid under the ROC curve is the same number (a tie is a diagonal segment)
    assert np.trapezoid(tpr, fpr) == pytest.approx(5 / 6)


def test_auroc_extremes_and_reversal():
    assert auroc([3, 4, 5], [0, 1, 1]) == 1.0
    assert auroc([3, 4, 5], [1, 0, 0]) == 0.0
    assert auroc([2, 2, 2, 2], [1, 0, 1, 0]) == 0.5
    with pytest.raises(ValueError, match="both"):
        auroc([1, 2], [1, 1])


def test_bootstrap_interval_brackets_the_estimate_and_is_reproducible():
    gen = np.random.default_rng(4)
    labels = np.r_[np.ones(20), np.zeros(20)]
    scores = labels + gen.normal(0, 1.0, 40)
    estimate = auroc(scores, labels)
    lo, hi = bootstrap_auroc(scores, labels, n_boot=500, seed=0)
    assert lo < estimate < hi
    assert 0.0 <= lo and hi <= 1.0
    assert (lo, hi) == bootstrap_auroc(scores, labels, n_boot=500, seed=0)
    # perfectly separated classes: every resample separates them too
    assert bootstrap_auroc([0, 1, 2, 10, 11, 12], [0, 0, 0, 1, 1, 1], n_boot=200) == (1.0, 1.0)


# --- labels, the stopping rule and the learning-rate threshold --------------------------------

def test_label_run():
    assert label_run(np.r_[np.zeros(50), np.ones(50)], threshold=0.99) == ("grokked", 51)
    assert label_run(np.full(100, 0.05), threshold=0.99) == ("not grokked", None)
    rising = np.r_[np.full(60, 0.05), np.linspace(0.05, 0.6, 40)]
    assert label_run(rising, threshold=0.99, rise=0.1) == ("undecided", None)
    assert label_run(rising, threshold=0.99, rise=0.9) == ("not grokked", None)


def test_stopping_rule_hand_made():
    law = PowerLaw(a=0.0, gamma=1.0, b=500.0, r2=1.0)  # t4(r) = 500 whatever r: budget 500 + 100
    runs = [
        {"r": 50.0, "t4": 300, "steps": 2000},    # groks before the budget: not stopped
        {"r": 50.0, "t4": 1000, "steps": 2000},   # stopped at 600, groks by 3 x 600: an error
        {"r": 50.0, "t4": 1900, "steps": 2000},   # stopped, groks only after 3 x 600 = 1800
        {"r": 50.0, "t4": None, "steps": 2000},   # stopped, never groks within its 2000 steps
        {"r": 50.0, "t4": None, "steps": 1000},   # stopped, horizon 1800 not observed: unknown
    ]
    out = stopping_rule(runs, law, epsilon=100, horizon=3.0)
    assert [o["budget"] for o in out["runs"]] == [600] * 5
    assert [o["stopped"] for o in out["runs"]] == [False, True, True, True, True]
    assert [o["error"] for o in out["runs"]] == [False, True, False, False, None]
    # without the rule a run trains until it groks or its own step budget ends
    assert [o["saved"] for o in out["runs"]] == [0, 400, 1300, 1400, 400]
    assert out["stopped"] == 4 and out["errors"] == 1 and out["unknown"] == 1
    assert out["error_rate"] == pytest.approx(1 / 3)
    assert out["steps_saved"] == 3500
    # the steps the grid needs without the rule: each run until it groks or its budget ends
    assert out["steps_without_rule"] == 300 + 1000 + 1900 + 2000 + 1000


def test_lr_threshold():
    lrs = [1e-3, 3e-3, 1e-2, 3e-2]
    falls_then_rises = lr_threshold(lrs, [4000, 1500, 600, None])
    assert falls_then_rises == {"falls": True, "best_lr": 1e-2, "worse_beyond": True,
                                "threshold": 3e-2}
    only_falls = lr_threshold(lrs, [4000, 1500, 600, 300])
    assert only_falls == {"falls": True, "best_lr": 3e-2, "worse_beyond": False,
                          "threshold": None}
    # the first rise ends the walk, even if t4 falls again further up
    later = lr_threshold(lrs, [4000, 1500, 1700, 300])
    assert later == {"falls": True, "best_lr": 3e-3, "worse_beyond": True, "threshold": 1e-2}
    from_failure = lr_threshold(lrs, [None, 900, 400, 500])  # not grokking, then grokking: a fall
    assert from_failure == {"falls": True, "best_lr": 1e-2, "worse_beyond": True,
                            "threshold": 3e-2}
    never = lr_threshold(lrs, [None, None, None, None])
    assert never == {"falls": False, "best_lr": None, "worse_beyond": False, "threshold": None}


# --- early stopping of a modular-arithmetic run (used by the grid) ------------------------------

def test_train_modular_stops_once_generalised(one_thread):
    from replicate.experiments.algorithmic import modular_arithmetic, train_modular
    data = modular_arithmetic(5, "+", 0.6, seed=0)
    kwargs = dict(embed_dim=8, hidden=16, lr=1e-2)
    full = train_modular(data, 20, **kwargs)
    never = train_modular(data, 20, stop_at_val_acc=2.0, **kwargs)
    assert len(never.loss) == 20 and np.array_equal(never.loss, full.loss)
    # a threshold reached at step 1 stops at min_steps; the curves are the full run's prefix
    early = train_modular(data, 20, stop_at_val_acc=0.0, min_steps=7, **kwargs)
    assert len(early.loss) == len(early.val_acc) == 7
    assert np.array_equal(early.loss, full.loss[:7])
    # measures are still taken at their own steps only
    seen = train_modular(data, 20, stop_at_val_acc=0.0, min_steps=7, measure_steps=[0, 3, 15],
                         measure=lambda t, model: {"t": t}, **kwargs)
    assert [m["step"] for m in seen.measures] == [0, 3]


def test_with_patience_a_run_trains_that_share_of_its_generalisation_step_again(one_thread):
    from replicate.experiments.algorithmic import modular_arithmetic, train_modular
    data = modular_arithmetic(5, "+", 0.6, seed=0)
    kwargs = dict(embed_dim=8, hidden=16, lr=1e-2)
    full = train_modular(data, 40, **kwargs)
    # a level of 0 is reached at step 1, so the run ends at ceil((1 + patience) x 1)
    for patience, expected in ((0.0, 1), (1.0, 2), (4.0, 5), (9.5, 11), (100.0, 40)):
        run = train_modular(data, 40, stop_at_val_acc=0.0, patience=patience, **kwargs)
        assert len(run.loss) == expected, patience
        assert np.array_equal(run.loss, full.loss[:expected])
    # reached before min_steps: the patience counts from the step it was reached, and the run
    # still trains at least min_steps
    assert len(train_modular(data, 40, stop_at_val_acc=0.0, min_steps=7, patience=1.0,
                             **kwargs).loss) == 7
    assert len(train_modular(data, 40, stop_at_val_acc=0.0, min_steps=2, patience=9.0,
                             **kwargs).loss) == 10
