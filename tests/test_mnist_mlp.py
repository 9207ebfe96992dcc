"""The MNIST MLP run's knobs that chapter 10 turns: BatchNorm, randomly labelled training digits."""
import pytest
import torch

from replicate.experiments import mnist_mlp
from replicate.models import MLP, BatchNormMLP

pytestmark = pytest.mark.usefixtures("data_dir", "one_thread")


def config(**overrides):
    return {**mnist_mlp.DEFAULTS, "n_train": 300, **overrides}


def test_the_model_has_batchnorm_only_where_the_run_asks_for_it():
    assert type(mnist_mlp.build_model(config())) is MLP
    model = mnist_mlp.build_model(config(batchnorm=True, width=16))
    assert isinstance(model, BatchNormMLP) and len(model.norms) == 3


def test_randomly_labelled_runs_change_that_share_of_the_training_labels_and_nothing_else():
    clean = mnist_mlp.training_data(config())
    noisy = mnist_mlp.training_data(config(random_labels=0.3))
    again = mnist_mlp.training_data(config(random_labels=0.3))
    assert torch.equal(noisy[0], clean[0])  # the same digits
    assert int((noisy[1] != clean[1]).sum()) == 90  # exactly 30% of 300 carry a wrong label
    assert torch.equal(noisy[1], again[1])  # and the same ones every time
    assert torch.equal(noisy[3], clean[3])  # the held-out labels stay true
    other_seed = mnist_mlp.training_data(config(random_labels=0.3, seed=1))
    assert not torch.equal(other_seed[1] != mnist_mlp.training_data(config(seed=1))[1],
                           noisy[1] != clean[1])


def test_a_batchnorm_run_keeps_its_running_statistics_and_gives_its_network_in_eval_mode():
    run = mnist_mlp.run_mnist_mlp(n_train=200, width=16, steps=30, eval_points=3, batchnorm=True)
    model = run.model_at(len(run.eval_steps) - 1)
    assert isinstance(model, BatchNormMLP) and not model.training
    assert not torch.allclose(model.norms[0].running_mean, torch.zeros(16))  # trained statistics
    x = mnist_mlp.training_data(run.config)[2][:50]
    with torch.no_grad():
        assert torch.allclose(model.folded()(x), model(x), atol=1e-5)
