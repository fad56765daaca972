"""Weight helpers the interop tests share: random weights large enough that a wrong mapping shows in
the logits, and exact state-dict equality for round trips."""

import torch


def randomized(model, seed=0):
    """Every parameter ~ N(0, 0.2^2), eval mode."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.2)
    return model.eval()


def state_dicts_equal(a, b):
    return a.keys() == b.keys() and all(torch.equal(value, b[key]) for key, value in a.items())
