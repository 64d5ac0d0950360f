"""Lightning's demos (`lightning.pytorch.demos`) and `cli_lightning_logo`, as Lightning's example scripts use them.

The datasets Lightning downloads are generated here: the tests check their shapes, types, determinism, that
`download` decides whether the files may be generated, and that a model learns on them.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, quiet_trainer
from torch import Tensor, nn
from torch.utils.data import DataLoader, Subset

import statemachine as L
from statemachine.demos import (
    LightningLSTM,
    LightningTransformer,
    SequenceSampler,
    SimpleLSTM,
    Transformer,
    WikiText2,
)
from statemachine.demos.boring_classes import BoringDataModuleNoLen, BoringModel, IterableBoringDataModule, Net
from statemachine.demos.mnist_datamodule import MNIST, MNISTDataModule

# ---- cli_lightning_logo ------------------------------------------------------------------------------------


def test_cli_lightning_logo_prints_the_logo_in_magenta_between_blank_lines(capsys: pytest.CaptureFixture) -> None:
    from statemachine import LIGHTNING_LOGO, cli_lightning_logo

    cli_lightning_logo()
    assert capsys.readouterr().out == "\n\033[0;35m" + LIGHTNING_LOGO + "\033[0m\n\n"
    art = LIGHTNING_LOGO.strip("\n").splitlines()
    assert len(art) == 22 and max(len(line) for line in art) == 46
    assert set("".join(art)) == {"#", " "}


def test_importing_the_logo_loads_no_torch() -> None:
    code = "import sys\nfrom statemachine import cli_lightning_logo\nprint('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


# ---- the names Lightning's examples import ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "names"),
    [
        (
            "demos",
            [
                "BoringDataModule",
                "BoringModel",
                "DemoModel",
                "LightningLSTM",
                "LightningTransformer",
                "SequenceSampler",
                "SimpleLSTM",
                "Transformer",
                "WikiText2",
            ],
        ),
        ("demos.mnist_datamodule", ["MNIST", "MNISTDataModule"]),
        ("demos.transformer", ["Dictionary", "LightningTransformer", "Transformer", "WikiText2", "tokenize"]),
        ("demos.lstm", ["LightningLSTM", "SequenceSampler", "SimpleLSTM"]),
        ("demos.boring_classes", ["BoringDataModuleNoLen", "IterableBoringDataModule", "Net"]),
    ],
)
def test_every_demo_name_of_lightning_imports(path: str, names: list[str]) -> None:
    namespace: dict[str, object] = {}
    exec(f"from statemachine.{path} import {', '.join(names)}", namespace)
    assert all(isinstance(namespace[name], type) or callable(namespace[name]) for name in names)


# ---- MNIST -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mnist_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose generated MNIST files the module's tests share (generating takes seconds)."""
    root = tmp_path_factory.mktemp("mnist")
    MNIST(str(root), download=True)
    return root


def test_mnist_items_are_single_channel_28x28_float_images_with_int_labels(mnist_root: Path) -> None:
    train, test = MNIST(str(mnist_root)), MNIST(str(mnist_root), train=False)
    assert (len(train), len(test)) == (60000, 10000)
    image, label = train[0]
    assert image.shape == (1, 28, 28) and image.dtype == torch.float32
    assert type(label) is int and 0 <= label <= 9
    assert train.data.dtype == torch.uint8 and train.data.shape == (60000, 28, 28)
    assert sorted(torch.unique(train.targets).tolist()) == list(range(10))
    assert torch.bincount(train.targets).min() > 5000  # every digit about as often


def test_mnist_pixels_are_in_0_1_then_standardised_by_normalize(mnist_root: Path) -> None:
    raw = MNIST(str(mnist_root), normalize=None)[3][0]
    assert raw.min() == 0.0 and 0.9 < raw.max() <= 1.0
    standardised = MNIST(str(mnist_root))[3][0]  # the default (0.1307, 0.3081)
    assert torch.allclose(standardised, (raw - 0.1307) / 0.3081)
    pixels = MNIST(str(mnist_root), normalize=None).data.float() / 255
    assert 0.1 < pixels.mean() < 0.25  # mostly background, like handwritten digits


def test_mnist_is_the_same_data_in_every_folder_and_the_splits_differ(mnist_root: Path, tmp_path: Path) -> None:
    again = MNIST(str(tmp_path), train=False)
    reference = MNIST(str(mnist_root), train=False)
    assert torch.equal(again.data, reference.data) and torch.equal(again.targets, reference.targets)
    assert not torch.equal(MNIST(str(mnist_root)).data[:10000], reference.data)


def test_mnist_download_false_reads_the_generated_files_and_refuses_without_them(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="Dataset not found") as refused:
        MNIST(str(tmp_path), download=False)
    assert str(tmp_path / "MNIST" / "synthetic") in str(refused.value)
    assert not (tmp_path / "MNIST").exists()
    folder = tmp_path / "MNIST" / "synthetic"
    folder.mkdir(parents=True)
    mine = (torch.full((2, 28, 28), 255, dtype=torch.uint8), torch.tensor([7, 1]))
    for name in ("training.pt", "test.pt"):
        torch.save(mine, folder / name)
    # the files on disk are read as they are, also with download=True: nothing is generated over them
    assert len(MNIST(str(tmp_path), download=True)) == 2
    image, label = MNIST(str(tmp_path), download=False, normalize=None)[0]
    assert label == 7 and torch.equal(image, torch.ones(1, 28, 28))


def test_mnist_applies_transform_and_target_transform(mnist_root: Path) -> None:
    dataset = MNIST(str(mnist_root), normalize=None, transform=lambda x: x.flatten(), target_transform=str)
    image, label = dataset[5]
    assert image.shape == (784,) and label == str(int(dataset.targets[5]))


class DigitClassifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean())

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("test_acc", (self.net(x).argmax(1) == y).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=2e-3)


def test_a_classifier_learns_the_generated_digits(mnist_root: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    train = DataLoader(Subset(MNIST(str(mnist_root)), range(2000)), batch_size=50, shuffle=True)
    test = DataLoader(Subset(MNIST(str(mnist_root), train=False), range(1000)), batch_size=500)
    model = DigitClassifier()
    trainer = quiet_trainer(tmp_path, max_epochs=2)
    trainer.fit(model, train)
    (result,) = trainer.test(model, test, verbose=False)
    assert result["test_acc"] > 0.9  # chance is 0.1


def test_mnist_datamodule_has_lightnings_arguments_and_splits_with_its_seed(mnist_root: Path) -> None:
    defaults = MNISTDataModule()
    assert (defaults.data_dir, defaults.val_split, defaults.num_workers) == ("./data", 5000, 16)
    assert (defaults.normalize, defaults.seed, defaults.batch_size) == (False, 42, 32)
    assert defaults.num_classes == 10 and MNISTDataModule.name == "mnist"

    def split(seed: int) -> list[int]:
        datamodule = MNISTDataModule(str(mnist_root), num_workers=0, seed=seed)
        datamodule.setup("fit")
        assert (len(datamodule.dataset_train), len(datamodule.dataset_val)) == (55000, 5000)
        return list(datamodule.dataset_val.indices[:20])

    assert split(42) == split(42) != split(7)


def test_mnist_datamodule_loaders_give_batches_in_0_1_or_in_minus_1_1(mnist_root: Path) -> None:
    plain = MNISTDataModule(str(mnist_root), num_workers=0, batch_size=64)
    plain.setup("fit")
    images, labels = next(iter(plain.train_dataloader()))
    assert images.shape == (64, 1, 28, 28) and labels.dtype == torch.int64
    assert images.min() == 0.0 and images.max() <= 1.0
    assert len(plain.val_dataloader()) == 5000 // 64  # the last partial batch is dropped
    assert len(plain.test_dataloader()) == 10000 // 64
    normalized = MNISTDataModule(str(mnist_root), num_workers=0, normalize=True)
    normalized.setup("fit")
    images, _ = next(iter(normalized.val_dataloader()))
    assert images.min() == -1.0 and images.max() > 0.5


def test_mnist_datamodule_generates_its_data_in_prepare_data_and_fits(tmp_path: Path) -> None:
    datamodule = MNISTDataModule(str(tmp_path / "data"), num_workers=0, batch_size=16)
    with pytest.raises(RuntimeError, match="Dataset not found"):
        datamodule.setup("fit")  # setup reads; only prepare_data generates
    trainer = quiet_trainer(tmp_path, limit_train_batches=3, limit_val_batches=2, limit_test_batches=2)
    trainer.fit(DigitClassifier(), datamodule=datamodule)
    assert (tmp_path / "data" / "MNIST" / "synthetic" / "training.pt").is_file()
    assert trainer.global_step == 3
    assert "test_acc" in trainer.test(DigitClassifier(), datamodule=datamodule, verbose=False)[0]


# ---- WikiText2 ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wikitext")
    WikiText2(root)
    return root


def test_wikitext2_items_are_input_and_target_blocks_shifted_by_one_word(corpus_dir: Path) -> None:
    dataset = WikiText2(corpus_dir)
    assert dataset.block_size == 35 and len(dataset) == len(dataset.data) // 35 - 1
    inputs, target = dataset[3]
    assert inputs.shape == target.shape == (35,) and inputs.dtype == target.dtype == torch.int64
    assert torch.equal(inputs[1:], target[:-1])
    assert torch.equal(target, dataset.data[3 * 35 + 1 : 4 * 35 + 1])
    last_inputs, last_target = dataset[len(dataset) - 1]
    assert len(last_inputs) == len(last_target) == 35
    assert len(WikiText2(corpus_dir, block_size=10)) == len(dataset.data) // 10 - 1


def test_wikitext2_vocabulary_indexes_the_file_s_words_with_eos_per_line(corpus_dir: Path) -> None:
    dataset = WikiText2(corpus_dir)
    text = dataset.path.read_text()
    assert dataset.path == corpus_dir / "wikitext-2-synthetic.txt"
    words = [word for line in text.splitlines() for word in [*line.split(), "<eos>"]]
    assert [dataset.dictionary.idx2word[index] for index in dataset.data[:200].tolist()] == words[:200]
    assert len(dataset.data) == len(words) > 50000
    assert dataset.vocab_size == len(dataset.dictionary) == len(set(words)) == int(dataset.data.max()) + 1
    assert dataset.vocab_size < 33278  # fits LightningTransformer's default vocabulary
    assert dataset.dictionary.word2idx["<eos>"] == dataset.dictionary.add_word("<eos>")


def test_wikitext2_is_the_same_corpus_in_every_folder(corpus_dir: Path, tmp_path: Path) -> None:
    assert (tmp_path / "wikitext-2-synthetic.txt").exists() is False
    assert torch.equal(WikiText2(tmp_path).data, WikiText2(corpus_dir).data)


def test_wikitext2_download_false_refuses_without_the_file_as_lightning_s_assertion(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="Dataset not found") as refused:
        WikiText2(tmp_path, download=False)
    assert isinstance(refused.value, RuntimeError)
    assert "wikitext-2-synthetic.txt" in str(refused.value) and not any(tmp_path.iterdir())
    (tmp_path / "wikitext-2-synthetic.txt").write_text("a b a\nb\n")
    dataset = WikiText2(tmp_path, block_size=2, download=True)  # an existing file is read, not replaced
    assert dataset.dictionary.idx2word == ["a", "b", "<eos>"] and dataset.data.tolist() == [0, 1, 0, 2, 1, 2]


class TinyLanguageModel(L.LightningModule):
    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size, ninp=32, nhead=2, nhid=64, nlayers=1, dropout=0.0)
        self.losses: list[float] = []

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        inputs, target = batch
        loss = nn.functional.nll_loss(self.model(inputs, target), target.view(-1))
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def test_a_transformer_learns_the_generated_corpus(corpus_dir: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    dataset = WikiText2(corpus_dir)
    model = TinyLanguageModel(dataset.vocab_size)
    quiet_trainer(tmp_path, max_steps=15).fit(model, DataLoader(dataset, batch_size=8, shuffle=True))
    guessing = math.log(dataset.vocab_size)
    assert model.losses[0] > 0.9 * guessing
    assert sum(model.losses[-5:]) / 5 < 0.75 * guessing


def test_lightning_transformer_generates_its_data_in_prepare_data_and_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # its data goes to ./data, as in Lightning
    trainer = quiet_trainer(tmp_path, limit_train_batches=2)
    trainer.fit(LightningTransformer())
    assert (tmp_path / "data" / "wikitext-2-synthetic.txt").is_file()
    assert trainer.global_step == 2 and "train_loss" in trainer.callback_metrics


# ---- LSTM --------------------------------------------------------------------------------------------------


def test_sequence_sampler_batches_continue_each_chunk() -> None:
    sampler = SequenceSampler(range(10), batch_size=3)
    assert len(sampler) == 3
    assert list(sampler) == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]


def test_lightning_lstm_carries_its_hidden_state_through_the_epoch_and_resets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    seen: list[bool] = []

    class Watch(L.Callback):
        def on_train_batch_start(self, trainer: L.Trainer, pl_module: LightningLSTM, batch: object, i: int) -> None:
            seen.append(pl_module.hidden is not None)

    model = LightningLSTM()
    model.model = SimpleLSTM(vocab_size=model.model.vocab_size, ninp=8, nhid=8, nlayers=2)  # quicker steps
    trainer = quiet_trainer(tmp_path, limit_train_batches=2, callbacks=[Watch()])
    trainer.fit(model)
    assert seen == [False, True] and model.hidden is None
    loader = model.train_dataloader()
    assert isinstance(loader.batch_sampler, SequenceSampler) and loader.batch_sampler.batch_size == 20


# ---- the boring classes ------------------------------------------------------------------------------------


def test_boring_datamodule_without_len_fits_on_unsized_loaders(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, limit_train_batches=5, limit_val_batches=2)
    trainer.fit(BoringModel(), datamodule=BoringDataModuleNoLen())
    assert trainer.global_step == 5


def test_iterable_boring_datamodule_gives_a_sized_and_an_unsized_loader_per_stage() -> None:
    datamodule = IterableBoringDataModule()
    datamodule.setup("fit")
    sized, unsized = datamodule.train_dataloader()
    assert len(sized) == 16 and not hasattr(unsized.dataset, "__len__")
    assert [len(list(loader)) for loader in datamodule.val_dataloader()] == [32, 32]
    datamodule.setup("predict")
    assert next(iter(datamodule.predict_dataloader()[1])).shape == (1, 4)


def test_net_classifies_mnist_shaped_images() -> None:
    output = Net()(torch.zeros(3, 1, 28, 28))
    assert output.shape == (3, 10)
    assert torch.allclose(output.exp().sum(dim=1), torch.ones(3))
