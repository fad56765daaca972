"""The runtime: which device and precision `auto` picks on each kind of hardware (faked), what an
explicit choice does, and that training, resume and the CLI follow it."""

import hashlib
import json

import pytest
import torch

from maskwise import runtime as runtime_module
from maskwise.cli import main
from maskwise.errors import UserError
from maskwise.objectives.clm import CLM
from maskwise.objectives.mlm import MLM
from maskwise.runs import read_metrics
from maskwise.runtime import (
    AUTO_PRECISION_ENV,
    Bf16Probe,
    Hardware,
    Runtime,
    detect_hardware,
    precision_setting,
    resolve,
)
from maskwise.train.settings import TrainConfig
from tests.conftest import HAS_CUDA
from tests.test_train import V, _Tok, _trainer

AVX2 = Hardware(cpu_capability="AVX2", cpu_flags=frozenset({"avx2", "fma"}))
AVX512_BF16 = Hardware(cpu_capability="AVX512", cpu_flags=frozenset({"avx512f", "avx512_bf16"}))
AMX = Hardware(cpu_capability="AVX512", cpu_flags=frozenset({"avx512f", "amx_bf16", "amx_tile"}))
SM80 = Hardware(cuda_capabilities=((8, 0),), cuda_names=("A100",), cpu_capability="AVX2")
SM70 = Hardware(cuda_capabilities=((7, 0),), cuda_names=("V100",), cpu_capability="AVX2")
TWO_GPUS = Hardware(cuda_capabilities=((9, 0), (9, 0)), cuda_names=("H100", "H100"))
MPS = Hardware(mps=True, cpu_capability="DEFAULT")


class Probe:
    """A fake bf16 probe that says how much faster bf16 ran, and counts its calls."""

    def __init__(self, speedup: float):
        self.speedup, self.calls = speedup, 0

    def __call__(self) -> Bf16Probe:
        self.calls += 1
        return Bf16Probe(fp32_ms=self.speedup, bf16_ms=1.0)


# hardware, --device, --precision, probe speedup -> device, precision, reason contains, warns, probe asked
DECISIONS = [
    (AVX2, "auto", "auto", 2.0, "cpu", "fp32", "no native bf16 (AVX2)", False, False),
    (AVX512_BF16, "auto", "auto", 2.2, "cpu", "bf16", "ran the probe's MLP faster in bf16", False, True),
    (AVX512_BF16, "auto", "auto", 0.8, "cpu", "fp32", "ran the probe's MLP slower in bf16", False, True),
    (AMX, "auto", "auto", 6.0, "cpu", "bf16", "native bf16 (AVX512 with AMX)", False, True),
    (AVX512_BF16, "auto", "auto", 2.2, "cpu", "bf16", "native bf16 (AVX512 with avx512_bf16)", False, True),
    (AVX2, "cpu", "bf16", 2.0, "cpu", "bf16", "asked for", True, False),
    (AVX2, "cpu", "fp32", 2.0, "cpu", "fp32", "asked for", False, False),
    (AMX, "cpu", "fp16", 2.0, "cpu", "fp16", "asked for", True, False),
    (SM80, "auto", "auto", 2.0, "cuda:0", "bf16", "A100 (sm80) runs bf16 natively", False, False),
    (SM70, "auto", "auto", 2.0, "cuda:0", "fp16", "no native bf16", False, False),
    (SM70, "cuda", "bf16", 2.0, "cuda:0", "bf16", "emulates bf16", True, False),
    (SM80, "cuda:0", "fp32", 2.0, "cuda:0", "fp32", "asked for", False, False),
    (SM80, "cpu", "auto", 2.0, "cpu", "fp32", "no native bf16 (AVX2)", False, False),
    (TWO_GPUS, "cuda:1", "auto", 2.0, "cuda:1", "bf16", "sm90", False, False),
    (MPS, "auto", "auto", 2.0, "mps", "fp32", "MPS", False, False),
]


@pytest.mark.unit
@pytest.mark.parametrize(
    "hw, device, precision, speedup, want_device, want_precision, reason, warns, probed", DECISIONS
)
def test_decision_table(
    hw, device, precision, speedup, want_device, want_precision, reason, warns, probed, monkeypatch
):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv(AUTO_PRECISION_ENV, raising=False)  # the machine's own answer, not a forced one
    probe = Probe(speedup)
    runtime = resolve(device, precision, hardware=hw, bf16_probe=probe)
    assert (runtime.device, runtime.precision) == (want_device, want_precision)
    assert reason in runtime.reason
    assert bool(runtime.warning) == warns
    assert (probe.calls > 0) == probed  # never time an emulated bf16 matmul: on AVX2 it is ~90x slower
    assert runtime.needs_scaler == (want_precision == "fp16")
    assert runtime.describe().startswith(f"device {want_device}, precision {want_precision}: ")


@pytest.mark.unit
def test_torchrun_takes_the_local_rank_gpu(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve("auto", hardware=TWO_GPUS).device == "cuda:1"
    assert resolve("cuda", hardware=TWO_GPUS).device == "cuda:1"
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(UserError, match="2 CUDA GPU"):
        resolve("auto", hardware=TWO_GPUS)


@pytest.mark.unit
@pytest.mark.parametrize(
    "hw, device, precision, message",
    [
        (AVX2, "cuda", "auto", "CUDA is not available"),
        (AVX2, "cuda:0", "auto", "CUDA is not available"),
        (SM80, "cuda:1", "auto", "1 CUDA GPU"),
        (SM80, "cuda:x", "auto", "1 CUDA GPU"),
        (AVX2, "mps", "auto", "no Apple GPU"),
        (AVX2, "tpu", "auto", "--device must be"),
        (AVX2, "cpu", "fp8", "--precision must be"),
    ],
)
def test_unavailable_or_unknown_choices_are_user_errors(hw, device, precision, message, monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.raises(UserError, match=message):
        resolve(device, precision, hardware=hw, bf16_probe=Probe(2.0))


@pytest.mark.unit
def test_bf16_flag_is_an_alias_that_cannot_contradict_precision():
    assert precision_setting("auto", True) == "bf16"
    assert precision_setting("bf16", True) == "bf16"
    assert precision_setting("fp32", False) == "fp32"
    assert precision_setting("auto", False) == "fp32"  # an explicit bf16=False is obeyed, not read as unset
    assert precision_setting("auto", None) == "auto" and precision_setting("fp16", None) == "fp16"
    with pytest.raises(UserError, match="contradicts --precision fp32"):
        precision_setting("fp32", True)
    with pytest.raises(UserError, match="bf16=False means precision fp32, which contradicts --precision bf16"):
        precision_setting("bf16", False)
    with pytest.raises(UserError, match="contradicts"):
        TrainConfig(bf16=True, precision="fp16").validate()


@pytest.mark.unit
def test_this_machine_is_described_from_torch_and_the_cpu(monkeypatch):
    monkeypatch.delenv(AUTO_PRECISION_ENV, raising=False)
    hw = detect_hardware()
    assert hw.cpu_capability == torch.backends.cpu.get_cpu_capability()
    assert len(hw.cuda_capabilities) == torch.cuda.device_count()
    runtime = resolve()  # the real decision on this machine: fp32 unless bf16 is native and faster
    if not hw.cpu_bf16_native and not hw.cuda_capabilities:
        assert runtime.precision == "fp32"


@pytest.mark.unit
def test_the_cpu_is_named_with_its_family_and_model_and_its_flags_read(tmp_path):
    """Two cloud EPYCs both call themselves "AMD EPYC"; the family and model tell Zen 4 from Zen 5."""
    processor = (
        "processor\t: {n}\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512_bf16\n"
    )
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(processor.format(n=0) + "\n" + processor.format(n=1))
    flags, name = runtime_module._cpu_facts(cpuinfo)
    assert name == "AMD EPYC (family 26, model 2)"
    assert flags == {"fpu", "avx2", "avx512_bf16"}
    cpuinfo.write_text("Features\t: fp asimd bf16\nCPU implementer\t: 0x41\n")  # Arm: no family, no model name
    flags, name = runtime_module._cpu_facts(cpuinfo)
    assert flags == {"fp", "asimd", "bf16"} and "family" not in name
    assert runtime_module._cpu_facts(tmp_path / "missing") == (frozenset(), name)


@pytest.mark.unit
@pytest.mark.parametrize(
    "hw, forced, want, warns",
    [
        (AVX2, "bf16", "bf16", True),  # the AVX-512 kind's answer on AVX2: emulated, so a warning
        (AVX512_BF16, "fp32", "fp32", False),  # the AVX2 kind's answer on AVX-512
        (AVX512_BF16, "bf16", "bf16", False),
    ],
)
def test_the_environment_switch_forces_what_auto_means_on_a_cpu(hw, forced, want, warns, monkeypatch):
    monkeypatch.setenv(AUTO_PRECISION_ENV, forced)
    probe = Probe(2.0)
    runtime = resolve("cpu", "auto", hardware=hw, bf16_probe=probe)
    assert (runtime.precision, bool(runtime.warning), probe.calls) == (want, warns, 0)
    assert AUTO_PRECISION_ENV in runtime.reason
    assert resolve("cpu", "fp32", hardware=hw).precision == "fp32"  # an explicit choice is not forced
    assert resolve("cuda", "auto", hardware=SM80).precision == "bf16"  # nor is a GPU's auto
    monkeypatch.setenv(AUTO_PRECISION_ENV, "fp16")
    with pytest.raises(UserError, match=f"{AUTO_PRECISION_ENV} must be fp32 or bf16"):
        resolve("cpu", "auto", hardware=hw)


@pytest.mark.unit
def test_inference_runs_fp32_under_auto_and_an_explicit_precision_as_asked(monkeypatch):
    monkeypatch.delenv(AUTO_PRECISION_ENV, raising=False)
    trained = resolve("cpu", "auto", hardware=AVX512_BF16, bf16_probe=Probe(4.0))
    assert trained.precision == "bf16" and trained.inference().precision == "fp32"
    assert "inference under precision auto runs fp32" in trained.inference().reason
    assert resolve("cpu", "bf16", hardware=AVX512_BF16).inference().precision == "bf16"
    assert resolve("cuda", "fp16", hardware=SM70).inference().precision == "fp16"
    fp32 = resolve("cpu", "auto", hardware=AVX2)
    assert fp32.inference() is fp32


@pytest.mark.unit
def test_the_probe_times_the_work_in_both_precisions_and_says_what_it_measured(monkeypatch):
    monkeypatch.delenv(AUTO_PRECISION_ENV, raising=False)
    measured = Bf16Probe(fp32_ms=8.0, bf16_ms=2.0)
    assert measured.speedup == 4.0
    assert "2.0 ms in bf16 vs 8.0 ms in fp32 (4.0x)" in measured.describe()
    runtime = resolve("cpu", "auto", hardware=AVX512_BF16, bf16_probe=lambda: Bf16Probe(1.0, 2.0))
    assert runtime.precision == "fp32" and "(0.5x)" in runtime.measured  # native but slower: fp32
    assert runtime.measured not in runtime.describe()  # the figure varies run to run: recorded, not announced
    assert runtime.to_dict()["measured"] == runtime.measured


@pytest.mark.unit
@pytest.mark.skipif(not detect_hardware().cpu_bf16_native, reason="the probe runs only where bf16 is native")
def test_the_real_probe_times_both_precisions_and_leaves_the_random_state_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    measured = runtime_module.cpu_bf16_probe.__wrapped__()  # uncached: this call really times
    assert torch.equal(torch.get_rng_state(), before)  # a seeded run is the same whether or not it probed
    assert measured.fp32_ms > 0 and measured.bf16_ms > 0


@pytest.mark.unit
def test_autocast_follows_the_precision():
    a, b = torch.randn(4, 8), torch.randn(8, 4)
    for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        with Runtime("cpu", precision, "test").autocast():
            assert (a @ b).dtype == dtype
    batch = {"input_ids": torch.ones(2, 3, dtype=torch.long), "n": 3}
    assert Runtime("cpu", "fp32", "test").move(batch) is batch  # nothing to copy on the CPU


# ---- training on the runtime --------------------------------------------------------------------


def _losses(device, objective, family) -> list[float]:
    trainer = _trainer(objective, family, steps=4, eval_every=2, device=str(device), precision="fp32")
    assert {p.device.type for p in trainer.model.parameters()} == {torch.device(device).type}
    records = trainer.fit()
    return [r["train_loss"] for r in records] + [r["val_loss"] for r in records]


@pytest.mark.integration
@pytest.mark.parametrize("name", ["mlm", "clm"])
def test_training_on_a_device_gives_the_cpu_losses(name, device):
    objective, family = (MLM(_Tok(), V), "encoder") if name == "mlm" else (CLM(), "decoder")
    on_device, on_cpu = _losses(device, objective, family), _losses("cpu", objective, family)
    assert on_device == pytest.approx(on_cpu, rel=1e-4)


@pytest.mark.integration
def test_fp16_trains_with_a_loss_scaler_that_resumes(tmp_path):
    trainer = _trainer(MLM(_Tok(), V), "encoder", tmp_path / "run", steps=4, eval_every=2, precision="fp16")
    assert trainer.optimizer_step.scaler.is_enabled()
    records = trainer.fit()
    assert all(r["val_loss"] < 10 for r in records)  # finite and not diverged
    scale = trainer.optimizer_step.scaler.get_scale()
    resumed = _trainer(MLM(_Tok(), V), "encoder", tmp_path / "run", steps=6, eval_every=2, precision="fp16")
    assert resumed.resume()
    assert resumed.optimizer_step.scaler.get_scale() == scale


@pytest.mark.unit
@pytest.mark.parametrize(
    "budget, total, unit", [("", 20, "step"), ("seconds=30", 30, "s"), ("tokens=5000", 5000, "tok")]
)
def test_progress_counts_what_ends_the_run(budget, total, unit):
    trainer = _trainer(CLM(), "decoder", budget=budget, progress=True)
    bar = trainer._progress_bar()
    assert (bar.total, bar.unit) == (total, unit)
    bar.close()


@pytest.mark.e2e
def test_run_records_its_runtime(tmp_path, small_text, capsys, monkeypatch):
    monkeypatch.setattr(runtime_module, "_announced", set())  # said once per process: say it again here
    code = main(
        [
            "pretrain",
            "--data",
            str(small_text),
            "--steps",
            "2",
            "--eval-every",
            "2",
            "--out",
            str(tmp_path / "run"),
            "--device",
            "cpu",
            *TINY,
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert err.startswith(resolve("cpu").describe())
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    header = read_metrics(tmp_path / "run", headers=True)[0]
    assert config["runtime"] == header["runtime"] and header["runtime"]["device"] == "cpu"


# ---- the CLI ------------------------------------------------------------------------------------

TINY = [
    "--d-model",
    "16",
    "--layers",
    "1",
    "--heads",
    "2",
    "--batch-size",
    "2",
    "--block-size",
    "16",
    "--eval-batches",
    "1",
    "--no-progress",
]


@pytest.mark.e2e
@pytest.mark.skipif(HAS_CUDA, reason="this machine has CUDA")
@pytest.mark.parametrize(
    "command",
    [
        ["pretrain", "--steps", "2"],
        ["compare", "--quick"],
        ["ablate", "shift-bug", "--scale", "quick"],
        ["demo"],
        ["generate", "no-such-run", "--prompt", "x"],
        ["finetune", "classify", "no-such-run", "--out", "o"],
        ["evaluate", "no-such-run"],
        ["fill-mask", "no-such-run", "a [MASK]"],
    ],
)
def test_device_cuda_without_cuda_is_one_line_and_exit_2(command, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main([*command, "--device", "cuda"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "CUDA is not available" in err
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def _tree(folder):
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.e2e
@pytest.mark.parametrize(
    "flag, value", [("--d-model", "32"), ("--objective", "prefix-lm"), ("--tokenizer", "bpe"), ("--lr", "0.5")]
)
def test_resume_refuses_a_changed_setting_and_leaves_the_run_as_it_was(flag, value, small_text, tmp_path, capsys):
    run = ["pretrain", "--data", str(small_text), "--steps", "2", "--eval-every", "2", "--out", str(tmp_path / "run")]
    assert main([*run, *TINY]) == 0
    before = _tree(tmp_path / "run")
    capsys.readouterr()
    code = main([*run, "--resume", "--steps", "4", *TINY, flag, value])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"cannot change {flag}" in err and value in err  # names the flag and both values
    assert _tree(tmp_path / "run") == before


@pytest.mark.e2e
@pytest.mark.precision("fp32")
def test_a_run_written_under_another_device_resumes_on_the_cpu(small_text, tmp_path, capsys):
    """The run folder says it was trained on cuda:0 (config and metrics); --device cpu continues it
    exactly as an uninterrupted CPU run."""
    common = ["pretrain", "--data", str(small_text), "--eval-every", "2", "--seed", "5", *TINY]
    assert main([*common, "--steps", "6", "--out", str(tmp_path / "full")]) == 0
    assert main([*common, "--steps", "4", "--out", str(tmp_path / "cut")]) == 0
    config_path = tmp_path / "cut" / "config.json"
    config = json.loads(config_path.read_text())
    config["settings"]["device"] = "cuda:0"
    config["runtime"] = {**config["runtime"], "device": "cuda:0", "precision": "bf16"}
    config_path.write_text(json.dumps(config))
    capsys.readouterr()
    code = main(
        [*common, "--steps", "6", "--out", str(tmp_path / "cut"), "--resume", "--device", "cpu", "--precision", "fp32"]
    )
    assert code == 0, capsys.readouterr().err

    def curve(run):
        return [(r["step"], r["train_loss"], r["val_loss"]) for r in read_metrics(run)]

    assert curve(tmp_path / "cut") == curve(tmp_path / "full")
    assert [h["runtime"]["device"] for h in read_metrics(tmp_path / "cut", headers=True)] == ["cpu", "cpu"]
