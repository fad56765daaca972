"""Documents -> one flat token stream -> random fixed-length windows (the nanoGPT data path).

Documents are tokenized once and joined with ``[EOS]`` between them. A batch is ``B`` windows at
random offsets drawn from a seeded ``torch.Generator``, so a run is reproducible and its data
position is just the generator's state (saved in checkpoints). Under data parallelism every process
draws the same global batch and keeps its own slice: the union over processes is exactly the batch
a single process would have drawn, whatever the number of processes.
"""

from __future__ import annotations

import hashlib
import io

import numpy as np
import torch

from maskwise.errors import UserError


class TokenStream:
    def __init__(self, ids: torch.Tensor, name: str = "data"):
        self.ids = ids  # (N,) int64
        self.name = name

    @classmethod
    def from_texts(cls, texts, tokenizer, name: str = "data", cache_key: str | None = None) -> TokenStream:
        """Tokenize ``texts`` into one stream. With ``cache_key`` (a fingerprint of the texts), the
        ids are cached on disk beside the tokenizers, keyed by it and by the tokenizer itself, so
        experiments that pretrain many models on one corpus tokenize it once."""
        path = None
        if cache_key is not None:
            from maskwise.data.tokenizers import _cache_root

            digest = hashlib.sha256(f"{cache_key}\n{tokenizer.backend.to_str()}".encode()).hexdigest()[:24]
            path = _cache_root(None) / "streams" / f"{digest}.npy"
            if path.is_file():
                try:
                    return cls(torch.from_numpy(np.load(path, allow_pickle=False)).long(), name)
                except (OSError, ValueError):
                    pass  # a damaged cache file is rebuilt below
        stream = cls._tokenize(texts, tokenizer, name)
        if path is not None:
            from maskwise.runs import atomic_write

            path.parent.mkdir(parents=True, exist_ok=True)
            buffer = io.BytesIO()
            np.save(buffer, stream.ids.numpy().astype(np.int32))
            atomic_write(path, buffer.getvalue())
        return stream

    @classmethod
    def _tokenize(cls, texts, tokenizer, name: str) -> TokenStream:
        eos = tokenizer.eos_id
        pieces = []
        for encoded in tokenizer.encode_batch(list(texts)):
            pieces.extend(encoded)
            if eos is not None:
                pieces.append(eos)
        return cls(torch.tensor(pieces, dtype=torch.long), name)

    def __len__(self) -> int:
        return len(self.ids)

    def check_length(self, length: int) -> None:
        if len(self.ids) < length + 1:
            raise UserError(f"{self.name} has {len(self.ids)} tokens, fewer than one block of {length + 1}; "
                            "use a smaller --block-size or more data")

    def windows(self, batch: int, length: int, generator: torch.Generator,
                rank: int = 0, world: int = 1) -> torch.Tensor:
        """(batch, length) windows; draws ``batch * world`` offsets and returns this rank's slice."""
        starts = torch.randint(len(self.ids) - length, (batch * world,), generator=generator)
        starts = starts[rank * batch:(rank + 1) * batch]
        index = starts[:, None] + torch.arange(length)  # (B, length)
        return self.ids[index]
