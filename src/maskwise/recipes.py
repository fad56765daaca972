"""Recipes: the named scales of ``compare``, every ablation, the benchmarks and the tests.

``CompareSettings`` is ``compare``'s scale (``default``, ``QUICK``, ``GPU`` and the tests' ``SMOKE``):
the block every family shares, its pretraining clock, and ``tasks``, the config of every fine-tune an
experiment runs (``tasks.run.run_task`` reads it). ``Scale`` is an ablation's: a token budget per arm
on one of those recipes. ``pretrain_settings`` turns either into flat pretraining settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from maskwise.config import from_dict, preset
from maskwise.errors import UserError
from maskwise.families import family_of
from maskwise.tasks.classify import ClassifyConfig
from maskwise.tasks.embed import EmbedConfig
from maskwise.tasks.finetune import FinetuneConfig
from maskwise.tasks.registry import TASKS, configured_by, task_of
from maskwise.tasks.rerank import RerankConfig
from maskwise.tasks.seq2seq import VERSE, Seq2SeqConfig
from maskwise.tasks.tag import TagConfig

# ---- the named scales --------------------------------------------------------------------------

# A scale's change to some of its fine-tunes: a kind's config type (its task through the registry), or a fine-tune's
# name (a plays' task of a kind: "verse") -> fields.
Tuning = dict[type[FinetuneConfig] | str, dict[str, Any]]


def by_kind(*configs: FinetuneConfig) -> dict[str, FinetuneConfig]:
    """Fine-tune configs by the kind of the task each configures (``tasks.registry.task_of``)."""
    return {task_of(cfg).kind: cfg for cfg in configs}


# The default scale's fine-tunes: how long each trains and on how many rows is the scale's choice, beside its block and
# clock, not the task's. compare fine-tunes by one rule (``finetune.FINE_TUNING``: 3 epochs of the training rows, a
# scratch body's rates), so a compare fine-tune's ``steps`` is its budget: the plays' rows are as many as 3 epochs fit
# in it (tests/test_fine_tuning_rule.py), and a user's task draws at most that many (``compare_plan.budgeted``).
# Rerank: 8 queries x 3 negatives x 192 tokens, a third of RerankConfig's 7 x 256, which these bodies learned no more
# from (docs/results.md).
DEFAULT_FINETUNES: dict[str, FinetuneConfig] = by_kind(
    # Line order (compare's classification row): the train plays hold 14,098 pairs an order, the test plays 3,255.
    # 375 steps (3 epochs of 4,000 pairs): at 100 an ablation's 1.4 M-token encoder stayed near chance
    # (docs/results.md).
    ClassifyConfig(
        steps=375,
        batch_size=32,
        lr=1e-3,
        head_lr=3e-3,
        plays_task="line-order",
        train_per_label=2000,
        test_per_label=500,
    ),
    # Pairs drawn among every train speech; the collection: 500 of the test plays' ~2,000 speeches (in
    # all of them one relevant speech is a needle a minutes-old model does not find), each a query.
    EmbedConfig(steps=189, batch_size=32, lr=1e-3, train_pairs=2000, test_queries=500, test_docs=500),
    # Passages of up to 120 characters (the encoder-decoder's half of the block holds them whole), opened
    # inside a speech so that the answer is never the first line; half the training draws with the cast
    # renamed: the names must be copied from the source, not recalled. 600 steps: enough for the copying
    # encoder-decoder to write a name whole (the step counts tried: docs/results.md). Three length buckets
    # of the test plays' 369 such passages: 72 under 60 characters, 135 of 60-89, 162 from 90.
    Seq2SeqConfig(
        steps=600,
        batch_size=16,
        lr=1e-3,
        train_passages=2000,
        test_passages=200,
        max_chars=120,
        mid_speech=True,
        max_target_len=64,
        rename_speakers=0.5,
        source_edges=(0, 60, 90),
    ),
    # 1,000 test windows of whole words from the six test plays, 120 characters: within every family's
    # context, the encoder-decoder's half of the block included, with room for [CLS].
    TagConfig(steps=300, batch_size=16, lr=1e-3, head_lr=3e-3, train_windows=1600, test_windows=1000, window_chars=120),
    # The reranker ablation (compare has no reranking row): 60 test queries, each over its BM25 top 100,
    # read three ways a seed: what fits its 30 minutes on 2 CPU cores.
    RerankConfig(
        steps=100, batch_size=8, lr=1e-3, head_lr=3e-3, n_negatives=3, max_len=192, train_queries=1000, test_queries=60
    ),
) | {
    # Verse from prose (compare's judged read-then-write row): 2-4 lines of a verse speech, up to 120 characters as
    # passage -> speakers' (the test plays hold 3,826 such sources, 88 characters on average), written back in their
    # lines: the target is as long as its source, which the decoder's block holds beside it (120 + 120 + 2 of 256).
    # Its 600 steps are passage -> speakers' budget (3 epochs of 2,400 sources); 12 a batch, not 16, trains as many
    # tokens as its 16 passages and their names (the time plan: ~60 s a writer, where 16 took ~85 s and the default
    # compare ~15 min on one thread).
    VERSE: Seq2SeqConfig(
        steps=600,
        batch_size=12,
        lr=1e-3,
        plays_task=VERSE,
        train_passages=2400,
        test_passages=200,
        max_chars=120,
        max_target_len=120,
        source_edges=(0, 60, 90),
    ),
}


@dataclass(frozen=True)
class CompareSettings:
    """``compare``'s scale: three families at one wall-clock budget, then every task each can do."""

    name: str = "default"
    seconds: float = 120.0  # pretraining wall-clock per family
    # The whole command's budget with a user's tasks: where their fine-tunes, estimated at the machine's probed
    # speed, would take it past this, pretraining is shortened to fit (``compare.time_plan``).
    minutes: float = 15.0
    # ModernBERT's block for every family (pre-norm, RoPE, GeGLU): rotary positions take a character MLM
    # encoder off its unigram plateau in about a hundred steps, and the encoder and the decoder export to HF
    # classes (ModernBertForMaskedLM, ModernBertDecoderForCausalLM); at equal tokens it measured as good as
    # Llama's block on every row (docs/results.md).
    preset: str = "modernbert"
    # d 64 rather than 128: a quarter of the FLOPs a token, so fp32 on AVX2 reads several times d 128's ~170 steps
    # in 120 s (674-1,006 capped at AVX2), past the 200-step warning, and the fine-tunes cost less, with every
    # verdict's gap kept (docs/results.md).
    d_model: int = 64
    heads: int = 4
    layers: int = 4  # the encoder-decoder splits them, layers // 2 + layers // 2
    block_size: int = 256
    batch_size: int = 16
    tokenizer: str = "char"
    vocab_size: int = 4096  # for tokenizer = "bpe" or "wordpiece"
    lr: float = 2e-3
    warmup: int = 30
    encoder_objective: str = "mlm"
    decoder_objective: str = "clm"
    # BART's denoising rather than T5's span corruption: reconstructing its whole input teaches the
    # encoder-decoder to copy from the source, which passage -> speakers needs (docs/results.md).
    encoder_decoder_objective: str = "denoise"
    # The encoder-decoder reads the block split between its two stacks (half in each, twice the batch): the
    # tokens its attention holds and a step reads are the decoder-only model's. With that and denoising
    # without sentence permutation it learns to copy from its source within 120 s, which read-then-write
    # rests on; at the whole block, or with BART's permutation, it had not (docs/results.md).
    split_context: bool = True
    permute_sentences: float = 0.0  # denoising's fraction of sentences shuffled (BART's: 1.0)
    min_steps: int = 200  # fewer optimizer steps than this in any family: the report opens with a warning
    # The compute ladder: fractions of ``seconds``, ascending, the last 1. Each family pretrains once on a warmup,
    # stable, decay schedule; every fraction below 1 branches off its stable phase and cools down as a run of that
    # length alone would (``train.points``; benchmarks/bench_wsd_point.py measures it against a cosine run), and
    # every point is fine-tuned and measured like the last: each answer as a curve along compute (``ladder``).
    ladder: tuple[float, ...] = (0.25, 0.5, 1.0)
    cooldown: float = 0.2  # the share of each run (and of each point's) that its learning rate decays over
    # Every experiment's fine-tunes (compare's rows and the ablations'), by name: each kind's, and a kind's other plays
    # task compare measures ("verse": seq2seq). These tiny bodies need lr 1e-3 (at 3e-4 classification stayed near
    # chance on a quick-scale encoder; docs/results.md). A kind registered from outside that a scale does not name
    # fine-tunes at its own config's defaults (``config_of``).
    tasks: dict[str, FinetuneConfig] = field(default_factory=lambda: dict(DEFAULT_FINETUNES))
    held_out_chars: int = 1500
    held_out_blocks: int = 30  # pieces of the held-out text an interval resamples
    fill_positions: int = 300
    ttft_repeats: int = 100  # time to first token: timed prompts per family (a few ms each; outliers need many)
    # Sources answered together when timing the first token: at batch 1 both writing families took the same
    # ~2.5 ms on a d-64 block whatever the source's length (dispatch); at 8 the time is the source's reading.
    ttft_batch: int = 8

    def model(self) -> dict:
        return {
            "preset": self.preset,
            "tokenizer": self.tokenizer,
            "vocab_size": self.vocab_size,
            "d_model": self.d_model,
            "heads": self.heads,
            "layers": self.layers,
            "block_size": self.block_size,
            "batch_size": self.batch_size,
            "lr": self.lr,
        }

    def schedule(self, budget: str) -> dict:
        """The clock ends every run (``budget``, else the scale's seconds); ``steps`` never binds. Warmup, stable,
        decay, keeping the ladder's points below 1 to branch from."""
        return {
            "steps": 100_000,
            "warmup": self.warmup,
            "budget": budget or f"seconds={self.seconds}",
            "eval_every": 50,
            "eval_batches": 8,
            "schedule": "wsd",
            "cooldown": self.cooldown,
            "points": ",".join(f"{f:g}" for f in self.shorter_points),
        }

    @property
    def shorter_points(self) -> tuple[float, ...]:
        """The ladder's fractions below 1: the runs branched off each family's."""
        return tuple(f for f in self.ladder if f < 1)

    def check_ladder(self) -> None:
        """Refuse, in one line, a ladder that is not ascending fractions in (0, 1] ending at 1."""
        ladder = self.ladder
        if not ladder or ladder[-1] != 1 or any(not 0 < f <= 1 for f in ladder) or list(ladder) != sorted(set(ladder)):
            raise UserError(f"ladder must be ascending fractions in (0, 1] ending at 1, got {list(ladder)}")
        if not 0 < self.cooldown <= 1:
            raise UserError(f"cooldown must be in (0, 1], got {self.cooldown}")

    def objective(self, family: str) -> str:
        return {
            "encoder": self.encoder_objective,
            "decoder": self.decoder_objective,
            "encoder-decoder": self.encoder_decoder_objective,
        }[family]

    def family_arm(self, family: str, data: str) -> dict:
        """A family with this scale's objective for it, on ``data``."""
        return {"family": family, "objective": self.objective(family), "data": data}

    def shape(self, family: str) -> dict:
        """The same block for every family; the encoder-decoder splits the layers between its two
        stacks and narrows its FFN to pay for cross-attention, so the three have equal parameters."""
        if not family_of(family).two_stacks:
            return {}
        half = max(1, self.layers // 2)
        shape = {
            "layers": half,
            "decoder_layers": half,
            "cross_rope": True,
            "d_ff": matched_ffn_width(self.preset, self.d_model, self.layers),
        }
        if self.split_context:
            shape.update(block_size=self.block_size // 2, batch_size=2 * self.batch_size)
        return shape

    def config_of(self, name: str) -> FinetuneConfig:
        """This scale's fine-tune ``name`` (a task kind's, or a plays task's such as "verse"): its own, else the
        registered task's config at its defaults."""
        return self.tasks[name] if name in self.tasks else TASKS[name].config()

    def task(self, name: str, seed: int, progress: bool = False) -> FinetuneConfig:
        """The config of fine-tune ``name`` for one seed: the seed draws its rows, train and test."""
        return replace(self.config_of(name), seed=seed, data_seed=seed, test_seed=seed, progress=progress)

    def overridden(self, values: dict, what: str) -> CompareSettings:
        """This scale with a config file's ``values``: its fields, and a ``tasks`` table of fine-tunes'
        fields by name (any registered kind, or a fine-tune the scale names: "verse"); unknown names and wrongly
        typed values are refused (``config.from_dict``)."""
        tasks, names = values.get("tasks", {}), {*TASKS, *self.tasks}
        if not isinstance(tasks, dict) or sorted(set(tasks) - names):
            raise UserError(f"{what}: tasks must be a table of {', '.join(sorted(names))}, got {tasks!r}")
        own = {key: value for key, value in values.items() if key != "tasks"}
        checked = from_dict(CompareSettings, own, what)
        checked.check_ladder()
        tuned: Tuning = {}
        for task, table in tasks.items():
            if not isinstance(table, dict):
                raise UserError(f"{what}: tasks.{task} must be a table of its settings, got {table!r}")
            done = from_dict(type(self.config_of(task)), table, f"{what}, tasks.{task}")
            tuned[task] = {key: getattr(done, key) for key in table}
        return self.retuned(
            checked.name if "name" in own else self.name,
            tuned,
            **{key: getattr(checked, key) for key in own if key != "name"},
        )

    def retuned(self, name: str, tasks: Tuning | None = None, **changes: Any) -> CompareSettings:
        """Another scale: ``changes`` to this one's fields, ``tasks`` to its fine-tunes' (config type or fine-tune name
        -> fields)."""
        tuned = dict(self.tasks)
        for config, fields in (tasks or {}).items():
            key = config if isinstance(config, str) else configured_by(config).kind
            tuned[key] = replace(self.config_of(key), **fields)
        return replace(self, name=name, tasks=tuned, **changes)


def matched_ffn_width(preset_name: str, d_model: int, layers: int) -> int:
    """The encoder-decoder's FFN width that gives ``layers // 2 + layers // 2`` layers (the decoder's
    with cross-attention, 4d^2 more each) the weights of ``layers`` decoder-only layers at the
    preset's own width: per layer attention 4d^2 and an FFN of k * d * width (k = 3 gated, 2 plain)."""
    own = preset(preset_name, d_model=d_model)
    k = 3 if own.gated_ffn else 2
    half = max(1, layers // 2)
    # layers * (4d^2 + k d f0) = half * (4d^2 + k d f) + half * (8d^2 + k d f)
    width = (layers * (4 * d_model + k * own.d_ff) - half * 12 * d_model) / (2 * half * k)
    return max(1, round(width))


DEFAULT = CompareSettings()
QUICK = DEFAULT.retuned(
    "quick",
    seconds=15.0,
    d_model=64,
    min_steps=40,
    ladder=(0.5, 1.0),  # a check of the ladder's plumbing, not a trend
    held_out_chars=600,
    held_out_blocks=10,
    fill_positions=100,
    ttft_repeats=10,
    tasks={
        ClassifyConfig: {"steps": 60, "train_per_label": 300, "test_per_label": 100},
        EmbedConfig: {"steps": 30, "train_pairs": 320, "test_queries": 150, "test_docs": 300},
        Seq2SeqConfig: {"steps": 30, "train_passages": 160, "test_passages": 60},
        VERSE: {"steps": 30, "train_passages": 120, "test_passages": 60},
        TagConfig: {"steps": 60, "train_windows": 320, "test_windows": 300},
    },
)

# One modern GPU for about 15 minutes (sized, not yet run on one: README, the main job). Byte-level
# BPE rather than WordPiece, whose normaliser turns the newline after a speaker's name into a space.
GPU = DEFAULT.retuned(
    "gpu",
    seconds=180.0,
    d_model=384,
    heads=6,
    layers=6,
    block_size=512,
    batch_size=64,
    tokenizer="bpe",
    vocab_size=4096,
    lr=1e-3,
    warmup=100,
    min_steps=1500,
    held_out_chars=8000,
    tasks={
        ClassifyConfig: {"steps": 800, "train_per_label": 4000, "test_per_label": 1000},
        EmbedConfig: {"steps": 400, "train_pairs": 4000},
        Seq2SeqConfig: {"steps": 600, "train_passages": 3200, "max_chars": 400, "max_target_len": 48},
        VERSE: {"steps": 600, "train_passages": 2400},  # 120 characters: ~40 byte-level BPE tokens, target as many
        TagConfig: {"steps": 400, "train_windows": 2000, "test_windows": 2000, "window_chars": 400},
    },
)

COMPARE_SCALES = {"default": DEFAULT, "quick": QUICK, "gpu": GPU}

# A few steps of everything, for the tests' plumbing checks (the ablations' smoke scale).
SMOKE = DEFAULT.retuned(
    "smoke",
    seconds=2.0,
    d_model=32,
    heads=2,
    layers=2,
    block_size=64,
    batch_size=8,
    min_steps=1,
    ladder=(1.0,),
    held_out_chars=200,
    held_out_blocks=2,
    fill_positions=10,
    ttft_repeats=2,
    tasks={
        ClassifyConfig: {"steps": 2, "train_per_label": 4, "test_per_label": 4},
        EmbedConfig: {"steps": 2, "train_pairs": 24, "test_queries": 24, "test_docs": 48},
        Seq2SeqConfig: {"steps": 2, "train_passages": 24, "test_passages": 24, "max_chars": 40, "max_target_len": 16},
        # 60 characters: the test plays' 458 verse sources that short (11 of 40 or less)
        VERSE: {"steps": 2, "train_passages": 24, "test_passages": 24, "max_chars": 60, "max_target_len": 16},
        TagConfig: {"steps": 2, "train_windows": 16, "test_windows": 8, "window_chars": 50},
        RerankConfig: {"steps": 2, "train_queries": 24, "test_queries": 8},
    },
)


@dataclass(frozen=True)
class Scale:
    """An ablation scale: a token budget per arm on one of compare's recipes (its block, its task
    slices and fine-tuning), so that an ablation and the main job measure the same things."""

    name: str
    tokens: int  # pretraining budget per arm (equal tokens; the wall-clock axis follows from it)
    recipe: CompareSettings
    evals: int  # validation points on each pretraining curve
    eval_batches: int
    held_out_chars: int  # text scored for next-token loss (shift-bug)

    def schedule(self, values: dict, budget: str) -> dict:
        """The budget ends every run; ``steps`` is only the schedule's length, set to twice what the
        token budget allows so that it never binds first (an encoder-decoder reads more than batch x
        block tokens a step), with warmup 10% of it (5% of the run)."""
        steps = 2 * -(-self.tokens // (values["batch_size"] * values["block_size"]))
        return {
            "steps": steps,
            "warmup": steps // 10,
            "eval_every": max(1, steps // (2 * self.evals)),
            "eval_batches": self.eval_batches,
            "budget": budget or f"tokens={self.tokens}",
        }


# The ablations' default recipe: compare's, but 400 tagging steps, not 150, 300 retrieval steps, not 100, and 1,200
# classification steps, not 400. At an ablation's 1.4 M tokens, 150 tagging steps left a d-64 MLM encoder below the
# verse rule; 400 put it above the rule and above the untrained body fine-tuned the same way, its control. 100
# retrieval steps left the encoder's recall within 3 seeds' noise of a random ranking on one axis; at 300 it clears
# that on both, while its lead over its control stays within noise. Classifying word order (pooling's task), a
# fine-tune sits at chance for 200-600 steps before it learns; at 400, [CLS] or mean pooling stayed there on some
# seeds; at 1,200 mean pooling learned on every seed, [CLS] on two of three (docs/results.md). compare's bodies
# read 2-4x those tokens.
ABLATION_DEFAULT = DEFAULT.retuned(
    "default", tasks={TagConfig: {"steps": 400}, EmbedConfig: {"steps": 300}, ClassifyConfig: {"steps": 1200}}
)

# Default: 1.4 M tokens per arm, about half what compare's 120 s per family read at d 64 in fp32 on AVX2, so
# that four arms over three seeds fit 30 minutes there (cross-objective, the longest, 15 min 41 s capped at
# AVX2; docs/results.md). gpu: sized for one GPU, not yet run.
SCALES = {
    "default": Scale(
        "default", tokens=1_400_000, recipe=ABLATION_DEFAULT, evals=8, eval_batches=8, held_out_chars=3000
    ),
    "quick": Scale("quick", tokens=200_000, recipe=QUICK, evals=4, eval_batches=4, held_out_chars=1000),
    "smoke": Scale("smoke", tokens=4096, recipe=SMOKE, evals=1, eval_batches=1, held_out_chars=200),
    "gpu": Scale("gpu", tokens=20_000_000, recipe=GPU, evals=8, eval_batches=16, held_out_chars=8000),
}


def pretrain_settings(scale: CompareSettings | Scale, arm: dict, seed: int, budget: str = "") -> dict:
    """Flat pretraining settings (``PretrainConfig.from_flat``) of ``arm`` (its family and whatever it
    changes) at ``scale``: the recipe's block, its objective for the family unless the arm names one,
    the encoder-decoder's equal-size shape, and the scale's schedule; ``budget`` replaces its own."""
    recipe = scale.recipe if isinstance(scale, Scale) else scale
    family = arm["family"]
    values = {**recipe.model(), "objective": recipe.objective(family), **recipe.shape(family), **arm}
    if values["objective"] == "denoise":  # the recipe's noise, whichever structure reads it
        values = {"permute_sentences": recipe.permute_sentences, **values}
    schedule = scale.schedule(values, budget) if isinstance(scale, Scale) else recipe.schedule(budget)
    return {**values, "seed": seed, **schedule}
