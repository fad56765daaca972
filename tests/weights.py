"""What the interop tests share: random weights large enough that a wrong mapping shows in the
logits, exact state-dict equality for round trips, and a run folder as pretraining writes one."""

import torch

from maskwise import runs


def randomized(model, seed=0):
    """Every parameter ~ N(0, 0.2^2), eval mode."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.2)
    return model.eval()


def state_dicts_equal(a, b):
    return a.keys() == b.keys() and all(torch.equal(value, b[key]) for key, value in a.items())


def make_run(folder, model, tokenizer, preset_name):
    """A run folder as pretraining writes one (config, final weights, tokenizer)."""
    folder.mkdir()
    runs.write_json(folder / runs.CONFIG_FILE, {"model": model.cfg.to_dict(), "settings": {"preset": preset_name}})
    runs.save_weights(model, folder / runs.MODEL_FILE)
    tokenizer.save(folder / runs.TOKENIZER_FILE)
    return folder
