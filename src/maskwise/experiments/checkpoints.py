"""The checkpoints ``compare --model`` measures: ``--model NAME=PATH[,family=F][,body=B]`` read and checked, a hub
name found in the local HF cache (offline), each folder opened before anything runs, and the experiment folder whose
"runs" are those folders, opened as they are (nothing is pretrained). ``ablate reranker --model`` opens its folders
and takes its learning rates here too."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from maskwise import runs
from maskwise.data.user_tasks import RESERVED
from maskwise.errors import UserError
from maskwise.experiments.runner import Experiment
from maskwise.families import FAMILIES, Family
from maskwise.interop import folders
from maskwise.interop.hf_keys import architectures
from maskwise.model.accounting import parameter_breakdown
from maskwise.runtime import Runtime
from maskwise.tasks.finetune import BODIES, FINE_TUNING, C
from maskwise.tasks.reading import config_of

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a column, a file name and a step name at once


@dataclass(frozen=True)
class ModelSpec:
    """One ``--model NAME=PATH[,family=F][,body=B]`` (or a config file's ``[[model]]`` table), not yet opened."""

    name: str
    path: str
    family: str | None = None  # None: the model's own
    body: str | None = None  # "pretrained" or "scratch"; None: by the folder (an HF folder pretrained, a run scratch)

    def flag(self) -> str:
        return (
            self.name
            + "="
            + ",".join(
                [
                    self.path,
                    *(f"{key}={getattr(self, key)}" for key in ("family", "body") if getattr(self, key) is not None),
                ]
            )
        )


def checked_model(values: dict, where: str) -> ModelSpec:
    """A model's keys (name, path, family, body) checked: one line naming ``where`` for any fault."""
    unknown = sorted(set(values) - {"name", "path", "family", "body"})
    if unknown:
        raise UserError(f"{where}: unknown key(s) {', '.join(unknown)} (known: name, path, family, body)")
    if not all(isinstance(values.get(key), str) and values[key] for key in ("name", "path")):
        raise UserError(f"{where}: needs a name and a path, as NAME=PATH")
    if not NAME.fullmatch(values["name"]):
        raise UserError(f"{where}: name {values['name']!r} must be letters, digits, '.', '_' or '-'")
    if values["name"] in RESERVED:
        raise UserError(f"{where}: the name {values['name']!r} is one of compare's own steps; choose another")
    if values.get("family") is not None and values["family"] not in FAMILIES:
        raise UserError(f"{where}: family must be one of {', '.join(FAMILIES)}, got {values['family']!r}")
    if values.get("body") is not None and values["body"] not in BODIES:
        raise UserError(f"{where}: body must be one of {', '.join(BODIES)}, got {values['body']!r}")
    return ModelSpec(values["name"], values["path"], values.get("family"), values.get("body"))


def parse_model(value: str) -> ModelSpec:
    """``NAME=PATH[,family=F][,body=B]`` as a ``ModelSpec``."""
    name, equals, rest = value.partition("=")
    path, *options = rest.split(",")
    values: dict = {"name": name, "path": path} if equals else {}
    for option in options:
        key, equals, setting = option.partition("=")
        if not equals:
            raise UserError(f"--model {value}: {option!r} is not KEY=VALUE (family=, body=)")
        values[key] = setting
    return checked_model(values, f"--model {value}")


def model_tables(tables, path: str) -> list[ModelSpec]:
    """A config file's ``[[model]]`` tables (the ``--model`` flag's keys: name, path, family, body)."""
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise UserError(f"compare config {path}: model must be an array of tables ([[model]]), got {tables!r}")
    return [checked_model(table, f"compare config {path}, model {i + 1}") for i, table in enumerate(tables)]


def resolve_folder(spec: ModelSpec) -> Path:
    """The folder behind a model's path (``folders.model_folder``), its one line naming the model."""
    try:
        return folders.model_folder(spec.path)
    except UserError as error:
        raise UserError(f"--model {spec.name}: {error}") from None


@dataclass(frozen=True)
class Candidate:
    """A model given to compare, opened and checked: what its column needs without holding its weights."""

    name: str
    folder: Path
    family: str  # the family the claims count it as: its model's, or the one ``family=`` gave
    kind: Family  # how its model reads (``ModelConfig.kind``)
    hf: bool  # an HF folder (else a maskwise run folder)
    scratch: bool  # its body was trained here from scratch: fine-tuned at a scratch body's batch and rates
    objective: str  # how its pretraining asked for a blank (an encoder-decoder's: span for T5, denoise for BART)
    no_lm_head: str | None  # the report's cell for the rows that need a vocabulary head it lacks; None: it has one
    parameters: dict  # ``parameter_breakdown`` of its model
    context: int  # the tokens its (encoder) stack reads

    def fine_tuning(self, cfg: C, rows: int) -> C:
        """The one rule (``finetune.FINE_TUNING``) for this model's body over the task's ``rows`` training rows."""
        return FINE_TUNING.applied(cfg, rows, pretrained=not self.scratch)

    @property
    def origin(self) -> str:
        return "pretrained here (a scratch body's batch and rates)" if self.scratch else "pretrained elsewhere"

    def described(self) -> dict:
        return {
            "name": self.name,
            "folder": str(self.folder),
            "family": self.family,
            "reads_as": self.kind.name,
            "hf": self.hf,
            "scratch": self.scratch,
        }


def lm_head_of(folder: Path, config: dict) -> str | None:
    """Why an HF folder's class has no vocabulary head (a base model such as ``BertModel``, a task class, an RTD
    discriminator: its tied projection onto the vocabulary was never trained to predict), or None."""
    if "model_type" not in config:
        return None  # a maskwise run: its pretraining objective trained its head
    name = (config.get("architectures") or [""])[0]
    arch = architectures().get(name)
    if arch is None or arch.base_prefix or arch.head in ("task", "rtd"):
        return f"cannot: no LM head (an HF {name or 'base model'} folder)"
    return None


def open_model(spec: ModelSpec) -> Candidate:
    """``spec``'s folder opened as compare will open it (``interop.folders.load``) and checked, or one line."""
    folder = resolve_folder(spec)
    try:
        model, tokenizer = folders.load(folder)
    except UserError as error:
        raise UserError(f"--model {spec.name}: {error}") from None
    if tokenizer is None:
        raise UserError(f"--model {spec.name}: {folder} has no tokenizer.json, so no task can be read by it")
    if not hasattr(model, "read"):
        raise UserError(f"--model {spec.name}: {folder} holds no body that reads a text (an ELECTRA discriminator)")
    config = runs.read_json(folder / runs.CONFIG_FILE)
    layout = config_of(model)
    hf, kind = "model_type" in config, layout.kind
    objective = (
        ("denoise" if config["model_type"] == "bart" else kind.objective)
        if hf
        else config.get("objective", kind.objective)
    )
    return Candidate(
        spec.name,
        folder,
        spec.family or kind.name,
        kind,
        hf,
        spec.body == "scratch" if spec.body else not hf,
        objective,
        lm_head_of(folder, config),
        parameter_breakdown(model),
        layout.max_seq_len,
    )


def open_models(specs: Sequence[ModelSpec]) -> tuple[Candidate, ...]:
    """Every model opened and checked, names distinct: all before anything is written or run."""
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"--model names {', '.join(twice)} more than once; each model needs its own name")
    return tuple(open_model(spec) for spec in specs)


def column_of(name: str) -> str:
    """The column of run ``name``: a column's run for a seed is named ``<column>-seed<N>`` (``arms.pretrain_arms``,
    and a model given)."""
    return name.rsplit("-seed", 1)[0]


class ModelsExperiment(Experiment):
    """compare's experiment folder with the given models in place of pretraining runs: a column's run for a seed
    (``<name>-seed<N>``) is its model's folder, opened as it is."""

    def __init__(self, out: str | Path, overwrite: bool, runtime: Runtime | None, models: Sequence[Candidate]):
        super().__init__(out, overwrite, runtime)
        self.models = {c.name: c for c in models}

    def model_of(self, name: str) -> Candidate:
        """The model given for run ``name``'s column."""
        return self.models[column_of(name)]

    def run_dir(self, name: str) -> Path:
        return self.model_of(name).folder

    def load(self, name: str) -> runs.Run:
        model = self.model_of(name)
        body, tokenizer = folders.load(model.folder)
        body.to(self.runtime.torch_device)
        return runs.Run(model.folder, body, tokenizer, {"objective": model.objective})

    def kind(self, name: str) -> Family:
        return self.model_of(name).kind
