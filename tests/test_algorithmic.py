"""The algorithmic tasks and models: tables checked against their definitions."""
import itertools

import pytest
import torch

from replicate.experiments.algorithmic import algorithmic_task, modular_arithmetic, s5_composition, train_modular
from replicate.models import TinyTransformer, algorithmic_model


def test_modular_table_and_disjoint_split():
    data = modular_arithmetic(7, "*", 0.5, seed=0)
    x = torch.cat([data.train_x, data.val_x])
    y = torch.cat([data.train_y, data.val_y])
    assert len(x) == 49 and len({tuple(r) for r in x.tolist()}) == 49
    assert torch.equal(y, (x[:, 0] * x[:, 1]) % 7)
    with pytest.raises(ValueError, match="valid"):
        modular_arithmetic(7, "^")


def test_s5_composition_is_the_group_table():
    data = algorithmic_task("s5", p=0, train_fraction=0.5, seed=0)
    perms = list(itertools.permutations(range(5)))
    x = torch.cat([data.train_x, data.val_x])
    y = torch.cat([data.train_y, data.val_y])
    assert data.p == 120 and len(y) == 120 ** 2
    table = {tuple(ab): c for ab, c in zip(x.tolist(), y.tolist())}
    identity = perms.index(tuple(range(5)))
    for a in range(0, 120, 7):
        assert table[(a, identity)] == a and table[(identity, a)] == a
        for b in range(0, 120, 11):
            assert perms[table[(a, b)]] == tuple(perms[a][perms[b][i]] for i in range(5))
    assert any(table[(a, b)] != table[(b, a)] for a in range(10) for b in range(10))  # not abelian
    assert s5_composition(0.3, seed=1).train_y.shape == (round(0.3 * 14400),)


def test_transformer_is_causal_and_reads_the_last_token():
    torch.manual_seed(0)
    model = TinyTransformer(vocab=11, d_model=16, heads=4, layers=2, ffn=32)
    pairs = torch.tensor([[1, 2], [3, 2], [1, 5]])
    reps = model.representations(pairs)
    assert set(reps) == {"embedding", "block1", "block2", "logits"} and reps["logits"].shape == (3, 11)
    # The last token sees both operands: changing either changes the logits.
    assert not torch.allclose(reps["logits"][0], reps["logits"][1])
    assert not torch.allclose(reps["logits"][0], reps["logits"][2])
    # Causal: the first position's attention output does not depend on the second token.
    block = model.blocks[0]
    x = model.token(torch.cat([pairs[:1], pairs[2:3]])) + model.position
    attended = model._attention(block, x)
    assert torch.allclose(attended[0, 0], attended[1, 0]) and not torch.allclose(attended[0, 1], attended[1, 1])
    with pytest.raises(ValueError, match="valid"):
        algorithmic_model("rnn", 11)


def test_train_modular_runs_with_either_model():
    data = modular_arithmetic(5, "+", 0.6, seed=0)
    for kind in ("mlp", "transformer"):
        run = train_modular(data, 20, model_kind=kind, embed_dim=8, hidden=16, lr=1e-2)
        assert run.loss.shape == (20,) and run.loss[-1] < run.loss[0]


def test_the_modular_mlp_forward_is_its_layers_applied_to_the_embeddings():
    """The factorised forward (two p x hidden tables instead of a product per pair) against the
    layers applied one after another, in float64 so that only rounding could separate them, and
    its gradient against the layered one's."""
    from replicate.models import ModularMLP
    torch.manual_seed(3)
    model = ModularMLP(13, embed_dim=7, hidden=11).double()
    pairs = torch.randint(0, 13, (50, 2))
    e = torch.cat([model.embed.weight[pairs[:, 0]], model.embed.weight[pairs[:, 1]]], dim=1)
    layered = model.out(torch.relu(e @ model.hidden.weight.T + model.hidden.bias))
    fast = model(pairs)
    assert torch.allclose(fast, layered, rtol=1e-12, atol=1e-12)
    grads = [torch.autograd.grad(out.square().sum(), list(model.parameters())) for out in (fast, layered)]
    for g_fast, g_layered in zip(*grads):
        assert torch.allclose(g_fast, g_layered, rtol=1e-10, atol=1e-12)
