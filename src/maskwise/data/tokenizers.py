"""Tokenizers: characters, WordPiece, byte-level BPE, or any ``tokenizer.json``.

Every tokenizer is an HF ``tokenizers.Tokenizer`` underneath, so every one saves as a
``tokenizer.json`` that ``transformers.PreTrainedTokenizerFast(tokenizer_file=...)`` loads, and a
model trained here can be handed to the HF ecosystem with its tokenizer.

The tokenizers this module trains share one id layout, which the objectives rely on: the seven
special tokens take ids 0..6 in ``SPECIAL_TOKENS`` order, then the T5-style sentinels
``<extra_id_0>`` .. ``<extra_id_99>`` take ids 7..106, then the learned vocabulary. ``encode`` never
adds special tokens: each objective frames its own inputs ([CLS] ... [SEP] for BERT, [BOS] for GPT,
sentinels for T5), and framing in two places would double it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import tokenizers
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers

from maskwise.data.corpus import Corpus
from maskwise.errors import UserError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[BOS]", "[EOS]")
N_SENTINELS = 100
DEFAULT_VOCAB_SIZE = 8192
TRAINED_KINDS = ("char", "wordpiece", "bpe")
# Room a learned vocabulary needs beyond the reserved tokens: byte-level BPE cannot even hold its
# 256-byte alphabet in less, and a WordPiece vocabulary that small is nearly all single characters.
MIN_LEARNED_TOKENS = 256
# Text WordPiece/BPE training reads at most (spread over the corpus): enough for stable merges on
# any corpus, and a bounded memory for the trainer's word counts whatever the corpus's size.
TRAINING_SAMPLE_CHARS = 32_000_000


def sentinel_token(i: int) -> str:
    """The i-th span-corruption sentinel, spelled as T5 spells it so that T5 checkpoints map over."""
    return f"<extra_id_{i}>"


def _reserved_tokens() -> list[str]:
    return [*SPECIAL_TOKENS, *(sentinel_token(i) for i in range(N_SENTINELS))]


# Where a tokenizer.json from elsewhere keeps each role: ours first, then BERT, RoBERTa/BART, T5
# and GPT-2 spellings. A role none of them fills is None.
_ROLE_SPELLINGS = {
    "pad": ("[PAD]", "<pad>"),
    "unk": ("[UNK]", "<unk>"),
    "cls": ("[CLS]", "<s>", "<cls>"),
    "sep": ("[SEP]", "</s>", "<sep>"),
    "mask": ("[MASK]", "<mask>"),
    "bos": ("[BOS]", "<s>", "<bos>", "<|endoftext|>"),
    "eos": ("[EOS]", "</s>", "<eos>", "<|endoftext|>"),
}


class Tokenizer:
    """An HF ``tokenizers.Tokenizer`` plus the ids the objectives need, looked up once.

    ``kind`` records how it was made: "char", "wordpiece", "bpe", or "file" for a tokenizer.json
    loaded from elsewhere. Text that spells a special token ("[MASK]" in a user's file) is encoded as
    ordinary text, so special ids appear only where an objective puts them. (``PreTrainedTokenizerFast``
    does split such text into the special token; the two agree on every other text.)
    """

    def __init__(self, hf_tokenizer: tokenizers.Tokenizer, kind: str):
        self.backend = hf_tokenizer
        self.backend.encode_special_tokens = True
        self.kind = kind
        self.pad_id = self._role_id("pad")
        self.unk_id = self._role_id("unk")
        self.cls_id = self._role_id("cls")
        self.sep_id = self._role_id("sep")
        self.mask_id = self._role_id("mask")
        self.bos_id = self._role_id("bos")
        self.eos_id = self._role_id("eos")
        sentinel_ids = []
        for i in range(N_SENTINELS):
            sentinel_id = self.token_to_id(sentinel_token(i))
            if sentinel_id is None:
                break
            sentinel_ids.append(sentinel_id)
        self.sentinel_ids: tuple[int, ...] = tuple(sentinel_ids)
        role_ids = (self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id, self.bos_id, self.eos_id)
        flagged_special = (i for i, token in self.backend.get_added_tokens_decoder().items() if token.special)
        self.special_ids: frozenset[int] = frozenset(
            {i for i in role_ids if i is not None} | set(self.sentinel_ids) | set(flagged_special)
        )
        # Whether its own framing closes a text with [SEP] (an HF BERT's ``[CLS] $A [SEP]``): what a body imported with
        # it was pretrained to read. maskwise's tokenizers frame nothing (each objective frames its own inputs).
        framing = self.backend.encode("a", add_special_tokens=True)
        framed = [i for i, real in zip(framing.ids, framing.attention_mask) if real]  # a file's own padding left out
        self.closes_with_sep = self.sep_id is not None and len(framed) > 1 and framed[-1] == self.sep_id

    def _role_id(self, role: str) -> int | None:
        for spelling in _ROLE_SPELLINGS[role]:
            if (token_id := self.token_to_id(spelling)) is not None:
                return token_id
        return None

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials and sentinels included: the size of the embedding table."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids and each id's (start, end) characters in ``text``: how a per-word label finds its token."""
        encoding = self.backend.encode(text, add_special_tokens=False)
        return encoding.ids, encoding.offsets

    def encode_batch(self, texts: Iterable[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def encode_batch_offsets(self, texts: Iterable[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """``encode_offsets`` of each text, in one call."""
        return [(e.ids, e.offsets) for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    @functools.cached_property
    def fingerprint(self) -> str:
        """A digest of its whole definition (vocabulary, normaliser, pre-tokenizer, truncation): two tokenizers with
        one fingerprint give every text the same ids, so what one encoded another may reuse (``tasks.reading``)."""
        return hashlib.sha256(self.backend.to_str().encode()).hexdigest()

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        """Text for ``ids`` (a list, or a tensor row). Exact inverse of ``encode`` for "char" on
        characters it has seen and for "bpe" on any text; WordPiece normalises whitespace."""
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, i: int) -> str | None:
        return self.backend.id_to_token(i)

    def save(self, path: str | Path) -> None:
        """Write ``tokenizer.json`` to ``path`` (the file's path), atomically."""
        _save_atomically(self.backend, Path(path).expanduser())

    @classmethod
    def load(cls, path: str | Path, kind: str = "file") -> Tokenizer:
        """Load a tokenizer.json, or the one inside the folder ``path``."""
        path = Path(path).expanduser()
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise UserError(
                f"tokenizer: no such file {file} (expected one of {', '.join(TRAINED_KINDS)} or a tokenizer.json)"
            )
        try:
            backend = tokenizers.Tokenizer.from_file(str(file))
        except Exception as error:  # the Rust side raises bare Exception for every kind of failure
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise UserError(f"tokenizer: cannot load {file}: {reason}") from None
        return cls(backend, kind)


def build_tokenizer(
    kind: str,
    corpus: Corpus,
    vocab_size: int | None = None,
    cache_dir: str | Path | None = None,
) -> Tokenizer:
    """A tokenizer of ``kind`` ("char", "wordpiece", "bpe") for ``corpus``, or one loaded from the
    tokenizer.json (or folder) that ``kind`` names.

    Trained tokenizers are cached under ``cache_dir`` (default ``$MASKWISE_CACHE`` or
    ``~/.cache/maskwise``), keyed by kind, vocabulary size and the corpus fingerprint, so every run
    on the same text gets the same ids without retraining. ``vocab_size`` (default 8192) is ignored
    for "char", whose vocabulary is the corpus's characters.
    """
    if kind not in TRAINED_KINDS:
        return Tokenizer.load(kind)
    vocab_size = DEFAULT_VOCAB_SIZE if vocab_size is None else vocab_size
    if kind == "char":
        size_label = "all"
    else:
        minimum = len(_reserved_tokens()) + MIN_LEARNED_TOKENS
        if vocab_size < minimum:
            raise UserError(f"tokenizer: vocab_size {vocab_size} is too small for {kind}; use at least {minimum}")
        size_label = str(vocab_size)
    cache_file = cache_root(cache_dir) / "tokenizers" / f"{kind}-{size_label}-{corpus.fingerprint[:16]}.json"
    if cache_file.is_file():
        return Tokenizer.load(cache_file, kind)
    backend = _train_char(corpus) if kind == "char" else _train_subword(kind, corpus, vocab_size)
    _save_atomically(backend, cache_file)
    return Tokenizer(backend, kind)


def cache_root(cache_dir: str | Path | None) -> Path:
    """Where derived artefacts (tokenizers, token files) live: ``cache_dir``, else ``$MASKWISE_CACHE``
    or ``~/.cache/maskwise``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    return Path(os.environ.get("MASKWISE_CACHE") or Path.home() / ".cache" / "maskwise").expanduser()


def _train_char(corpus: Corpus) -> tokenizers.Tokenizer:
    """One id per character of the train and val text (val too, so that validation never meets
    [UNK]); unseen characters become [UNK]. Reads every document once, one at a time: a sample
    would miss rare characters, and a set of characters is small whatever the corpus.

    The model is a WordLevel lookup fed by a pre-tokenizer that isolates every code point, newlines
    included; no normaliser touches the text and the Fuse decoder joins tokens without spaces, which
    is what makes decode(encode(text)) == text.
    """
    reserved = _reserved_tokens()
    seen: set[str] = set()
    for document in corpus.iter_all():
        seen.update(document)
    characters = sorted(seen)
    vocabulary = {token: i for i, token in enumerate([*reserved, *characters])}
    backend = tokenizers.Tokenizer(models.WordLevel(vocabulary, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(reserved)  # already in the vocabulary, so their ids do not move
    return backend


def _train_subword(kind: str, corpus: Corpus, vocab_size: int) -> tokenizers.Tokenizer:
    """WordPiece (BERT) or byte-level BPE (GPT-2), trained on the train documents only: all of them
    up to ``TRAINING_SAMPLE_CHARS`` of text, an even sample of them beyond (``Corpus.sample_train``).

    WordPiece uses BERT's normaliser without lowercasing or accent stripping: case carries meaning
    here (speaker names are in capitals) and a cased vocabulary loses nothing else. Byte-level BPE
    starts from all 256 bytes, so it never needs [UNK] and decodes every text exactly.
    """
    reserved = _reserved_tokens()
    trainer: trainers.Trainer
    if kind == "wordpiece":
        backend = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
        backend.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False
        )
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        backend.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=reserved, show_progress=False)
    else:
        backend = tokenizers.Tokenizer(models.BPE())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=reserved,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    backend.train_from_iterator(corpus.sample_train(TRAINING_SAMPLE_CHARS), trainer=trainer)
    return backend


def _save_atomically(backend: tokenizers.Tokenizer, path: Path) -> None:
    """Write via a temporary file and a rename, so that a reader (another run sharing the cache)
    never sees half a file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(descriptor)
        try:
            backend.save(temporary)
            os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.remove(temporary)
    except OSError as error:
        raise UserError(f"tokenizer: cannot write {path}: {error.strerror}") from None
