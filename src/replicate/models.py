"""Models. Every model exposes its pre-activations layer by layer, for the geometry measures.

Depth convention: "depth L" is the number of `nn.Linear` modules, so a depth-4,
width-200 MLP on MNIST is 784-200-200-200-10.
"""
from __future__ import annotations

import torch
from torch import nn

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


class MLP(nn.Module):
    """A plain MLP: `depth` Linear layers, `activation` between them, none after the last.

    `init_scale` multiplies every parameter after PyTorch's default initialisation (Omnigrok's
    "x8 initialisation" is init_scale=8).
    """

    def __init__(self, in_dim: int, width: int, depth: int, out_dim: int, bias: bool = True,
                 init_scale: float = 1.0, activation: str = "relu"):
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth counts Linear layers and must be >= 1, got {depth}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")
        sizes = [in_dim] + [width] * (depth - 1) + [out_dim]
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=bias) for a, b in zip(sizes[:-1], sizes[1:]))
        self.act = ACTIVATIONS[activation]()
        if init_scale != 1.0:
            with torch.no_grad():
                for param in self.parameters():
                    param.mul_(init_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            x = self.act(layer(x))
        return self.layers[-1](x)

    def preactivations(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The input of each activation, layer by layer, and last the output (logits)."""
        out = []
        for i, layer in enumerate(self.layers):
            z = layer(x)
            out.append(z)
            if i < len(self.layers) - 1:
                x = self.act(z)
        return out


class BatchNormMLP(nn.Module):
    """The MLP with BatchNorm after each hidden Linear layer, before the activation (Humayun et
    al.'s BatchNorm variant): 784-200-BN-ReLU-200-BN-ReLU-200-BN-ReLU-10 at depth 4.

    In training mode a BatchNorm layer normalises by the batch's statistics, so a point's output
    depends on the other points of its batch; in eval mode it is the affine map of its running
    statistics, and the network is an MLP again: `folded` returns that MLP, on which the
    geometry measures (local complexity, partitions) run as on any other. The linear layers are
    `linears`, not `layers`, so that no code takes this for a plain MLP and skips the norms.
    """

    def __init__(self, in_dim: int, width: int, depth: int, out_dim: int, bias: bool = True,
                 init_scale: float = 1.0):
        super().__init__()
        if depth < 2:
            raise ValueError(f"BatchNorm goes after hidden layers: depth must be >= 2, got {depth}")
        sizes = [in_dim] + [width] * (depth - 1) + [out_dim]
        self.linears = nn.ModuleList(nn.Linear(a, b, bias=bias) for a, b in zip(sizes[:-1], sizes[1:]))
        self.norms = nn.ModuleList(nn.BatchNorm1d(width) for _ in range(depth - 1))
        self.act = nn.ReLU()
        if init_scale != 1.0:
            with torch.no_grad():
                for param in self.linears.parameters():
                    param.mul_(init_scale)

    def preactivations(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The input of each activation (after its BatchNorm), layer by layer, then the logits."""
        out = []
        for linear, norm in zip(self.linears[:-1], self.norms):
            out.append(norm(linear(x)))
            x = self.act(out[-1])
        return out + [self.linears[-1](x)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.preactivations(x)[-1]

    def folded(self) -> MLP:
        """The eval-mode network as a plain MLP: each BatchNorm, y = gamma (z - mean) / sqrt(var +
        eps) + beta with its running mean and variance, merged into the Linear layer before it
        (weights scaled row by row, the bias shifted). Same dtype and device; a copy."""
        first, last = self.linears[0], self.linears[-1]
        mlp = MLP(first.in_features, first.out_features, len(self.linears), last.out_features,
                  bias=True).to(first.weight.device, first.weight.dtype)
        with torch.no_grad():
            for linear, norm, target in zip(self.linears[:-1], self.norms, mlp.layers):
                scale = norm.weight / torch.sqrt(norm.running_var + norm.eps)
                bias = linear.bias if linear.bias is not None else torch.zeros_like(norm.bias)
                target.weight.copy_(scale[:, None] * linear.weight)
                target.bias.copy_(scale * (bias - norm.running_mean) + norm.bias)
            mlp.layers[-1].weight.copy_(last.weight)
            if last.bias is not None:
                mlp.layers[-1].bias.copy_(last.bias)
            else:
                mlp.layers[-1].bias.zero_()
        return mlp.eval()


class ModularMLP(nn.Module):
    """The CPU model for algorithmic tasks: two operand embeddings, concatenated,
    one ReLU hidden layer, logits over the p residues."""

    def __init__(self, p: int, embed_dim: int = 128, hidden: int = 256):
        super().__init__()
        self.embed = nn.Embedding(p, embed_dim)
        self.hidden = nn.Linear(2 * embed_dim, hidden)
        self.out = nn.Linear(hidden, p)

    def representations(self, pairs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each layer's representation of a batch of (a, b) pairs: embedding, hidden, logits."""
        e = self.embed(pairs).flatten(1)
        h = torch.relu(self.hidden(e))
        return {"embedding": e, "hidden": h, "logits": self.out(h)}

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        """Logits, computed without forming the embeddings. The hidden layer is linear in the
        concatenated embedding [E[a], E[b]], so its pre-activation is A[a] + B[b] + bias with
        A = E W_a^T and B = E W_b^T, two p x hidden tables (W_a, W_b: the halves of the hidden
        weight). Building the tables costs 2p products of length embed_dim instead of one per
        pair and operand: a training step about twice as fast at p = 47 on one CPU thread.
        The same function as `representations(pairs)["logits"]`, up to float rounding."""
        embed, weight = self.embed.weight, self.hidden.weight
        half = embed.shape[1]
        first = embed @ weight[:, :half].T
        second = embed @ weight[:, half:].T
        pre = first[pairs[:, 0]] + second[pairs[:, 1]] + self.hidden.bias
        return self.out(torch.relu(pre))


class TinyTransformer(nn.Module):
    """A decoder-only transformer for two-token algorithmic tasks (Power et al. 2022 use 2 layers,
    width 128, 4 heads): token + position embeddings, pre-norm blocks with causal attention, and
    logits read at the last token.

    Attention is written out with plain matrix products (no fused kernel), so the loss can be
    differentiated twice, as the Hessian-vector products of `replicate.measures.landscape` need.
    """

    def __init__(self, vocab: int, d_model: int = 128, heads: int = 4, layers: int = 2,
                 ffn: int = 512, seq_len: int = 2):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by heads ({heads})")
        self.heads = heads
        self.token = nn.Embedding(vocab, d_model)
        self.position = nn.Parameter(torch.randn(seq_len, d_model) * 0.02)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "norm1": nn.LayerNorm(d_model), "qkv": nn.Linear(d_model, 3 * d_model), "proj": nn.Linear(d_model, d_model),
            "norm2": nn.LayerNorm(d_model), "up": nn.Linear(d_model, ffn), "down": nn.Linear(ffn, d_model),
        }) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, vocab)

    def _attention(self, block: nn.ModuleDict, x: torch.Tensor) -> torch.Tensor:
        n, t, d = x.shape
        q, k, v = block["qkv"](block["norm1"](x)).reshape(n, t, 3, self.heads, d // self.heads).unbind(2)
        scores = torch.einsum("nqhd,nkhd->nhqk", q, k) / (d // self.heads) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        weights = scores.masked_fill(causal, float("-inf")).softmax(-1)
        return block["proj"](torch.einsum("nhqk,nkhd->nqhd", weights, v).reshape(n, t, d))

    def representations(self, pairs: torch.Tensor) -> dict[str, torch.Tensor]:
        """The last token's representation after the embedding and after each block, and the logits."""
        x = self.token(pairs) + self.position[: pairs.shape[1]]
        reps = {"embedding": x[:, -1]}
        for i, block in enumerate(self.blocks, 1):
            x = x + self._attention(block, x)
            x = x + block["down"](torch.relu(block["up"](block["norm2"](x))))
            reps[f"block{i}"] = x[:, -1]
        reps["logits"] = self.out(self.norm(x[:, -1]))
        return reps

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        return self.representations(pairs)["logits"]


def algorithmic_model(kind: str, vocab: int, embed_dim: int = 128, hidden: int = 256) -> nn.Module:
    """The model for an algorithmic task: `mlp` (ModularMLP, the CPU choice) or `transformer`
    (TinyTransformer with d_model=embed_dim, feed-forward width=hidden, 2 layers, 4 heads)."""
    if kind == "mlp":
        return ModularMLP(vocab, embed_dim, hidden)
    if kind == "transformer":
        return TinyTransformer(vocab, embed_dim, heads=4, layers=2, ffn=hidden)
    raise ValueError(f"unknown model {kind!r}; valid: mlp, transformer")
