"""The BatchNorm MLP: its eval-mode network folded into a plain MLP, against a fold written out
by hand, and the local complexity and PGD of one against the other."""
import pytest
import torch
from torch import nn

from replicate.measures.adversarial import pgd_linf
from replicate.measures.local_complexity import local_complexity
from replicate.models import MLP, BatchNormMLP


def trained_batchnorm_mlp(seed=0):
    """A BatchNorm MLP in float64 after a few training steps, so that its running statistics
    and affine parameters are no longer the identity."""
    torch.manual_seed(seed)
    model = BatchNormMLP(20, 16, 3, 4).double()
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(64, 20, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 4, (64,), generator=gen)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(30):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model.eval(), x, y


def test_the_folded_mlp_computes_the_eval_mode_network_and_matches_a_fold_by_hand():
    model, x, _ = trained_batchnorm_mlp()
    norm = model.norms[0]
    assert not torch.allclose(norm.running_mean, torch.zeros_like(norm.running_mean))
    folded = model.folded()
    assert isinstance(folded, MLP) and not folded.training
    # By hand, layer 1: BN(W x + b) = g * (W x + b - mu) / s + beta, s = sqrt(var + eps)
    lin = model.linears[0]
    s = torch.sqrt(norm.running_var + norm.eps)
    w = (norm.weight / s)[:, None] * lin.weight
    b = norm.weight * (lin.bias - norm.running_mean) / s + norm.bias
    assert torch.allclose(folded.layers[0].weight, w, rtol=0, atol=1e-14)
    assert torch.allclose(folded.layers[0].bias, b, rtol=0, atol=1e-14)
    with torch.no_grad():
        assert torch.allclose(folded(x), model(x), rtol=0, atol=1e-12)
        for ours, theirs in zip(folded.preactivations(x), model.preactivations(x)):
            assert torch.allclose(ours, theirs, rtol=0, atol=1e-12)
    # in training mode the batch's own statistics differ from the running ones
    model.train()
    with torch.no_grad():
        assert not torch.allclose(folded(x), model(x), atol=1e-6)


def test_local_complexity_and_pgd_of_the_eval_network_equal_those_of_its_fold():
    model, x, y = trained_batchnorm_mlp(1)
    folded = model.folded()
    for radius in (0.05, 0.3):
        ours = local_complexity(model, x, radius, n_directions=6, seed=2).per_layer
        theirs = local_complexity(folded, x, radius, n_directions=6, seed=2).per_layer
        assert torch.equal(ours, theirs)
        assert ours[:, :-1].sum() > 0  # the neighbourhoods do cross some neurons' boundaries
    adv_bn = pgd_linf(model, x, y, 0.05, 0.01, 10)
    adv_folded = pgd_linf(folded, x, y, 0.05, 0.01, 10)
    assert torch.allclose(adv_bn, adv_folded, rtol=0, atol=1e-9)


def test_a_batchnorm_mlp_needs_a_hidden_layer():
    with pytest.raises(ValueError, match="depth"):
        BatchNormMLP(4, 8, 1, 2)
