"""The training loop: pinned losses, exact accumulation averaging, budgets, resume, guards."""

import dataclasses
import shutil
import sys

import pytest
import torch

from maskwise.config import preset
from maskwise.data.stream import TokenStream
from maskwise.errors import UserError
from maskwise.model.transformer import build_model
from maskwise.objectives.clm import CLM
from maskwise.objectives.mlm import MLM
from maskwise.runs import CHECKPOINTS, read_metrics
from maskwise.train import loop
from maskwise.train.budget import Budget
from maskwise.train.events import EVENTS_FOLDER, EventLog, scalar_tag
from maskwise.train.loop import Trainer
from maskwise.train.optim import build_optimizer, lr_factor, parameter_groups
from maskwise.train.pretrain import PretrainConfig, pretrain
from maskwise.train.settings import TrainConfig

V = 64


class _Tok:
    cls_id, mask_id = 2, 3
    special_ids = frozenset(range(7))


def _stream(seed):
    # a learnable stream: one fixed random "sentence" of 37 tokens, repeated, with seeded noise
    base = torch.randint(7, V, (37,), generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed)
    ids = base.repeat(200)
    noise = torch.rand(len(ids), generator=g) < 0.1
    ids[noise] = torch.randint(7, V, (int(noise.sum()),), generator=g)
    return TokenStream(ids)


def _trainer(objective, family, run_dir=None, **train):
    torch.manual_seed(0)
    name = {"encoder": "bert", "decoder": "gpt2"}[family]
    model = build_model(preset(name, vocab_size=V, d_model=32, n_heads=4, n_layers=2, max_seq_len=32))
    cfg = TrainConfig(
        **{
            "steps": 20,
            "batch_size": 4,
            "block_size": 16,
            "lr": 3e-3,
            "warmup": 2,
            "eval_every": 10,
            "eval_batches": 2,
            "progress": False,
            **train,
        }
    )
    return Trainer(model, objective, _stream(1), _stream(2), cfg, run_dir)


# Pinned on this code with seed 0; a change here means the computation changed.
PINNED = {"clm": (3.5154, 3.3243), "mlm": (3.8463, 3.7501)}


@pytest.mark.integration
@pytest.mark.parametrize("name,objective,family", [("clm", CLM(), "decoder"), ("mlm", MLM(_Tok(), V), "encoder")])
def test_pinned_losses_and_loss_falls(name, objective, family):
    records = _trainer(objective, family).fit()
    first, last = records[0]["val_loss"], records[-1]["val_loss"]
    assert last < first
    assert (round(first, 4), round(last, 4)) == pytest.approx(PINNED[name], abs=2e-3)
    if name == "mlm":
        assert records[-1]["val_masked_acc"] == pytest.approx(1 / 17)  # pinned: 1 of the 17 masked val positions


class Replay:
    """``objective`` with its training batches fixed in advance (the stream's windows are ignored)."""

    def __init__(self, objective, batches):
        self.objective, self.batches = objective, list(batches)

    def prepare(self, windows, generator):
        return self.batches.pop(0)

    def __getattr__(self, name):  # everything else is the objective's own
        return getattr(self.objective, name)


@pytest.mark.integration
@pytest.mark.precision("fp32")
def test_accumulation_averages_over_all_positions():
    """One step over a batch of 8 == one step over 2 micro-batches of 4 with different numbers of
    masked positions: the loss is the mean over the masked positions of the whole batch, not a mean
    of micro-batch means."""
    g = torch.Generator().manual_seed(3)
    halves = [MLM(_Tok(), V, mask_ratio=r).prepare(torch.randint(7, V, (4, 15), generator=g), g) for r in (0.1, 0.5)]
    whole = {k: torch.cat([h[k] for h in halves]) for k in halves[0]}
    big = _trainer(Replay(MLM(_Tok(), V), [whole]), "encoder", steps=1, batch_size=8)
    small = _trainer(Replay(MLM(_Tok(), V), halves), "encoder", steps=1, batch_size=4, grad_accum=2)
    loss_big, n_big, _ = big.train_step()
    loss_small, n_small, _ = small.train_step()
    assert n_big == n_small and float(loss_big) == pytest.approx(float(loss_small), rel=1e-5)
    for p, q in zip(big.model.parameters(), small.model.parameters()):
        torch.testing.assert_close(p, q, atol=2e-6, rtol=1e-4)


@pytest.mark.integration
def test_budget_stops_run_and_counts_tokens():
    trainer = _trainer(CLM(), "decoder", steps=1000, budget="tokens=640", eval_every=1000)
    records = trainer.fit()
    assert trainer.counters.step == 10  # 4 x 16 tokens per step
    assert records[-1]["tokens_seen"] == 640 and records[-1]["decoder_tokens"] == 640
    assert records[-1]["flops"] > 0 and records[-1]["loss_positions_seen"] == 640


@pytest.mark.integration
@pytest.mark.precision("fp32")
def test_a_long_enough_run_ends_with_its_share_of_the_matmul_peak(monkeypatch):
    short = _trainer(CLM(), "decoder", steps=4, eval_every=2).fit()
    assert not any("share_of_matmul_peak" in record for record in short)  # seconds, not UTILIZATION_MIN_SECONDS
    monkeypatch.setattr(loop, "UTILIZATION_MIN_SECONDS", 0.0)
    trainer = _trainer(CLM(), "decoder", steps=4, eval_every=2)
    first, last = trainer.fit()
    assert "share_of_matmul_peak" not in first  # only the run's last record
    c = trainer.counters
    assert last["model_flops_per_s"] == pytest.approx(c.flops / c.wall_s)
    assert last["matmul_peak_dtype"] == "float32"
    assert last["matmul_peak_flops_per_s"] > 1e9  # any CPU's 2048-wide fp32 product runs above a GFLOP/s
    assert last["share_of_matmul_peak"] == pytest.approx(last["model_flops_per_s"] / last["matmul_peak_flops_per_s"])
    assert 0 < last["share_of_matmul_peak"] < 1  # a width-32 model is far below the peak
    slow = _trainer(CLM(), "decoder", steps=2, eval_every=2)
    slow.runtime = dataclasses.replace(slow.runtime, warning="an emulated precision")
    assert "share_of_matmul_peak" not in slow.fit()[-1]


@pytest.mark.unit
@pytest.mark.parametrize("text", ["tokens", "seconds=-1", "wall=3", "flops=abc"])
def test_bad_budget(text):
    with pytest.raises(UserError):
        Budget.parse(text)


@pytest.mark.integration
def test_nonfinite_steps_are_skipped_then_stop():
    trainer = _trainer(CLM(), "decoder", steps=50, max_nonfinite=3)
    with torch.no_grad():
        trainer.model.embed.weight[10:20] = float("nan")
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    with pytest.raises(UserError, match="non-finite"):
        trainer.fit()
    assert trainer.counters.nonfinite_steps == 3
    after = trainer.model.state_dict()
    for key, value in before.items():
        torch.testing.assert_close(value, after[key], equal_nan=True)


@pytest.mark.integration
def test_resume_is_exact(tmp_path):
    full = _trainer(CLM(), "decoder", tmp_path / "full", steps=30).fit()
    first = []

    def crash_after_step_20(record):
        first.append(record)
        if record["step"] == 20:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _trainer(CLM(), "decoder", tmp_path / "cut", steps=30).fit(crash_after_step_20)
    resumed = _trainer(CLM(), "decoder", tmp_path / "cut", steps=30)
    assert resumed.resume()
    rest = resumed.fit()
    assert [r["train_loss"] for r in first + rest] == [r["train_loss"] for r in full]
    assert [r["val_loss"] for r in first + rest] == [r["val_loss"] for r in full]
    assert [r["step"] for r in read_metrics(tmp_path / "cut")] == [10, 20, 30]
    headers = read_metrics(tmp_path / "cut", headers=True)  # one per start: the first run, the resume
    assert [h["step"] for h in headers] == [0, 20] and headers[0]["runtime"]["device"] == "cpu"


@pytest.mark.unit
def test_schedule_and_groups():
    assert lr_factor(0, 10, 100) == pytest.approx(0.1)
    assert lr_factor(10, 10, 100) == pytest.approx(1.0)
    assert lr_factor(100, 10, 100, 0.1) == pytest.approx(0.1)
    model = build_model(preset("bert", vocab_size=V, d_model=32, n_heads=4, n_layers=1, max_seq_len=16))
    groups = {g["name"]: g for g in parameter_groups(model, 1e-3, 0.1, ("lm_head",), 5e-3)}
    no_decay = {id(p) for g in groups.values() if g["weight_decay"] == 0 for p in g["params"]}
    assert id(model.embed.weight) in no_decay
    assert id(model.stack.blocks[0].attn_norm.weight) in no_decay
    assert id(model.stack.blocks[0].attn.qkv.weight) not in no_decay
    assert groups["head.decay"]["lr"] == 5e-3 and groups["body.decay"]["lr"] == 1e-3
    assert all(g["fused"] for g in build_optimizer(model, 1e-3).param_groups)  # fp32 on the CPU: fused


@pytest.mark.integration
def test_pretrain_writes_run_folder(small_text, tmp_path):
    settings = PretrainConfig.from_flat(
        {
            "family": "encoder",
            "data": str(small_text),
            "d_model": 32,
            "layers": 1,
            "heads": 2,
            "out": str(tmp_path / "run"),
            "steps": 6,
            "batch_size": 4,
            "block_size": 32,
            "eval_every": 3,
            "eval_batches": 2,
            "progress": False,
        }
    )
    result = pretrain(settings)
    run = tmp_path / "run"
    assert {p.name for p in run.iterdir()} >= {"config.json", "tokenizer.json", "model.safetensors", "metrics.jsonl"}
    record = read_metrics(run)[-1]
    for key in (
        "step",
        "tokens_seen",
        "loss_positions_seen",
        "wall_s",
        "train_loss",
        "val_loss",
        "lr",
        "val_masked_acc",
    ):
        assert key in record
    assert result["settings"].objective == "mlm"


@pytest.mark.unit
def test_scalar_tags():
    assert [scalar_tag(k) for k in ("val_loss", "train_loss", "val_masked_acc", "tokens_seen")] == [
        "val/loss",
        "train/loss",
        "val/masked_acc",
        "progress/tokens_seen",
    ]


@pytest.mark.integration
def test_tensorboard_events_mirror_metrics_across_a_resume(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def crash_after_step_20(record):
        if record["step"] == 20:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _trainer(CLM(), "decoder", tmp_path, steps=30, tensorboard=True).fit(crash_after_step_20)
    # As if killed after logging step 20 but before its checkpoint: resume rewinds to step 10, and
    # step 20 is logged again; TensorBoard must show it once.
    shutil.rmtree(max((tmp_path / CHECKPOINTS).glob("step-*")))
    resumed = _trainer(CLM(), "decoder", tmp_path, steps=30, tensorboard=True)
    assert resumed.resume()
    resumed.fit()
    events = EventAccumulator(str(tmp_path / EVENTS_FOLDER))  # purges as the app does
    events.Reload()
    records = read_metrics(tmp_path)
    for tag, key in (("val/loss", "val_loss"), ("train/loss", "train_loss"), ("progress/wall_s", "wall_s")):
        logged = events.Scalars(tag)
        assert [e.step for e in logged] == [10, 20, 30]
        assert [e.value for e in logged] == pytest.approx([r[key] for r in records], rel=1e-6)


@pytest.mark.unit
def test_tensorboard_without_the_package_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails as if not installed
    with pytest.raises(UserError, match=r"pip install 'maskwise\[tensorboard\]'"):
        EventLog(tmp_path, resume_step=0)


@pytest.mark.unit
def test_electra_flops_count_both_stacks():
    """The ELECTRA pair costs its discriminator (an encoder of the same config) plus its generator
    and the projections between them; attention FLOPs are counted for both."""
    from maskwise.objectives.electra import ElectraModel
    from maskwise.train.budget import flops_per_token

    cfg = preset("modern", family="encoder", vocab_size=50, d_model=32, n_heads=4, n_layers=2, max_seq_len=64)
    encoder, _, head = flops_per_token(build_model(cfg), 64)
    pair = ElectraModel(cfg)
    electra, decoder, electra_head = flops_per_token(pair, 64)
    generator = pair.generator
    width = generator.cfg.n_heads * generator.cfg.head_dim
    generator_flops = 6.0 * sum(p.numel() for p in generator.blocks.parameters()) + 12.0 * 2 * 64 * width
    projections = 6.0 * sum(p.numel() for m in (pair.generator_in, pair.generator_dense) for p in m.parameters())
    assert electra == pytest.approx(encoder + generator_flops + projections)
    assert decoder == 0.0 and electra_head == 6.0 * 32 * 50 and head == electra_head  # no LM-head transform
