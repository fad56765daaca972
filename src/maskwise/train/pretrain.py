"""``maskwise pretrain`` as a library call: data -> tokenizer -> model -> objective -> loop -> run folder.

Settings are one flat set of keys, the same in a TOML ``--config`` file and as CLI flags
(``--block-size`` is ``block_size``); unknown keys are rejected, never ignored.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from maskwise import runs
from maskwise.config import ModelConfig, from_dict, preset
from maskwise.data.corpus import Corpus, load_corpus
from maskwise.data.stream import TokenStream
from maskwise.data.tokenizers import Tokenizer, build_tokenizer
from maskwise.errors import UserError
from maskwise.families import family_of
from maskwise.model.transformer import build_model
from maskwise.objectives.registry import (
    OBJECTIVE_OPTIONS,
    build_objective,
    check_pair,
)
from maskwise.runtime import Runtime
from maskwise.train.init_from import Source, earlier_totals, open_source
from maskwise.train.loop import Trainer, distributed_context
from maskwise.train.settings import TrainConfig

# What --resume applies from the new command line; any other difference from the run is refused.
RESUMABLE = (
    "device",
    "precision",
    "bf16",
    "compile",
    "steps",
    "budget",
    "eval_every",
    "progress",
    "keep_last",
    "max_nonfinite",
    "tensorboard",
)


@dataclass
class PretrainConfig:
    family: str = "decoder"
    objective: str = ""  # "" = the family's classic objective (mlm, clm, span)
    data: str = "shakespeare"
    val_data: str = ""
    text_field: str = "text"
    tokenizer: str = "char"  # char, wordpiece, bpe, or a path to a tokenizer.json
    vocab_size: int = 8192  # for trained wordpiece/bpe tokenizers
    preset: str = ""  # "" = bert, gpt2 or t5 by family
    layers: int = 4
    decoder_layers: int = 0  # encoder-decoder: 0 = same as layers
    heads: int = 4
    d_model: int = 128
    d_ff: int = 0  # 0 = the preset's (4 x d_model, or 8/3 x d_model for gated FFNs)
    dropout: float = 0.0
    cross_rope: bool = False  # encoder-decoder with rotary positions: rotate cross-attention too
    # objective knobs (each objective reads the ones it has; see OBJECTIVE_OPTIONS)
    mask_ratio: float = 0.15
    mask_prob: float = 0.8
    random_prob: float = 0.1
    no_shift: bool = False
    noise_density: float = 0.15  # span corruption
    mean_span: float = 3.0
    denoise_mask: float = 0.3  # BART denoising, defaults = BART-large (objectives/denoise.py)
    mask_random: float = 0.1
    mask_length: str = "span-poisson"
    poisson_lambda: float = 3.5
    replace_length: int = 1
    permute_sentences: float = 1.0
    rotate: float = 0.0
    insert: float = 0.0
    generator_fraction: float = 0.25  # ELECTRA: generator width / discriminator width
    discriminator_weight: float = 50.0
    causal_fraction: float = 1 / 16  # hybrid: GPT-BERT's 1 causal batch : 15 masked
    out: str = ""  # "" = runs/<family>-<objective>
    overwrite: bool = False
    resume: bool = False
    init_from: str = ""  # a finished run whose final weights (and tokenizer) start this one (train/init_from.py)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)

    @classmethod
    def from_flat(cls, values: dict[str, Any], what: str = "pretrain config") -> PretrainConfig:
        """Route flat keys to the top level or to ``train``; anything else is an error."""
        own = {f.name for f in fields(cls)} - {"train"}
        train_keys = {f.name for f in fields(TrainConfig)}
        unknown = sorted(set(values) - own - train_keys)
        if unknown:
            raise UserError(f"{what}: unknown key(s) {', '.join(unknown)}")
        top = from_dict(_Top, {k: v for k, v in values.items() if k in own}, what)
        train = from_dict(TrainConfig, {k: v for k, v in values.items() if k in train_keys}, what)
        return cls(**dataclasses.asdict(top), train=train.validate())

    def flat(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        values.update(values.pop("train"))
        return values

    def resolved(self) -> PretrainConfig:
        """Fill the family-dependent defaults and check the family/objective pair."""
        family = family_of(self.family)
        objective = self.objective or family.objective
        check_pair(self.family, objective)
        out = self.out or f"runs/{self.family}-{objective}"
        return dataclasses.replace(self, objective=objective, preset=self.preset or family.preset, out=out)


_Top = dataclasses.make_dataclass(
    "_Top",
    [(f.name, f.type, dataclasses.field(default=f.default)) for f in fields(PretrainConfig) if f.name != "train"],
)


def read_toml(path: str, tables: tuple[str, ...] = ()) -> dict[str, Any]:
    """A config file's keys (dashes read as underscores); a table only where ``tables`` names it, its
    own tables' keys read the same way (compare's ``[tasks.tag]``)."""
    try:
        with open(path, "rb") as handle:
            values = tomllib.load(handle)
    except FileNotFoundError:
        raise UserError(f"config file {path}: no such file") from None
    except OSError as error:
        raise UserError(f"config file {path}: cannot read it ({error.strerror or error})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"config file {path}: not valid TOML ({error})") from None
    nested = sorted(k for k, v in values.items() if isinstance(v, dict) and k not in tables)
    if nested:
        raise UserError(f"config file {path}: tables are not supported ({', '.join(nested)}); use flat keys")

    def keys(table: dict) -> dict:
        return {k.replace("-", "_"): keys(v) if isinstance(v, dict) else v for k, v in table.items()}

    return keys(values)


def model_config(settings: PretrainConfig, vocab_size: int) -> ModelConfig:
    overrides: dict[str, Any] = {
        "family": settings.family,
        "vocab_size": -(-vocab_size // 64) * 64,
        "d_model": settings.d_model,
        "n_layers": settings.layers,
        "n_heads": settings.heads,
        "max_seq_len": settings.train.block_size,
        "dropout": settings.dropout,
    }
    if settings.d_ff:
        overrides["d_ff"] = settings.d_ff
    if settings.decoder_layers:
        overrides["n_decoder_layers"] = settings.decoder_layers
    if settings.cross_rope:
        overrides["cross_rope"] = True
    for name in ("d_model", "layers", "heads", "d_ff", "decoder_layers"):
        if getattr(settings, name) < 0 or (name in ("d_model", "layers", "heads") and getattr(settings, name) == 0):
            raise UserError(f"{name.replace('_', '-')} must be positive, got {getattr(settings, name)}")
    return preset(settings.preset, **overrides)


def prepare_run_dir(settings: PretrainConfig, replace: bool = True) -> Path:
    """The run folder, made or kept by the one guard: --resume continues it, --overwrite replaces it; without
    ``replace`` all but the replacing, so that a run checks everything it reads before the old folder goes."""
    return runs.prepare_folder(
        settings.out, settings.overwrite, resume=settings.resume, resume_flag="--resume", replace=replace
    )


def refuse_fresh_start(run_dir: Path) -> None:
    """Where --resume found no intact checkpoint: starting again from step 0 would replace a finished model
    or damaged checkpoints the user may still want, so refuse (a run stopped before its first checkpoint
    holds neither and starts again)."""
    checkpoints = run_dir / runs.CHECKPOINTS
    if checkpoints.exists() and not checkpoints.is_dir():
        raise UserError(f"--resume: {checkpoints} is not a folder; move it away to continue")
    kept = [
        name
        for name, there in (
            (runs.MODEL_FILE, (run_dir / runs.MODEL_FILE).is_file()),
            ("checkpoints", checkpoints.is_dir() and any(checkpoints.glob("step-*"))),
        )
        if there
    ]
    if kept:
        raise UserError(
            f"--resume: {run_dir} has no intact checkpoint to continue from; nothing was changed "
            f"(kept: {', '.join(kept)}; --overwrite starts the run again)"
        )


def _flag(key: str) -> str:
    return "--no-progress" if key == "progress" else "--" + key.replace("_", "-")


def resume_settings(settings: PretrainConfig, saved: dict[str, Any], given: set[str] | None) -> PretrainConfig:
    """The saved run's settings with the ``RESUMABLE`` ones taken from ``settings``.

    ``given``: the keys the user set (flags, TOML keys); None = every key of ``settings``. A given
    key outside ``RESUMABLE`` whose value differs from the run's is refused: resuming a d16 run
    "with --d-model 32" would otherwise quietly keep training at d16."""
    new = settings.flat()
    old = {**PretrainConfig().resolved().flat(), **saved}
    for key in sorted(set(new) if given is None else set(given) & set(new)):
        if key in RESUMABLE or key in ("out", "resume", "overwrite") or new[key] == old[key]:
            continue
        raise UserError(
            f"--resume cannot change {_flag(key)}: the run has {old[key]!r}, "
            f"this command {new[key]!r} (may change on resume: "
            f"{', '.join(_flag(k) for k in RESUMABLE)})"
        )
    kept = {**saved, **{key: new[key] for key in RESUMABLE}, "out": settings.out, "resume": True}
    return PretrainConfig.from_flat(kept).resolved()


def with_source_tokenizer(settings: PretrainConfig, source: Source, given: set[str] | None) -> PretrainConfig:
    """The source run's tokenizer settings (its vocabulary is the weights'); a different --tokenizer or
    --vocab-size the user chose (``given``, as in ``resume_settings``) is refused rather than ignored."""
    theirs = {key: source.settings[key] for key in ("tokenizer", "vocab_size")}
    for key, value in theirs.items():
        if (given is None or key in given) and getattr(settings, key) != value:
            raise UserError(
                f"--init-from {source.path} trains with that run's tokenizer: {_flag(key)} is "
                f"{value!r} there, this command {getattr(settings, key)!r} (leave {_flag(key)} out)"
            )
    return dataclasses.replace(settings, **theirs)


def read_corpus(settings: PretrainConfig) -> Corpus:
    """The run's training (and validation) text, as ``settings`` name it."""
    return load_corpus(settings.data, settings.val_data or None, text_field=settings.text_field)


def new_tokenizer(settings: PretrainConfig, corpus: Corpus) -> Tokenizer:
    """The tokenizer a fresh run of ``settings`` builds on ``corpus``."""
    return build_tokenizer(settings.tokenizer, corpus, settings.vocab_size)


def initial_model(settings: PretrainConfig, tokenizer: Tokenizer) -> tuple[ModelConfig, Any, torch.nn.Module]:
    """The model config, the objective and the seeded, untrained model that a run of ``settings`` starts from."""
    cfg = model_config(settings, tokenizer.vocab_size)
    options = {param: getattr(settings, key) for key, param in OBJECTIVE_OPTIONS.get(settings.objective, {}).items()}
    objective = build_objective(settings.objective, settings.family, tokenizer, cfg.vocab_size, **options)
    cfg = objective.model_config(cfg)
    torch.manual_seed(settings.train.seed)
    return cfg, objective, objective.build_model(cfg) or build_model(cfg)


def untrained(settings: PretrainConfig) -> tuple[torch.nn.Module, Tokenizer]:
    """What a run of ``settings`` would start from, never trained, as its folder would load it, and its
    tokenizer: the control that tells what pretraining added to a fine-tuned score."""
    settings = settings.resolved()
    tokenizer = new_tokenizer(settings, read_corpus(settings))
    _, objective, model = initial_model(settings, tokenizer)
    return objective.final_model(model), tokenizer


def pretrain(
    settings: PretrainConfig, on_eval=None, given: set[str] | None = None, runtime: Runtime | None = None
) -> dict[str, Any]:
    """Run (or resume) one pretraining run; returns ``{"run_dir", "records", "model", "tokenizer"}``.

    ``given``: which settings the user chose (the others are defaults), for ``resume_settings``;
    ``runtime``: one already decided (an experiment's), else the settings' ``device``/``precision``."""
    settings = settings.resolved()
    run_dir = Path(settings.out)
    resuming = settings.resume and (run_dir / runs.CONFIG_FILE).is_file()
    saved = runs.read_json(run_dir / runs.CONFIG_FILE) if resuming else {}
    if resuming:
        if not (isinstance(saved, dict) and isinstance(saved.get("settings"), dict)):
            raise UserError(f"--resume: {run_dir / runs.CONFIG_FILE} holds no run settings to continue with")
        settings = resume_settings(settings, saved["settings"], given)
    # On resume the checkpoint holds the weights: the source is read (and applied) only when a run starts.
    source = open_source(settings.init_from) if settings.init_from and not resuming else None
    if source is not None:
        settings = with_source_tokenizer(settings, source, given)
    runtime = runtime or settings.train.runtime()
    rank, world = distributed_context(runtime)

    # Data, tokenizer and model come before the folder, so that a refusal (data that does not read,
    # source weights that do not fit) leaves whatever is at --out as it was.
    corpus = read_corpus(settings)
    if resuming:
        tokenizer = Tokenizer.load(run_dir / runs.TOKENIZER_FILE)
    elif source is not None:
        tokenizer = source.tokenizer
    else:
        tokenizer = new_tokenizer(settings, corpus)
    cfg, objective, model = initial_model(settings, tokenizer)
    if source is not None:
        runs.load_weights_into(model, runs.read_safetensors(source.weights), source.label)
    if rank == 0:
        prepare_run_dir(settings, replace=False)  # refused now, replaced (--overwrite) only once all below reads
    progress = settings.train.progress and rank == 0
    train_stream = TokenStream.from_texts(
        corpus.train_part,
        tokenizer,
        f"training data {settings.data}",
        cache_key=f"{corpus.fingerprint}/train",
        progress=progress,
    )
    val_stream = TokenStream.from_texts(
        corpus.val_part, tokenizer, "validation data", cache_key=f"{corpus.fingerprint}/val", progress=progress
    )

    continued = source.record if source is not None else saved.get("init_from")
    trainer = Trainer(
        model,
        objective,
        train_stream,
        val_stream,
        settings.train,
        run_dir,
        runtime=runtime,
        earlier=earlier_totals(continued) if continued else None,
    )
    if resuming and not trainer.resume():
        refuse_fresh_start(run_dir)
    if rank == 0:
        prepare_run_dir(settings)
    if world > 1:
        dist.barrier()  # the other processes wait until rank 0 has made (or refused) the folder
    if trainer.rank == 0 and not resuming:
        tokenizer.save(run_dir / runs.TOKENIZER_FILE)
        runs.write_json(
            run_dir / runs.CONFIG_FILE,
            {
                "model": cfg.to_dict(),
                "settings": settings.flat(),
                "objective": settings.objective,
                "family": settings.family,
                "corpus": {"name": corpus.name, "fingerprint": corpus.fingerprint},
                "parameters": sum(p.numel() for p in model.parameters()),
                "processes": trainer.world,
                "runtime": runtime.to_dict(),
                **({"init_from": continued} if continued else {}),
            },
        )
    records = trainer.fit(on_eval)
    final = objective.final_model(model)
    if trainer.rank == 0:
        runs.save_weights(final, run_dir / runs.MODEL_FILE)
    return {"run_dir": run_dir, "records": records, "model": final, "tokenizer": tokenizer, "settings": settings}
