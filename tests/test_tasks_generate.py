"""Generation: cache == no cache (tokens and logits, greedy and seeded sampling, left-padded batches),
beam 1 == greedy, the context limit, and the logits processors. Token ids stand in for text."""

import warnings
from dataclasses import replace

import pytest
import torch

from maskwise.config import preset
from maskwise.errors import UserError
from maskwise.model.transformer import build_model
from maskwise.tasks.generate import GenerationConfig, beam_search, generate
from maskwise.tasks.reading import seeded_generator
from maskwise.tasks.sampling import filter_top_k_top_p, penalise_repetition
from maskwise.tasks.scoring import continuation_logprobs

pytestmark = pytest.mark.unit

PAD, EOS, START, VOCAB, CONTEXT = 0, 1, 2, 64, 32
PROMPTS = [[5, 9, 11, 3, 7, 20, 8], [13], [40, 41, 42, 43]]  # uneven: rows are left-padded


def tiny(name: str):
    torch.manual_seed(0)
    # A larger init spreads the logits, so greedy and sampled tokens vary from step to step.
    cfg = preset(name, vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=2, max_seq_len=CONTEXT, init_std=0.2)
    return build_model(cfg).eval()


def run(model, prompts=PROMPTS, seed=None, **options):
    generator = seeded_generator(model, seed) if seed is not None else None
    return generate(model, prompts, GenerationConfig(**options), None, PAD, START, generator, output_logits=True)


GENERATIVE = ["gpt2", "modern", "t5", "bart"]
SAMPLING = {"temperature": 0.9, "top_k": 20, "top_p": 0.95, "repetition_penalty": 1.2}


@pytest.mark.parametrize("name", GENERATIVE)
@pytest.mark.parametrize("options", [{}, SAMPLING], ids=["greedy", "sampling"])
def test_cache_equals_no_cache(name, options, device):
    model = tiny(name).to(device)
    cached = run(model, seed=3, max_new_tokens=12, **options)
    uncached = run(model, seed=3, max_new_tokens=12, use_cache=False, **options)
    assert cached.tokens == uncached.tokens
    torch.testing.assert_close(cached.logits, uncached.logits, atol=1e-5, rtol=1e-5)
    assert len({tuple(t) for t in cached.tokens}) > 1  # not a degenerate constant output


@pytest.mark.parametrize("name", ["modern", "bart"])
def test_generating_leaves_ordinary_logits_and_a_model_that_trains(name):
    """generate runs under inference mode: what it returns, and the model after it, must work with autograd."""
    model = tiny(name)
    out = run(model, max_new_tokens=4)
    assert not torch.is_inference(out.logits)
    out.logits.add_(1.0)  # an inference tensor refuses in-place updates outside inference mode
    model.train()
    ids = torch.tensor([PROMPTS[0]])
    inputs = {"decoder_input_ids": ids[:, :3]} if model.cfg.family == "encoder-decoder" else {}
    model(ids, **inputs).logits.square().mean().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", ["gpt2", "modern"])
def test_left_padded_row_generates_what_it_would_alone(name):
    model = tiny(name)
    batched = run(model, max_new_tokens=10)
    for row, prompt in enumerate(PROMPTS):
        alone = run(model, [prompt], max_new_tokens=10)
        assert alone.tokens[0] == batched.tokens[row]
        torch.testing.assert_close(alone.logits[0], batched.logits[row], atol=1e-5, rtol=1e-5)


EVEN = [[5, 9, 11, 3], [13, 40, 2, 7], [40, 41, 42, 43]]  # equal lengths: nothing is padded


@pytest.mark.parametrize("name", GENERATIVE)
def test_unpadded_batch_decodes_without_a_mask_until_a_row_finishes(name, monkeypatch):
    from maskwise.model import transformer

    model = tiny(name)
    paddings = []
    build_mask = transformer.build_mask

    def spy(*args, **kwargs):
        paddings.append(kwargs.get("key_padding"))
        return build_mask(*args, **kwargs)

    monkeypatch.setattr(transformer, "build_mask", spy)
    cached = run(model, EVEN, max_new_tokens=8)
    assert paddings and all(p is None for p in paddings)  # the mask-free attention path throughout
    uncached = run(model, EVEN, max_new_tokens=8, use_cache=False)
    assert cached.tokens == uncached.tokens
    torch.testing.assert_close(cached.logits, uncached.logits, atol=1e-5, rtol=1e-5)

    # A row that ends early pads the batch from then on: the mask appears, nothing else changes.
    eos = cached.tokens[0][2]
    ended = {
        use_cache: generate(
            model, EVEN, GenerationConfig(max_new_tokens=8, use_cache=use_cache), eos, PAD, START, output_logits=True
        )
        for use_cache in (True, False)
    }
    assert any(p is not None for p in paddings)
    assert ended[True].tokens == ended[False].tokens and len(ended[True].tokens[0]) < 8
    torch.testing.assert_close(ended[True].logits, ended[False].logits, atol=1e-5, rtol=1e-5)
    for row, prompt in enumerate(EVEN):
        alone = generate(model, [prompt], GenerationConfig(max_new_tokens=8), eos, PAD, START)
        assert alone.tokens[0] == ended[True].tokens[row]


@pytest.mark.parametrize("name", GENERATIVE)
def test_beam_one_is_greedy_and_beams_agree_with_and_without_cache(name, device):
    model = tiny(name).to(device)
    greedy = run(model, max_new_tokens=15)
    eos = greedy.tokens[0][3]  # a token greedy emits: rows end early, exercising the stopping rule
    greedy = generate(model, PROMPTS, GenerationConfig(max_new_tokens=15), eos, PAD, START)
    one = beam_search(model, PROMPTS, GenerationConfig(max_new_tokens=15, num_beams=1), eos, PAD, START)
    assert one.tokens == greedy.tokens
    three = beam_search(model, PROMPTS, GenerationConfig(max_new_tokens=15, num_beams=3), eos, PAD, START)
    three_uncached = beam_search(
        model, PROMPTS, GenerationConfig(max_new_tokens=15, num_beams=3, use_cache=False), eos, PAD, START
    )
    assert three.tokens == three_uncached.tokens
    assert three.scores == pytest.approx(three_uncached.scores, abs=1e-4)


def test_long_prompt_is_cut_from_the_left_with_a_warning_and_generation_stops_at_the_context():
    model = tiny("gpt2")
    long_prompt = list(range(3, 3 + 40))  # 40 tokens > context 32
    with pytest.warns(UserWarning, match="keeping its last 31 tokens"):
        out = generate(model, [long_prompt, [5, 6]], GenerationConfig(max_new_tokens=100), None, PAD)
    assert out.prompt_lengths == [CONTEXT - 1, 2]
    assert len(out.tokens[0]) == 1  # one token fills the context
    assert len(out.tokens[1]) == CONTEXT - 2  # every row stops at max_seq_len in total
    truncated = generate(model, [long_prompt[-31:]], GenerationConfig(max_new_tokens=1), None, PAD)
    assert truncated.tokens[0] == out.tokens[0]  # the kept tokens are the last ones
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        generate(model, [list(range(3, 34))], GenerationConfig(max_new_tokens=1), None, PAD)  # 31 fits


def test_stop_sequence_ends_a_row():
    model = tiny("gpt2")
    free = run(model, [[5, 6, 7]], max_new_tokens=12).tokens[0]
    stop = tuple(free[2:4])
    out = generate(model, [[5, 6, 7]], GenerationConfig(max_new_tokens=12, stop=(stop,)), None, PAD)
    assert out.tokens[0] == free[:4]


def test_logits_processors():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    seen = torch.tensor([[True, False, False, True]])
    assert penalise_repetition(logits, seen, 2.0).tolist() == [[1.0, 1.0, 0.0, -2.0]]
    top2 = filter_top_k_top_p(logits, 2, 1.0)
    assert torch.isinf(top2[0, 2:]).all() and torch.isfinite(top2[0, :2]).all()
    # softmax of [2, 1, 0, -1] is about [.64, .24, .09, .03]: a nucleus of 0.7 needs the first two
    nucleus = filter_top_k_top_p(logits, 0, 0.7)
    assert torch.isfinite(nucleus[0, :2]).all() and torch.isinf(nucleus[0, 2:]).all()
    assert torch.isfinite(filter_top_k_top_p(logits, 0, 0.1)[0, 0])  # always keeps the best token


def test_continuation_logprobs_match_a_manual_sum():
    model = tiny("gpt2")
    prompt, continuation = [5, 6, 7], [8, 9]
    got = continuation_logprobs(model, [prompt, [4]], [continuation, [3]], PAD)
    logp = model(torch.tensor([prompt + continuation])).logits.log_softmax(-1)[0]
    expected = logp[2, 8] + logp[3, 9]
    torch.testing.assert_close(got[0], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "options, needle",
    [
        ({"top_k": 5}, "temperature"),
        ({"num_beams": 2, "temperature": 1.0}, "beam"),
        ({"max_new_tokens": 0}, "max-new-tokens"),
        ({"top_p": 0.0, "temperature": 1.0}, "top-p"),
        ({"repetition_penalty": 0.0}, "repetition"),
        ({"num_beams": 2, "stop": ((3,),)}, "stop"),
    ],
)
def test_bad_settings_are_user_errors(options, needle):
    with pytest.raises(UserError, match=needle):
        GenerationConfig(**options).validate()


def test_an_encoder_cannot_generate():
    model = build_model(preset("bert", vocab_size=VOCAB, d_model=32, n_layers=1, n_heads=2, max_seq_len=CONTEXT))
    with pytest.raises(UserError, match="break"):
        generate(model, [[5]], GenerationConfig(), None, PAD)


@pytest.mark.parametrize("threads", [1, 2, 3])  # 3: a width that does not divide keeps one block
@pytest.mark.parametrize("name", ["gpt2", "t5", "bert"])
def test_decoding_layout_computes_what_the_plain_layers_compute(name, threads):
    """``decoding_layout`` gives every projection (and the LM head) a weight split into one block of
    output columns per thread, copied to (in, out / S) when the matrix is at least as wide as tall
    and a view of the stored weight when it narrows: the outputs match the plain layers, and
    nothing of it outlives the block."""
    from maskwise.model.layout import decoding_layout

    model = tiny(name)
    ids = torch.tensor(EVEN)
    inputs = {"decoder_input_ids": ids[:, :3]} if model.cfg.family == "encoder-decoder" else {}
    keys = set(model.state_dict())
    plain = model(ids, **inputs).logits
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with decoding_layout(model):
            for m in model.modules():
                if hasattr(m, "decoding_params"):
                    weight, bias = m.decoding_params()
                    out_features, in_features = weight.shape
                    parts = threads if out_features % threads == 0 else 1
                    assert m.decoding_split.weight.shape == (parts, in_features, out_features // parts)
                    copied = m.decoding_split.weight.data_ptr() != weight.data_ptr()
                    assert copied == (out_features >= in_features)
                    if bias is None:
                        assert m.decoding_split.bias is None
                    else:
                        assert m.decoding_split.bias.shape == (parts, 1, out_features // parts)
                        assert m.decoding_split.bias.data_ptr() == bias.data_ptr()  # a view
            swapped = model(ids, **inputs).logits
    finally:
        torch.set_num_threads(saved_threads)
    torch.testing.assert_close(swapped, plain, atol=1e-5, rtol=1e-5)
    assert all(m.decoding_split is None for m in model.modules() if hasattr(m, "decoding_params"))
    assert set(model.state_dict()) == keys


def test_generated_logits_match_the_model_forward():
    """The first step's logits from ``generate`` (which decodes under ``decoding_layout``) equal a
    plain forward pass over the prompt."""
    model = tiny("gpt2")
    out = run(model, EVEN, max_new_tokens=1)
    torch.testing.assert_close(out.logits[:, 0], model(torch.tensor(EVEN)).logits[:, -1], atol=1e-5, rtol=1e-5)


def test_cross_rope_cache_equals_no_cache_and_changes_the_function():
    """Rotary cross-attention: the cached path (source keys rotated once, queries at the cache's
    offset) gives the uncached tokens and logits, and the same weights compute something else
    without it (the option is not a no-op)."""
    torch.manual_seed(0)
    cfg = preset(
        "modern",
        family="encoder-decoder",
        vocab_size=VOCAB,
        d_model=32,
        n_layers=2,
        n_heads=2,
        max_seq_len=CONTEXT,
        init_std=0.2,
        cross_rope=True,
    )
    model = build_model(cfg).eval()
    cached = run(model, seed=3, max_new_tokens=12, **SAMPLING)
    uncached = run(model, seed=3, max_new_tokens=12, use_cache=False, **SAMPLING)
    assert cached.tokens == uncached.tokens
    torch.testing.assert_close(cached.logits, uncached.logits, atol=1e-5, rtol=1e-5)
    plain = build_model(replace(cfg, cross_rope=False)).eval()
    plain.load_state_dict(model.state_dict())
    assert not torch.allclose(run(plain, max_new_tokens=1).logits, run(model, max_new_tokens=1).logits)


@pytest.mark.parametrize("family, position", [("decoder", "rope"), ("encoder-decoder", "learned")])
def test_cross_rope_needs_a_rotary_encoder_decoder(family, position):
    with pytest.raises(UserError, match="cross_rope"):
        preset(
            "gpt2",
            family=family,
            position=position,
            vocab_size=VOCAB,
            d_model=32,
            n_layers=1,
            n_heads=2,
            cross_rope=True,
        ).validate()
