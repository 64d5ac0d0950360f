"""The language-model demo of Lightning's examples (`lightning.pytorch.demos.transformer`), without its dataset:
WikiText-2 is downloaded from the internet, so it is refused; feed `LightningTransformer` your own token batches
`(inputs, targets)` of shape (batch, sequence)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from stages.module import LightningModule
from statemachine._exports import lazy_exports

__all__ = ["LightningTransformer", "PositionalEncoding", "Transformer"]


class PositionalEncoding(nn.Module):
    """Adds the fixed sine/cosine position signal to a (batch, sequence, features) input, then dropout."""

    table: Tensor

    def __init__(self, dim: int, dropout: float = 0.1, max_len: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        frequencies = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        table = torch.zeros(max_len, dim)
        table[:, 0::2] = torch.sin(position * frequencies)
        table[:, 1::2] = torch.cos(position * frequencies[: dim // 2])
        self.register_buffer("table", table, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(x + self.table[: x.size(1)])


class Transformer(nn.Module):
    """An encoder-decoder transformer over a token vocabulary; returns log-probabilities, flattened to
    (batch * sequence, vocab_size). The decoder is causally masked unless a `mask` is given."""

    def __init__(
        self,
        vocab_size: int = 33278,
        ninp: int = 200,
        nhead: int = 2,
        nhid: int = 200,
        nlayers: int = 2,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.ninp = ninp
        self.embedding = nn.Embedding(vocab_size, ninp)
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.transformer = nn.Transformer(
            d_model=ninp,
            nhead=nhead,
            num_encoder_layers=nlayers,
            num_decoder_layers=nlayers,
            dim_feedforward=nhid,
            dropout=dropout,
            batch_first=True,
        )
        self.decoder = nn.Linear(ninp, vocab_size)

    def forward(self, inputs: Tensor, target: Tensor, mask: Tensor | None = None) -> Tensor:
        length = target.size(1)
        if mask is None:
            mask = nn.Transformer.generate_square_subsequent_mask(length, device=inputs.device)
        scale = math.sqrt(self.ninp)
        source = self.pos_encoder(self.embedding(inputs) * scale)
        shifted = self.pos_encoder(self.embedding(target) * scale)
        output = self.decoder(self.transformer(source, shifted, tgt_mask=mask))
        return torch.log_softmax(output, dim=-1).view(-1, self.vocab_size)


class LightningTransformer(LightningModule):
    """`Transformer` trained with the negative log-likelihood of the targets (logged as `train_loss`) by SGD."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size)

    def forward(self, inputs: Tensor, target: Tensor) -> Tensor:
        return self.model(inputs, target)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        inputs, target = batch
        loss = nn.functional.nll_loss(self(inputs, target), target.view(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=0.1)


_DOWNLOADS = "it downloads WikiText-2; give LightningTransformer your own (inputs, targets) token batches"
__getattr__, __dir__ = lazy_exports(__name__, {}, {"WikiText2": _DOWNLOADS})
