"""Ablation seq2seq: a decoder-only model vs an encoder-decoder of equal size on passage -> speakers, or on the
user's seq2seq task (``ablate seq2seq --task NAME=seq2seq:PATH``)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from maskwise.experiments.arms import AXES, TOKENS, Arm, Setup, StudyOptions
from maskwise.experiments.framework import (
    MIN_BUCKET,
    Measured,
    Measures,
    Rule,
    Study,
    Table,
    common_buckets,
    key,
    moved,
    on_both_axes,
    table_row,
    task_setting,
)
from maskwise.experiments.serving import timed_calls
from maskwise.experiments.verdict import FALSIFIED, HELD, INCONCLUSIVE, compare
from maskwise.objectives.span import decoder_start_id
from maskwise.recipes import Scale
from maskwise.tasks.generate import GenerationConfig, generate
from maskwise.tasks.metrics import bucket_label
from maskwise.tasks.record import Fields
from maskwise.tasks.run import run_task
from maskwise.tasks.seq2seq import source_ids
from maskwise.tasks.seq2seq_scores import BucketScores, Seq2SeqRecord, Seq2SeqScores

# Both at the scale's block and by the same denoising (the decoder reads noise [SEP] text, the layout it
# fine-tunes in), so structure alone differs; the encoder-decoder splits its layers and narrows its FFN
# to the decoder's parameter count (recipes.CompareSettings.shape).
DECODER = Arm("decoder", "decoder-only", {"family": "decoder", "objective": "denoise"})
ENCODER_DECODER = Arm("encdec", "encoder-decoder", {"family": "encoder-decoder", "objective": "denoise"})
F1 = "target F1"  # the plays: F1 over the set of speakers; a user's task: token F1 (``target_f1``)
F1_BUCKET = "target F1, sources of "
TTFT_BUCKET = "time to first token (ms), sources of "
COST_BATCH, COST_TOKENS, COST_REPEATS = 8, 32, 3

RULE = (
    "Compare the encoder-decoder (a) with the decoder-only model (b) in the shortest and the longest "
    "source-length bucket (at least 10 test passages): target F1, and time to first token at a "
    "fixed batch, paired by seed. Falsified if at the longest sources the decoder-only model is ahead "
    "on F1 or faster to the first token (a tie is no evidence either way: two models that both write "
    "nothing correct do not contradict the prediction). Held if F1 is within noise on the shortest "
    "sources, and at the longest the encoder-decoder is ahead on F1 and faster to the first token. "
    "Otherwise inconclusive. Applied at equal tokens and at equal wall-clock; the verdict is the "
    "common outcome, inconclusive if they differ."
)


@dataclass(frozen=True)
class GenerationCost(Fields):
    """What generating costs on one source-length bucket's batch (``generation_cost``)."""

    ttft_ms: float  # time to first token: prefill plus one decoding step
    decode_tokens_per_s: float
    source_tokens: float  # the batch's mean prompt length


@dataclass(frozen=True)
class Costs(Fields):
    """A run's generation costs by source-length bucket, stored beside its record (``measure``)."""

    cost: dict[str, GenerationCost]


def generation_cost(
    model, tokenizer, examples, max_target_len: int, source_edges: Sequence[int]
) -> dict[str, GenerationCost]:
    """Per source-length bucket with at least ``COST_BATCH`` passages: time to first token (prefill
    plus one decoding step) for a batch of ``COST_BATCH``, and decoding tokens/s after it (from
    ``COST_TOKENS`` forced new tokens: no [EOS], so every row runs the same length). Medians of
    ``COST_REPEATS`` runs, KV cache on."""

    groups: dict[str, list] = {}
    for example in examples:
        groups.setdefault(bucket_label(source_edges, len(example.source)), []).append(example)
    start, device = decoder_start_id(tokenizer), next(model.parameters()).device
    result = {}
    for label in dict.fromkeys(bucket_label(source_edges, edge) for edge in source_edges):
        if len(groups.get(label, ())) < COST_BATCH:
            continue
        prompts = [source_ids(model, tokenizer, e.source, max_target_len) for e in groups[label][:COST_BATCH]]

        def run(tokens: int, prompts=prompts):
            generate(model, prompts, GenerationConfig(max_new_tokens=tokens), None, tokenizer.pad_id, start)

        first = statistics.median(timed_calls(lambda: run(1), COST_REPEATS, device, warm_up=0))
        full = statistics.median(timed_calls(lambda: run(COST_TOKENS), COST_REPEATS, device, warm_up=0))
        result[label] = GenerationCost(
            ttft_ms=1000 * first,
            decode_tokens_per_s=COST_BATCH * (COST_TOKENS - 1) / max(full - first, 1e-9),
            source_tokens=statistics.fmean(len(p) for p in prompts),
        )
    return result


def by_token_f1(setup: Setup) -> bool:
    """Whether the F1 the rule reads is token F1 (SQuAD's bag-of-words overlap: a user's seq2seq task), else the F1
    over the set of speakers (the plays: their order does not matter), as compare reads each."""
    return setup.plan is not None and setup.plan.task_of("seq2seq") is not None


def target_f1(scores: Seq2SeqScores | BucketScores, token: bool) -> float:
    """The target F1 of a record, a baseline or a source-length bucket: token F1 where ``token`` (``by_token_f1``)."""
    return scores.token_f1 if token else scores.items_f1


@dataclass(frozen=True)
class Bucket:
    """The arms' numbers on the sources of one length bucket (characters), per seed."""

    label: str  # "450-599"
    arms: dict[str, list[float]]  # arm label -> per seed


@dataclass(frozen=True)
class StructureAxis:
    """What the rule reads at one axis: target F1 overall, on the shortest and the longest sources (one bucket where
    there is one; None where no bucket has ``MIN_BUCKET`` passages in every run), and the time to first token on
    the longest."""

    f1: dict[str, list[float]]
    shortest: Bucket | None
    longest: Bucket | None
    first_token_longest: Bucket | None

    def to_json(self, axis: str) -> dict[str, dict[str, list[float]]]:
        metrics = {key(F1, axis): self.f1}
        for bucket in (self.shortest, self.longest):
            if bucket is not None:
                metrics[key(f"{F1_BUCKET}{bucket.label} chars", axis)] = bucket.arms
        if self.first_token_longest is not None:
            metrics[key(f"{TTFT_BUCKET}{self.first_token_longest.label} chars", axis)] = self.first_token_longest.arms
        return metrics


@dataclass(frozen=True)
class StructureMeasures(Measures):
    at: dict[str, StructureAxis]  # axis ->

    def to_json(self) -> dict[str, dict[str, list[float]]]:
        return {name: groups for axis, measured in self.at.items() for name, groups in measured.to_json(axis).items()}


class DecoderOnlyVsEncoderDecoder(Study[StructureMeasures]):
    """A decoder-only model vs an encoder-decoder of equal size on reading then writing."""

    reads = ("seq2seq",)  # a user's seq2seq rows replace the plays' passage -> speakers (ablate --task)
    about = "decoder-only vs encoder-decoder at equal size on passage -> speakers"
    title = "Ablation seq2seq: decoder-only vs encoder-decoder for passage -> speakers"
    rules = (
        Rule(
            (
                "At the same parameter count, a decoder-only model with the source in its prompt and an "
                "encoder-decoder extract the speakers of a passage equally well from short sources; the "
                "encoder-decoder pulls ahead as sources grow, with a lower prefill cost."
            ),
            RULE,
        ),
    )
    step = "seq2seq"
    # at the scale's 1.4 M tokens neither structure had learned to copy from its source (copy probe 0.93 and
    # 0.98); at twice that one encoder-decoder seed of three had not, nor the decoder on its clock (docs/results.md)
    tokens_factor = 3.0

    def arms(self, options: StudyOptions) -> tuple[Arm, ...]:
        return ENCODER_DECODER, DECODER

    def measure(self, setup: Setup, arm: Arm, name: str, seed: int) -> dict:
        run = setup.exp.load(name)
        cfg, data = task_setting(setup, "seq2seq", seed)
        result = run_task(cfg, run.model, run.tokenizer, setup.exp.runtime, data=data, label=name)
        cost = generation_cost(result.model, run.tokenizer, result.test, cfg.max_target_len, cfg.source_edges)
        return {**result.record.to_json(), **Costs(cost).to_json()}

    def tabulate(self, m: Measured) -> Table[StructureMeasures]:
        buckets, token = common_buckets(m, "by_source_chars"), by_token_f1(m.setup)
        at, rows = {}, []
        for axis in AXES:
            stored = {arm.label: m.measured[axis][arm.key] for arm in m.arms}
            records = {label: [Seq2SeqRecord.from_json(r) for r in rs] for label, rs in stored.items()}
            costs = {label: [Costs.from_json(r).cost for r in rs] for label, rs in stored.items()}
            f1 = {label: [target_f1(r, token) for r in rs] for label, rs in records.items()}
            rows += [
                table_row(F1, axis, f1, True),
                table_row(
                    "exact match", axis, {label: [r.exact_match for r in rs] for label, rs in records.items()}, True
                ),
            ]
            by_f1, by_first_token = [], []
            for bucket in buckets:
                groups = {
                    label: [target_f1(r.by_source_chars[bucket], token) for r in rs] for label, rs in records.items()
                }
                by_f1.append(Bucket(bucket, groups))
                rows.append(table_row(f"{F1_BUCKET}{bucket} chars", axis, groups, True))
            for bucket in buckets:
                groups = {label: [c[bucket].ttft_ms for c in cs] for label, cs in costs.items()}
                by_first_token.append(Bucket(bucket, groups))
                rows.append(table_row(f"{TTFT_BUCKET}{bucket} chars", axis, groups, False, 1))
            for bucket in buckets:
                groups = {label: [c[bucket].decode_tokens_per_s for c in cs] for label, cs in costs.items()}
                rows.append(
                    table_row(f"decode tokens/s (batch {COST_BATCH}), sources of {bucket} chars", axis, groups, True, 0)
                )
            # the rule reads the shortest and the longest
            at[axis] = StructureAxis(
                f1,
                by_f1[0] if by_f1 else None,
                by_f1[-1] if by_f1 else None,
                by_first_token[-1] if by_first_token else None,
            )
        return Table(StructureMeasures(at), rows)

    def judge(self, rule: Rule, measures: StructureMeasures, m: Measured) -> tuple[str, str]:
        ed, do = ENCODER_DECODER.label, DECODER.label

        def one_axis(axis: str) -> tuple[str, str]:
            at = measures.at[axis]
            if at.shortest is None or at.longest is None or at.first_token_longest is None:
                return INCONCLUSIVE, f"no source-length bucket has {MIN_BUCKET} test passages"
            short = compare(at.shortest.arms[ed], at.shortest.arms[do])
            long = compare(at.longest.arms[ed], at.longest.arms[do])
            cost = compare(at.first_token_longest.arms[ed], at.first_token_longest.arms[do], higher_is_better=False)
            text = (
                f"shortest sources F1 {short.describe(ed, do)}; longest sources F1 {long.describe(ed, do)}; "
                f"longest sources time to first token {cost.describe(ed, do, 1)}"
            )
            if long.winner == "b" or cost.winner == "b":
                return FALSIFIED, text
            if short.winner == "tie" and long.winner == "a" and cost.winner == "a":
                return HELD, text
            return INCONCLUSIVE, text

        return on_both_axes(one_axis)

    def summary(self, m: Measured, measures: StructureMeasures) -> str:
        encdec = ENCODER_DECODER
        encdec_params, decoder_params = (m.parameters[arm.label]["total"] for arm in (encdec, DECODER))
        at = measures.at[TOKENS]
        baseline = Seq2SeqRecord.from_json(m.first(encdec)).baseline
        if at.longest is not None and at.first_token_longest is not None:
            long, ttft = at.longest.arms, at.first_token_longest.arms
            longest = (
                f", on sources of {at.longest.label} characters it {moved(long[encdec.label], long[DECODER.label])}, "
                f"while the time to first token there {moved(ttft[encdec.label], ttft[DECODER.label], 1)} ms"
            )
        else:
            longest = " (no length bucket had enough passages to break it down)"
        return (
            f"We replaced the encoder-decoder ({encdec_params:,} parameters) with a decoder-only model reading the "
            f"source in its prompt ({decoder_params:,} parameters): target F1 "
            f"{moved(at.f1[encdec.label], at.f1[DECODER.label])} at equal tokens{longest} ({baseline.name} scores "
            f"F1 {target_f1(baseline, by_token_f1(m.setup)):.3f})."
        )

    def notes(self, m: Measured) -> list[str]:
        recipe, shape = m.setup.recipe, m.setup.recipe.shape("encoder-decoder")
        encdec_params, decoder_params = (m.parameters[arm.label]["total"] for arm in (ENCODER_DECODER, DECODER))
        assert isinstance(m.setup.scale, Scale)  # an ablation's scale
        return [
            (
                f"Equal size: {recipe.layers} causal layers vs {shape['layers']} + {shape['decoder_layers']} layers "
                f"whose FFN width ({shape['d_ff']}) makes the parameter sums match ({decoder_params:,} vs "
                f"{encdec_params:,}); both pretrain on blocks of {recipe.block_size} tokens by the same denoising "
                f"(sentence permutation {recipe.permute_sentences:g}), the decoder-only model reading 'noised text "
                "[SEP] text' with the loss on the text, the layout it is fine-tuned in."
            ),
            (
                f"Tokens seen count what a model reads, its noised inputs plus its targets: {m.setup.scale.tokens:,} "
                f"an arm, {self.tokens_factor:g}x the scale's, for copying from the source to emerge in both."
            ),
            (
                "Fine-tuning: the same steps, batch and learning rate; the decoder-only model reads 'source [SEP] "
                "target' with the loss on the target only. Greedy decoding for quality. Target F1: on the plays' "
                "passage -> speakers the F1 over the set of speakers written, on a user's seq2seq task (ablate --task) "
                "token F1 of the written target against the reference."
            ),
            (
                f"Cost at a fixed batch of {COST_BATCH} passages from one length bucket, KV cache on, medians of "
                f"{COST_REPEATS}: time to first token = prefill + one step; decode tokens/s over {COST_TOKENS - 1} "
                "more forced tokens. Measured on a shared machine: compare within a row, not across reports."
            ),
            ("The validation losses on the plots are per token of different objectives: compare shapes, not levels."),
        ]

    def meaning(self, m: Measured) -> dict[str, tuple[bool | None, tuple[str, float] | None]]:
        """Target F1 against the encoder-decoder's first trivial baseline, and the buckets' directions."""
        baseline = Seq2SeqRecord.from_json(m.first(ENCODER_DECODER)).baseline
        return {
            F1: (True, (baseline.name, target_f1(baseline, by_token_f1(m.setup)))),
            F1_BUCKET: (True, None),
            TTFT_BUCKET: (False, None),
        }


ABLATION = DecoderOnlyVsEncoderDecoder()
