"""The LSTM language-model demo of Lightning's examples (`lightning.pytorch.demos.lstm`), trained by itself on the
generated `WikiText2` corpus (made-up words from a fixed grammar, not the real WikiText-2)."""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Sampler

from stages.module import LightningModule
from statemachine.demos.transformer import WikiText2

__all__ = ["LightningLSTM", "SequenceSampler", "SimpleLSTM"]


class SimpleLSTM(nn.Module):
    """Embedding, a stacked LSTM and a linear decoder; returns log-probabilities flattened to
    (batch * sequence, vocab_size) and the new hidden state."""

    def __init__(
        self, vocab_size: int = 33278, ninp: int = 512, nhid: int = 512, nlayers: int = 4, dropout: float = 0.2
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.nlayers = nlayers
        self.nhid = nhid
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab_size, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(nhid, vocab_size)
        self.init_weights()

    def init_weights(self) -> None:
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, input: Tensor, hidden: tuple[Tensor, Tensor]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        output, hidden = self.rnn(self.drop(self.encoder(input)), hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.vocab_size)
        return torch.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, batch_size: int) -> tuple[Tensor, Tensor]:
        """Zero hidden and cell states, on the parameters' device and dtype."""
        weight = next(self.parameters())
        shape = (self.nlayers, batch_size, self.nhid)
        return weight.new_zeros(shape), weight.new_zeros(shape)


class SequenceSampler(Sampler[list[int]]):
    """Batches that carry on where the last one stopped: the dataset is cut into `batch_size` contiguous
    chunks, and batch `i` holds item `i` of every chunk, so an LSTM's hidden state follows each chunk's text."""

    def __init__(self, dataset: Sized, batch_size: int) -> None:
        super().__init__()
        self.dataset = dataset
        self.batch_size = batch_size
        self.chunk_size = len(dataset) // batch_size

    def __iter__(self) -> Iterator[list[int]]:
        used = self.chunk_size * self.batch_size
        for offset in range(self.chunk_size):
            yield list(range(offset, used, self.chunk_size))

    def __len__(self) -> int:
        return self.chunk_size


class LightningLSTM(LightningModule):
    """`SimpleLSTM` trained by SGD (lr 20) with the hidden state carried across batches (detached) and reset
    at each epoch's end; the loss is logged as `train_loss`. By itself it trains on the generated `WikiText2` in
    `./data`, in batches of 20 from a `SequenceSampler`."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = SimpleLSTM(vocab_size=vocab_size)
        self.hidden: tuple[Tensor, Tensor] | None = None

    def on_train_epoch_end(self) -> None:
        self.hidden = None

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        input, target = batch
        if self.hidden is None:
            self.hidden = self.model.init_hidden(input.size(0))
        hidden = (self.hidden[0].detach(), self.hidden[1].detach())
        output, self.hidden = self.model(input, hidden)
        loss = nn.functional.nll_loss(output, target.view(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def prepare_data(self) -> None:
        WikiText2(download=True)

    def train_dataloader(self) -> DataLoader:
        dataset = WikiText2()
        return DataLoader(dataset, batch_sampler=SequenceSampler(dataset, batch_size=20))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=20.0)
