"""The language-model demo of Lightning's examples (`lightning.pytorch.demos.transformer`): `Transformer`,
`LightningTransformer`, and `WikiText2` on a generated corpus, not the real WikiText-2, because nothing is
downloaded here.

The corpus is text in made-up words from a fixed random grammar: the words fall into classes, each class is
followed by one of three others, and words within a class are Zipf-distributed. So a model can learn it (its
next-word loss falls far below that of guessing), and it is the same on every run and machine.
"""

from __future__ import annotations

import math
import random
from itertools import accumulate
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from stages.module import LightningModule
from statemachine.demos._files import ensure_file

__all__ = ["Dictionary", "LightningTransformer", "PositionalEncoding", "Transformer", "WikiText2", "tokenize"]

_CORPUS_SEED = 2
_CLASSES = 12
_WORDS_PER_CLASS = 80
_LINES = 2000
_SENTENCE_END = 0.15  # the chance that a sentence ends after each word
_SUCCESSOR_WEIGHTS = (0.6, 0.3, 0.1)
_ZIPF = tuple(accumulate(1 / rank for rank in range(1, _WORDS_PER_CLASS + 1)))  # cumulative weights in a class


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


def _made_up_words(rng: random.Random, count: int) -> list[str]:
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    syllables = [consonant + vowel for consonant in consonants for vowel in vowels]
    words: dict[str, None] = {}
    while len(words) < count:
        words["".join(rng.choices(syllables, k=rng.randint(2, 3)))] = None
    return list(words)


def _sentence(rng: random.Random, classes: list[list[str]], successors: list[list[int]]) -> list[str]:
    words: list[str] = []
    current = 0
    while not words or rng.random() > _SENTENCE_END:
        words.append(rng.choices(classes[current], cum_weights=_ZIPF)[0])
        current = rng.choices(successors[current], weights=_SUCCESSOR_WEIGHTS)[0]
    return [*words, "."]


def generate_corpus() -> str:
    """The generated corpus: 2000 lines of one to six sentences over 960 made-up words, the same on every call."""
    rng = random.Random(_CORPUS_SEED)
    words = _made_up_words(rng, _CLASSES * _WORDS_PER_CLASS)
    classes = [words[start : start + _WORDS_PER_CLASS] for start in range(0, len(words), _WORDS_PER_CLASS)]
    successors = [rng.sample(range(_CLASSES), k=len(_SUCCESSOR_WEIGHTS)) for _ in range(_CLASSES)]
    lines = []
    for _ in range(_LINES):
        sentences = [_sentence(rng, classes, successors) for _ in range(rng.randint(1, 6))]
        lines.append(" ".join(word for sentence in sentences for word in sentence))
    return "\n".join(lines) + "\n"


class Dictionary:
    """The vocabulary: `word2idx` and `idx2word`, in order of first appearance."""

    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        """The word's index, added at the end if it is new."""
        if word not in self.word2idx:
            self.word2idx[word] = len(self.idx2word)
            self.idx2word.append(word)
        return self.word2idx[word]

    def __len__(self) -> int:
        return len(self.idx2word)


def tokenize(path: Path) -> tuple[Tensor, Dictionary]:
    """The text file's words as one int64 tensor of indices, each line ended by `<eos>`, and its vocabulary."""
    dictionary = Dictionary()
    with open(path, encoding="utf8") as file:
        ids = [dictionary.add_word(word) for line in file for word in [*line.split(), "<eos>"]]
    return torch.tensor(ids, dtype=torch.int64), dictionary


class WikiText2(Dataset):
    """Blocks of a generated corpus (made-up words from a fixed grammar; not the real WikiText-2): item `i` is
    `(inputs, target)`, two int64 tensors of `block_size` word indices, the target shifted one word on.

    The corpus lives in `data_dir/wikitext-2-synthetic.txt`. `download=True` generates that file when it is
    missing (nothing is downloaded); `download=False` reads it and raises `AssertionError` (a
    `DatasetNotFoundError`) when it is not there.
    """

    def __init__(self, data_dir: Path = Path("./data"), block_size: int = 35, download: bool = True) -> None:
        super().__init__()
        self.path = Path(data_dir) / "wikitext-2-synthetic.txt"
        ensure_file(str(self.path), download, _corpus_bytes)
        self.data, self.dictionary = tokenize(self.path)
        self.block_size = block_size

    @property
    def vocab_size(self) -> int:
        return len(self.dictionary)

    def __len__(self) -> int:
        return len(self.data) // self.block_size - 1

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        start = index * self.block_size
        return self.data[start : start + self.block_size], self.data[start + 1 : start + self.block_size + 1]


def _corpus_bytes() -> bytes:
    return generate_corpus().encode("utf8")


class LightningTransformer(LightningModule):
    """`Transformer` trained with the negative log-likelihood of the targets (logged as `train_loss`) by SGD; by
    itself it trains on the generated `WikiText2` in `./data`, one block per batch."""

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

    def prepare_data(self) -> None:
        WikiText2(download=True)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(WikiText2())
