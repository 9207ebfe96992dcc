"""Models. Every model exposes its pre-activations layer by layer, for the geometry measures.

Depth convention (CLAIMS.md): "depth L" is the number of `nn.Linear` modules, so a depth-4,
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


class ModularMLP(nn.Module):
    """The CPU model for algorithmic tasks (CLAIMS.md E.3): two operand embeddings, concatenated,
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
        return self.representations(pairs)["logits"]
