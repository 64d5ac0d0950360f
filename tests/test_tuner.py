"""The tuner: learning-rate and batch-size searches as states of the machine, with Lightning's semantics (the
found value is written to the model, everything else is as it was before the search)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import REPO, Boom, TinyModel, quiet_trainer, run_example
from torch.utils.data import DataLoader, TensorDataset

import statemachine as L
from statemachine.callbacks import BatchSizeFinder, LearningRateFinder
from statemachine.engine.diagram import build_graph
from statemachine.engine.diagram import main as diagram_main
from statemachine.engine.history import check_path
from statemachine.engine.history import main as history_main
from statemachine.tuner import TUNER_TABLE, Tuner

sys.path.insert(0, str(REPO))  # imported as `examples.digits`, the name the CLI tests use: one module, not two
from examples.digits import DigitsClassifier, DigitsData  # noqa: E402

TRAIN_SET = 1257  # the digits example's training split


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in model.state_dict().items()}


def same_weights(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(before[name], value) for name, value in model.state_dict().items())


def path(trainer: L.Trainer) -> list[str]:
    return [record.end_state for record in trainer.history]


# ---- on the digits example ---------------------------------------------------------------------------------


def test_lr_find_on_digits_finds_a_rate_and_restores_everything(tmp_path: Any) -> None:
    L.seed_everything(0)
    checkpoint = L.ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="val_acc", mode="max")
    trainer = L.Trainer(
        max_epochs=3,
        default_root_dir=tmp_path,
        callbacks=[checkpoint],
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
    )
    callbacks = list(trainer.callbacks)
    assert trainer.table is L.TABLE  # the built-in table until a search needs the tuning states
    model, data = DigitsClassifier(), DigitsData(batch_size=32)
    before = weights(model)

    finder = Tuner(trainer).lr_find(model, datamodule=data, min_lr=1e-5, num_training=60)

    assert finder is not None and len(finder.results["lr"]) == len(finder.results["loss"]) == 60
    lrs = finder.results["lr"]
    assert lrs[0] == pytest.approx(1e-5) and all(a < b for a, b in zip(lrs, lrs[1:])) and lrs[-1] < 1
    suggested = finder.suggestion()
    assert suggested is not None and 1e-3 < suggested < 0.5
    assert model.hparams.lr == suggested  # update_attr: written where configure_optimizers reads it
    assert same_weights(model, before)
    assert (trainer.global_step, trainer.current_epoch) == (0, 0)
    assert trainer.callbacks == callbacks and checkpoint.best_model_path == ""
    assert not (tmp_path / "ckpts").exists() and not list(tmp_path.rglob("*.ckpt"))
    assert trainer.state.finished and trainer.state.fn == L.TrainerFn.FITTING
    assert path(trainer) == ["fitting.setup", "tuning.lr_find", "finished"]
    assert check_path(trainer.history, TUNER_TABLE) == []


def test_scale_batch_size_on_digits_grows_to_the_training_set(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path)
    model, data = DigitsClassifier(), DigitsData()
    before = weights(model)
    found = Tuner(trainer).scale_batch_size(model, datamodule=data, steps_per_trial=1)
    # Doubling from 2 runs 2, 4, ..., 1024; 2048 is capped at the training set, which cannot grow further.
    assert found == TRAIN_SET and data.hparams.batch_size == TRAIN_SET
    assert same_weights(model, before) and trainer.global_step == 0
    assert path(trainer) == ["fitting.setup", "tuning.scale_batch_size", "finished"]
    trainer.fit(model, datamodule=data)  # the following fit trains with the size found
    assert trainer.num_training_batches == 1 and trainer.global_step == 1


# ---- out of memory -------------------------------------------------------------------------------------------


class MemoryBound(DigitsClassifier):
    """Runs out of memory (torch's error type, as on a GPU) for batches larger than `fits`."""

    def __init__(self, fits: int, error: type[Exception] = torch.OutOfMemoryError):
        super().__init__()
        self.fits, self.error = fits, error
        self.tried: list[int] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.allocate(batch, batch_idx)
        return super().training_step(batch, batch_idx)

    def allocate(self, batch: Any, batch_idx: int) -> None:
        size = len(batch[0])
        if batch_idx == 0:
            self.tried.append(size)
        if size > self.fits:
            raise self.error(f"CUDA out of memory. Tried to allocate a batch of {size}")


def test_power_mode_stops_growing_at_the_first_out_of_memory(tmp_path: Any) -> None:
    model, data = MemoryBound(fits=100), DigitsData()
    found = Tuner(quiet_trainer(tmp_path)).scale_batch_size(model, datamodule=data, steps_per_trial=1)
    assert found == 64 and data.hparams.batch_size == 64
    assert model.tried == [2, 4, 8, 16, 32, 64, 128]


def test_binsearch_mode_bisects_to_the_largest_size_that_fits(tmp_path: Any) -> None:
    model, data = MemoryBound(fits=100), DigitsData()
    tuner = Tuner(quiet_trainer(tmp_path))
    found = tuner.scale_batch_size(model, datamodule=data, mode="binsearch", steps_per_trial=1)
    assert found == 100 and data.hparams.batch_size == 100
    assert model.tried[:7] == [2, 4, 8, 16, 32, 64, 128] and 101 in model.tried


def test_max_trials_bounds_the_search(tmp_path: Any) -> None:
    model, data = MemoryBound(fits=100), DigitsData()
    found = Tuner(quiet_trainer(tmp_path)).scale_batch_size(model, datamodule=data, max_trials=3, steps_per_trial=1)
    assert found == 8 and model.tried == [2, 4, 8]


def test_when_nothing_fits_the_out_of_memory_error_is_raised(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path)
    model = MemoryBound(fits=0)
    with pytest.raises(torch.OutOfMemoryError) as error:
        Tuner(trainer).scale_batch_size(model, datamodule=DigitsData(), steps_per_trial=1)
    assert "found no batch size that fits (tried [2, 1])" in "".join(getattr(error.value, "__notes__", []))
    assert model.tried == [2, 1] and trainer.history[-1].transition == (
        "interrupt: tuning.scale_batch_size -> interrupted"
    )


def test_an_error_that_is_not_out_of_memory_interrupts_and_restores(tmp_path: Any) -> None:
    seen: list[BaseException] = []
    watcher = L.LambdaCallback(on_exception=lambda trainer, module, error: seen.append(error))
    trainer = quiet_trainer(tmp_path, callbacks=[watcher])
    model = MemoryBound(fits=16, error=ValueError)
    before = weights(model)
    with pytest.raises(ValueError, match="batch of 32"):
        Tuner(trainer).scale_batch_size(model, datamodule=DigitsData(), steps_per_trial=1)
    assert path(trainer)[-1] == "interrupted" and "tuning.scale_batch_size" in path(trainer)
    assert len(seen) == 1 and isinstance(seen[0], ValueError)  # the user's callbacks are back for on_exception
    assert same_weights(model, before) and trainer.global_step == 0


# ---- validate, test, predict --------------------------------------------------------------------------------


class SizedDigits(DigitsData):
    """Every loader takes the batch size being searched."""

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.hparams.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.hparams.batch_size)


class EvalMemoryBound(MemoryBound):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.allocate(batch, batch_idx)
        super().validation_step(batch, batch_idx)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.allocate(batch, batch_idx)
        super().test_step(batch, batch_idx)

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.allocate(batch, batch_idx)
        return self(batch[0]).argmax(1)


@pytest.mark.parametrize(
    ("method", "mode", "expected"), [("validate", "binsearch", 100), ("test", "power", 64), ("predict", "power", 64)]
)
def test_scale_batch_size_for_evaluation_runs_that_stage(tmp_path: Any, method: str, mode: str, expected: int) -> None:
    trainer = quiet_trainer(tmp_path)
    model, data = EvalMemoryBound(fits=100), SizedDigits()
    before = weights(model)
    found = Tuner(trainer).scale_batch_size(model, datamodule=data, method=method, mode=mode, steps_per_trial=1)
    assert found == expected and data.hparams.batch_size == expected
    assert path(trainer) == [f"tuning.{method}_batch_size", "finished"]
    assert trainer.state.fn == L.TrainerFn(method) and check_path(trainer.history, TUNER_TABLE) == []
    assert same_weights(model, before) and trainer.validate_progress.total.completed == 0


def test_batch_size_finder_searches_at_the_start_of_test_then_tests_with_it(tmp_path: Any) -> None:
    finder = BatchSizeFinder(steps_per_trial=1)
    trainer = quiet_trainer(tmp_path, callbacks=[finder])
    model, data = EvalMemoryBound(fits=100), SizedDigits()
    results = trainer.test(model, datamodule=data, verbose=False)
    assert finder.optimal_batch_size == 64 and trainer.num_test_batches == [5]  # 270 test samples in batches of 64
    assert path(trainer) == ["tuning.test_batch_size", "testing", "finished"] and "test_acc" in results[0]
    assert trainer.test_progress.total.completed == 5  # the trials' batches are not counted
    with pytest.raises(L.MisconfigurationException, match="dataloaders passed directly"):
        trainer.validate(model, DataLoader(data.val_set))
    assert path(trainer)[-1] == "interrupted"


# ---- the callbacks, inside a fit ----------------------------------------------------------------------------


class RateModel(TinyModel):
    def __init__(self, lr: float = 0.01):
        super().__init__()
        self.lr = lr

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def shuffled_loader() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=4, shuffle=True)


def test_learning_rate_finder_searches_at_fit_start_then_fit_trains_as_if_it_had_not(tmp_path: Any) -> None:
    L.seed_everything(1)
    finder = LearningRateFinder(min_lr=1e-4, num_training_steps=20)
    tuned_trainer = quiet_trainer(tmp_path, max_epochs=3, callbacks=[finder])
    tuned = RateModel()
    tuned_trainer.fit(tuned, shuffled_loader(), shuffled_loader())
    assert finder.optimal_lr is not None and len(finder.optimal_lr.results["lr"]) == 20
    assert tuned.lr == finder.optimal_lr.suggestion() != 0.01
    states = path(tuned_trainer)
    assert states[:4] == ["fitting.setup", "tuning.lr_find", "fitting.setup", "fitting.sanity_checking"]
    assert states[-1] == "finished" and check_path(tuned_trainer.history, TUNER_TABLE) == []

    # The same fit without the search, from the same seed, with the rate the search found: the same weights,
    # so the search left the weights, optimizer, counters and random state exactly as they were.
    L.seed_everything(1)
    plain_trainer = quiet_trainer(tmp_path, max_epochs=3)
    plain = RateModel(lr=tuned.lr)
    plain_trainer.fit(plain, shuffled_loader(), shuffled_loader())
    assert plain_trainer.global_step == tuned_trainer.global_step == 24
    assert same_weights(tuned, weights(plain))


def test_both_finders_run_in_callback_order_then_fit_uses_what_they_found(tmp_path: Any) -> None:
    scaler, rate = BatchSizeFinder(steps_per_trial=1, max_trials=4), LearningRateFinder(num_training_steps=15)
    trainer = quiet_trainer(tmp_path, callbacks=[scaler, rate], max_steps=3, num_sanity_val_steps=0)
    model, data = DigitsClassifier(), DigitsData()
    trainer.fit(model, datamodule=data)
    assert scaler.optimal_batch_size == 16 and data.hparams.batch_size == 16  # 2, 4, 8, 16: four trials
    assert rate.optimal_lr is not None and model.hparams.lr == rate.optimal_lr.suggestion()
    assert path(trainer)[:5] == [
        "fitting.setup",
        "tuning.scale_batch_size",
        "fitting.setup",
        "tuning.lr_find",
        "fitting.setup",
    ]
    assert trainer.global_step == 3 and trainer.num_training_batches == 79  # 1257 samples in batches of 16


def test_a_failure_during_the_sweep_takes_the_tuning_states_interrupt_edge(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, callbacks=[LearningRateFinder(num_training_steps=5)])
    model = RateModel()
    model.fail_in = "training_step"
    with pytest.raises(Boom):
        trainer.fit(model, shuffled_loader())
    assert trainer.history[-1].transition == "interrupt: tuning.lr_find -> interrupted"
    assert [c.name for c in trainer.history[-1].callbacks][0] == "restore_tuning_state"


# ---- the results ----------------------------------------------------------------------------------------------


def test_plot_draws_the_curve_and_marks_the_suggestion(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, max_epochs=5)
    finder = Tuner(trainer).lr_find(RateModel(), shuffled_loader(), num_training=30, mode="linear", min_lr=1e-3)
    assert finder is not None
    figure = finder.plot(suggest=True)
    ax = figure.axes[0]
    assert len(ax.lines) == 2 and ax.get_xscale() == "linear"  # the curve, and the suggested point
    suggested = ax.lines[1].get_xdata()[0]
    assert suggested == finder.suggestion()
    figure.savefig(tmp_path / "lr.png")
    assert (tmp_path / "lr.png").stat().st_size > 0


def test_the_sweep_runs_num_training_steps_across_epochs(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path)  # max_epochs=1, and 8 batches an epoch
    finder = Tuner(trainer).lr_find(RateModel(), shuffled_loader(), num_training=20, early_stop_threshold=None)
    assert finder is not None and len(finder.results["lr"]) == 20
    assert finder.results["lr"][-1] == pytest.approx(1e-8 * (1 / 1e-8) ** (19 / 20))  # geometric steps to max_lr
    assert trainer.max_epochs == 1 and trainer.current_epoch == 0


def test_a_diverging_sweep_stops_early_and_logs_nothing(tmp_path: Any) -> None:
    logger = L.CSVLogger(tmp_path)
    trainer = quiet_trainer(tmp_path, logger=logger, log_every_n_steps=1)
    finder = Tuner(trainer).lr_find(RateModel(), shuffled_loader(), min_lr=1e-2, max_lr=1e3, num_training=60)
    assert finder is not None and 1 < len(finder.results["loss"]) < 60
    losses = finder.results["loss"]
    assert losses[-1] > 4 * min(losses[:-1])  # stopped at the first point above 4x the best
    assert not trainer.should_stop and trainer.logger is logger
    metrics = Path(logger.log_dir) / "metrics.csv"
    assert not metrics.exists() or "train_loss" not in metrics.read_text()


def test_the_digits_demo_saves_the_lr_plot(tmp_path: Any) -> None:
    plot = tmp_path / "lr.png"
    output = run_example("digits", "--epochs", "1", "--root", str(tmp_path / "runs"), "--lr-plot", str(plot))
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert "suggested learning rate:" in output


def test_suggestion_needs_enough_points(tmp_path: Any) -> None:
    # 8 points: fewer than skip_begin=10 plus skip_end=1 leave two of
    finder = Tuner(quiet_trainer(tmp_path)).lr_find(RateModel(), shuffled_loader(), num_training=8)
    assert finder is not None and len(finder.results["lr"]) == 8
    assert finder.suggestion() is None and finder.suggestion(skip_begin=1) is not None


def test_fast_dev_run_skips_the_search(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, fast_dev_run=True)
    model = RateModel()
    with pytest.warns(L.PossibleUserWarning.__base__, match="Skipping the learning rate finder"):
        assert Tuner(trainer).lr_find(model, shuffled_loader()) is None
    assert model.lr == 0.01


# ---- the machine's tools see the tuning states --------------------------------------------------------------


def test_diagram_and_history_check_take_the_tuner_table(tmp_path: Any, capsys: Any) -> None:
    source = build_graph(TUNER_TABLE).source
    assert "tuning" in source and "lr_find_requested" in source and "restore_tuning_state" in source
    trainer = quiet_trainer(tmp_path, max_epochs=2)
    Tuner(trainer).lr_find(RateModel(), shuffled_loader(), num_training=12)
    dump = trainer.dump_history(tmp_path / "tuned.json")
    assert history_main(["check", dump, "--table", "statemachine.tuner:TUNER_TABLE"]) == 0
    assert capsys.readouterr().out == f"legal path: {len(trainer.history)} records\n"


def test_the_diagram_command_renders_and_checks_the_tuner_table(tmp_path: Any, capsys: Any) -> None:
    table = ["--table", "statemachine.tuner:TUNER_TABLE"]
    assert diagram_main([*table, "-o", str(tmp_path)]) == 0
    fit = (tmp_path / "trainer-fit.dot").read_text()
    assert "tuning" in fit and "lr_find_requested" in fit and "batch_size_search_requested" in fit
    assert diagram_main([*table, "-o", str(tmp_path), "--check"]) == 0
    assert diagram_main(["-o", str(tmp_path), "--check"]) == 1  # not the built-in table's diagrams
    with pytest.raises(SystemExit):
        diagram_main(table)  # would overwrite the built-in table's committed diagrams
    assert "--table needs -o" in capsys.readouterr().err


# ---- bad input is refused, naming it ---------------------------------------------------------------------------


def test_bad_arguments_are_named(tmp_path: Any) -> None:
    tuner = Tuner(quiet_trainer(tmp_path))
    with pytest.raises(L.MisconfigurationException, match="lr_find runs with method='fit' only"):
        tuner.lr_find(RateModel(), method="validate")
    with pytest.raises(L.MisconfigurationException, match="`dataloaders` must be None"):
        tuner.lr_find(RateModel(), dataloaders=shuffled_loader())
    with pytest.raises(ValueError, match="mode='cubic'"):
        tuner.lr_find(RateModel(), shuffled_loader(), mode="cubic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected 0 < min_lr < max_lr"):
        LearningRateFinder(min_lr=1.0, max_lr=0.1)
    with pytest.raises(ValueError, match="(?s)mode='grow'.*steps_per_trial=0"):
        BatchSizeFinder(mode="grow", steps_per_trial=0)  # type: ignore[arg-type]
    with pytest.raises(L.MisconfigurationException, match="method='test', train_dataloaders and val_dataloaders"):
        tuner.scale_batch_size(RateModel(), shuffled_loader(), method="test")
    with pytest.raises(ValueError, match="method='tune': expected one of"):
        tuner.scale_batch_size(RateModel(), method="tune")  # type: ignore[arg-type]


def test_what_a_search_needs_is_checked_before_it_runs(tmp_path: Any) -> None:
    tuner = Tuner(quiet_trainer(tmp_path))
    with pytest.raises(L.MisconfigurationException, match="dataloaders passed directly"):
        tuner.scale_batch_size(RateModel(), shuffled_loader())
    with pytest.raises(L.MisconfigurationException, match="Field 'batch_size' not found"):
        tuner.scale_batch_size(RateModel(), datamodule=_NoBatchSize())
    with pytest.raises(AttributeError, match="needs one of \\('lr', 'learning_rate'\\)"):
        tuner.lr_find(TinyModel(), shuffled_loader())
    with pytest.raises(AttributeError, match="'step_size'"):
        tuner.lr_find(RateModel(), shuffled_loader(), attr_name="step_size")
    trainer = quiet_trainer(tmp_path, callbacks=[LearningRateFinder()])
    with pytest.raises(ValueError, match="already has a LearningRateFinder"):
        Tuner(trainer).lr_find(RateModel(), shuffled_loader())


def test_an_lr_search_outside_fit_start_is_refused(tmp_path: Any) -> None:
    class LateFinder(LearningRateFinder):
        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            pass

        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            self.lr_find(trainer, pl_module)

    with pytest.raises(L.MisconfigurationException, match="runs at fit start .* 'fitting.training'"):
        quiet_trainer(tmp_path, callbacks=[LateFinder()]).fit(RateModel(), shuffled_loader())


class _NoBatchSize(L.LightningDataModule):
    def train_dataloader(self) -> DataLoader:
        return shuffled_loader()


def test_attributes_are_found_on_the_model_its_hparams_and_the_datamodule(tmp_path: Any) -> None:
    from statemachine.utilities.parsing import lightning_getattr, lightning_hasattr, lightning_setattr

    model, data = DigitsClassifier(), DigitsData(batch_size=8)
    trainer = quiet_trainer(tmp_path, limit_train_batches=1, limit_val_batches=1)
    trainer.fit(model, datamodule=data)  # attaches the datamodule, as a search does
    assert lightning_getattr(model, "lr") == 2e-3 and lightning_getattr(model, "batch_size") == 8
    lightning_setattr(model, "batch_size", 32)
    assert data.hparams.batch_size == 32 and not lightning_hasattr(model, "momentum")
    with pytest.raises(AttributeError, match="'momentum' is neither an attribute of the model"):
        lightning_setattr(model, "momentum", 0.9)
