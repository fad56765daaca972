"""Documents -> one flat token stream -> random fixed-length windows (the nanoGPT data path).

Documents are tokenized once and joined with ``[EOS]`` between them, in memory or (a corpus of any
size) into a memory-mapped token file (``data.token_file``). A batch is ``B`` windows at
random offsets drawn from a seeded ``torch.Generator``, so a run is reproducible and its data
position is just the generator's state (saved in checkpoints). Under data parallelism every process
draws the same global batch and keeps its own slice: the union over processes is exactly the batch
a single process would have drawn, whatever the number of processes.
"""

from __future__ import annotations

import numpy as np
import torch

from maskwise.data import token_file
from maskwise.data.tokenizers import cache_root
from maskwise.errors import UserError


class TokenStream:
    def __init__(self, ids: torch.Tensor | np.ndarray, name: str = "data"):
        self.ids = ids  # (N,): an int64 tensor, or a read-only memmap of a token file (uint8/16/32)
        self.name = name

    @classmethod
    def from_texts(
        cls, texts, tokenizer, name: str = "data", cache_key: str | None = None, progress: bool = False
    ) -> TokenStream:
        """Tokenize ``texts`` into one stream. With ``cache_key`` (a fingerprint of the texts), the
        ids stream into a memory-mapped token file beside the tokenizers, keyed by it and by the
        tokenizer itself, so a corpus larger than memory trains and experiments that pretrain many
        models on one corpus tokenize it once; ``progress`` shows a bar on a terminal meanwhile."""
        if cache_key is None:
            return cls(torch.tensor(token_file.encode_documents(texts, tokenizer), dtype=torch.long), name)
        return cls(token_file.cached_tokens(cache_key, texts, tokenizer, cache_root(None), progress), name)

    def __len__(self) -> int:
        return len(self.ids)

    def check_length(self, length: int) -> None:
        if len(self.ids) < length + 1:
            raise UserError(
                f"{self.name} has {len(self.ids)} tokens, fewer than one block of {length + 1}; "
                "use a smaller --block-size or more data"
            )

    def windows(
        self, batch: int, length: int, generator: torch.Generator, rank: int = 0, world: int = 1
    ) -> torch.Tensor:
        """(batch, length) windows; draws ``batch * world`` offsets and returns this rank's slice."""
        starts = torch.randint(len(self.ids) - length, (batch * world,), generator=generator)
        starts = starts[rank * batch : (rank + 1) * batch]
        index = starts[:, None] + torch.arange(length)  # (B, length)
        if isinstance(self.ids, torch.Tensor):
            return self.ids[index]
        return torch.from_numpy(self.ids[index.numpy()].astype(np.int64))  # gathers only these windows
