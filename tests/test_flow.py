"""The machine as users meet it: states per entry point, interrupts from every running state, the history."""

from __future__ import annotations

import gc
import json
import math
import signal
import weakref
from itertools import product
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import Boom, TinyModel, make_loader, quiet_trainer

import statemachine as L
from statemachine.engine.binding import resolve
from statemachine.engine.coverage import COVERAGE
from statemachine.engine.history import check_path, load_history
from statemachine.engine.table import TABLE


class StateProbe(L.Callback):
    """Records (hook, machine-derived state) pairs, and the exception on_exception receives."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []
        self.exceptions: list[BaseException] = []

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self.seen.append(("on_fit_start", trainer.state))

    def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
        self.seen.append(("on_sanity_check_start", trainer.state))

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.seen.append(("on_train_batch_start", trainer.state))

    def on_validation_batch_start(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        self.seen.append(("on_validation_batch_start", trainer.state))

    def on_test_batch_start(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        self.seen.append(("on_test_batch_start", trainer.state))

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.exceptions.append(exception)


def test_state_values_follow_the_machine(tmp_path: Any) -> None:
    probe = StateProbe()
    trainer = quiet_trainer(tmp_path, callbacks=[probe], limit_train_batches=1, limit_val_batches=1)
    assert trainer.state == L.TrainerState(L.TrainerStatus.INITIALIZING, None, None)
    trainer.fit(TinyModel(), make_loader(), make_loader())
    observed = {hook: (s.status, s.fn, s.stage) for hook, s in probe.seen}
    assert observed["on_fit_start"] == ("running", "fit", "train")
    assert observed["on_sanity_check_start"] == ("running", "fit", "sanity_check")
    assert observed["on_train_batch_start"] == ("running", "fit", "train")
    assert observed["on_validation_batch_start"] == ("running", "fit", "validate")
    assert (trainer.state.status, trainer.state.fn, trainer.state.stage) == ("finished", "fit", None)
    assert trainer.state.finished and trainer.state.stopped
    trainer.test(TinyModel(), make_loader())
    assert dict(probe.seen)["on_test_batch_start"].stage == L.RunningStage.TESTING
    assert trainer.state.fn == L.TrainerFn.TESTING


def test_stage_views_are_read_only_and_name_the_trigger(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path)
    with pytest.raises(AttributeError, match="read-only view of the state machine.*val_check"):
        trainer.validating = True
    assert trainer.training is False
    trainer.should_stop = True  # stays writable
    assert trainer.should_stop is True


ENTRY_POINTS = {
    "fit": lambda t, m: t.fit(m, make_loader(), make_loader()),
    "validate": lambda t, m: t.validate(m, make_loader()),
    "test": lambda t, m: t.test(m, make_loader()),
    "predict": lambda t, m: t.predict(m, make_loader()),
}
FAILURES = {
    "fit": "training_step",
    "validate": "validation_step",
    "test": "test_step",
    "predict": "predict_step",
}


@pytest.mark.parametrize("fn", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("start", ["idle", "finished", "interrupted"])
def test_every_entry_point_starts_from_every_resting_state(tmp_path: Any, fn: str, start: str) -> None:
    trainer = quiet_trainer(tmp_path, limit_train_batches=2, limit_val_batches=1)
    if start == "finished":
        trainer.fit(TinyModel(), make_loader())
    elif start == "interrupted":
        with pytest.raises(Boom):
            trainer.fit(TinyModel(fail_in="training_step"), make_loader())
    resting_status = {"idle": "initializing", "finished": "finished", "interrupted": "interrupted"}
    assert trainer.state.status == resting_status[start] and trainer.state.stage is None
    ENTRY_POINTS[fn](trainer, TinyModel())
    assert trainer.state.status == "finished" and trainer.state.fn == L.TrainerFn(fn)
    entry = [r for r in trainer.history if r.trigger == fn][-1]
    assert entry.source == start and entry.transition is not None


def _failing_run(tmp_path: Any, fn: str, hook: str, **flags: Any) -> tuple[L.Trainer, StateProbe, Boom]:
    probe = StateProbe()
    trainer = quiet_trainer(tmp_path, callbacks=[probe], limit_train_batches=2, limit_val_batches=2, **flags)
    with pytest.raises(Boom) as raised:
        ENTRY_POINTS[fn](trainer, TinyModel(fail_in=hook))
    return trainer, probe, raised.value


@pytest.mark.parametrize(
    ("fn", "hook", "flags", "interrupted_from"),
    [
        ("fit", "configure_optimizers", {}, "fitting.setup"),
        ("fit", "validation_step", {}, "fitting.sanity_checking"),
        ("fit", "training_step", {}, "fitting.training"),
        ("fit", "validation_step", {"num_sanity_val_steps": 0}, "fitting.validating"),
        ("validate", "validation_step", {}, "validating"),
        ("test", "test_step", {}, "testing"),
        ("predict", "predict_step", {}, "predicting"),
    ],
)
def test_an_exception_interrupts_every_running_state(
    tmp_path: Any, fn: str, hook: str, flags: dict[str, Any], interrupted_from: str
) -> None:
    trainer, probe, exception = _failing_run(tmp_path, fn, hook, **flags)
    assert trainer.state.status == L.TrainerStatus.INTERRUPTED and trainer.interrupted
    assert trainer.state.stage is None
    last = trainer.history[-1]
    assert (last.trigger, last.source, last.dest) == ("interrupt", interrupted_from, "interrupted")
    assert probe.exceptions == [exception]  # on_exception saw the very object that propagated
    dumped = load_history(trainer.history_dump_path)
    assert [r.trigger for r in dumped.records] == [r.trigger for r in trainer.history]
    assert check_path(dumped.records) == []


LIGHTNING_HOOKS_IN_FIT = [
    "prepare_data",
    "setup",
    "configure_model",
    "configure_optimizers",
    "on_fit_start",
    "train_dataloader",
    "val_dataloader",
    "on_train_start",
    "on_train_epoch_start",
    "on_train_batch_start",
    "training_step",
    "on_before_zero_grad",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_train_batch_end",
    "on_validation_model_eval",
    "on_validation_start",
    "validation_step",
    "on_validation_epoch_end",
    "on_validation_end",
    "on_validation_model_train",
    "on_train_epoch_end",
    "on_train_end",
    "on_fit_end",
    "teardown",
]


@pytest.mark.parametrize("hook", LIGHTNING_HOOKS_IN_FIT)
def test_an_exception_in_any_user_hook_is_reraised_unchanged(tmp_path: Any, hook: str) -> None:
    """Any hook: interrupted, on_exception ran, history dumped, the same exception object re-raised."""
    boom = Boom(hook)

    def fail(*args: Any, **kwargs: Any) -> None:
        raise boom

    model = LoaderModel()
    setattr(model, hook, fail)
    probe = StateProbe()
    trainer = quiet_trainer(tmp_path, callbacks=[probe], limit_train_batches=2, limit_val_batches=1)
    with pytest.raises(Boom) as raised:
        trainer.fit(model)
    assert raised.value is boom
    assert trainer.state.status == L.TrainerStatus.INTERRUPTED
    assert probe.exceptions == [boom]
    assert trainer.history[-1].trigger == "interrupt"
    dumped_cause = load_history(trainer.history_dump_path).records[-1].exception
    assert (dumped_cause.type, dumped_cause.message) == ("Boom", hook)


class LoaderModel(TinyModel):
    """Overrides the loader hooks and configure_model, so a test can make each of them fail."""

    def train_dataloader(self) -> Any:
        return make_loader()

    def val_dataloader(self) -> Any:
        return make_loader()

    def configure_model(self) -> None:
        self.configured = True


def test_keyboard_interrupt_shuts_down_then_exits_with_status_1(tmp_path: Any, caplog: Any) -> None:
    class Interrupted(TinyModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            raise KeyboardInterrupt

    probe = StateProbe()
    trainer = quiet_trainer(tmp_path, callbacks=[probe], limit_train_batches=2)
    with pytest.raises(SystemExit) as exit:
        trainer.fit(Interrupted(), make_loader())
    assert exit.value.code == 1 and isinstance(exit.value.__cause__, KeyboardInterrupt)  # as Lightning's sys.exit(1)
    assert "Detected KeyboardInterrupt, attempting graceful shutdown ..." in caplog.text
    assert trainer.state.status == L.TrainerStatus.INTERRUPTED and trainer.state.stage is None
    assert isinstance(probe.exceptions[0], KeyboardInterrupt)  # the callbacks' on_exception saw the interrupt


def test_reentry_from_a_hook_is_refused_with_the_state(tmp_path: Any) -> None:
    class Reentrant(TinyModel):
        def on_train_start(self) -> None:
            self.trainer.validate(self, make_loader())

    trainer = quiet_trainer(tmp_path, limit_train_batches=1)
    with pytest.raises(RuntimeError, match=r"Trainer\.validate\(\) was called while .*'fitting\.between_epochs'"):
        trainer.fit(Reentrant(), make_loader())
    assert trainer.interrupted


def test_reentry_from_on_exception_is_refused_too(tmp_path: Any) -> None:
    """The interrupt edge rests in `interrupted` while on_exception runs; the run is still in flight there."""
    refused: list[BaseException] = []

    class Reentrant(L.Callback):
        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            try:
                trainer.fit(TinyModel(), make_loader())
            except RuntimeError as error:
                refused.append(error)

    trainer = quiet_trainer(tmp_path, callbacks=[Reentrant()], limit_train_batches=1)
    with pytest.raises(Boom):
        trainer.fit(TinyModel(fail_in="training_step"), make_loader())
    assert len(refused) == 1 and "Trainer.fit() was called while the trainer is running" in str(refused[0])
    assert trainer.interrupted and trainer.history[-1].dest == "interrupted"


def test_a_trainer_run_inside_another_trainers_transition_keeps_both_flows_apart(tmp_path: Any) -> None:
    """Trainers on one table share its `transitions` machine; one fired from another's edge (a callback validating
    a second model in `on_fit_start`) runs its own path, and the outer edge finishes where it was."""
    inner_paths: list[list[tuple[str, str | None]]] = []

    class ValidateAnother(L.Callback):
        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            inner = quiet_trainer(tmp_path / "inner", limit_val_batches=1)
            inner.validate(TinyModel(), make_loader())
            inner_paths.append([(r.source, r.dest) for r in inner.history])

    trainer = quiet_trainer(tmp_path, callbacks=[ValidateAnother()], max_epochs=1, limit_train_batches=1)
    trainer.fit(TinyModel(), make_loader())
    assert inner_paths == [[("idle", "validating"), ("validating", "finished")]]
    first = trainer.history[0]
    assert (first.trigger, first.dest, first.callbacks[-1].name) == ("fit", "fitting.setup", "register_signal_handlers")
    assert trainer.state.finished and check_path(trainer.history) == []


def test_a_finished_trainer_is_collected(tmp_path: Any) -> None:
    """Nothing the machine keeps between runs holds a trainer (or its model) alive."""
    trainer = quiet_trainer(tmp_path, limit_train_batches=1)
    trainer.fit(TinyModel(), make_loader())
    gone = weakref.ref(trainer)
    del trainer
    gc.collect()
    assert gone() is None


def test_history_is_a_legal_path_and_survives_memory_roundtrip(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, max_epochs=2, limit_train_batches=4, limit_val_batches=1, val_check_interval=0.5)
    model = TinyModel()
    trainer.fit(model, make_loader(), make_loader())
    trainer.test(model, make_loader())
    epoch = ["epoch_boundary", "val_check", "validation_done", "val_check", "validation_done", "epoch_done"]
    triggers = [r.trigger for r in trainer.history]
    assert triggers == ["fit", "begin", "sanity_check_done", "train_ready", *epoch, *epoch, "epoch_boundary"] + [
        "test",
        "finish",
    ]
    stop = trainer.history[-3]
    assert (stop.dest, stop.guards[0].name, stop.guards[0].reason) == ("finished", "fit_done", "`max_epochs=2` reached")
    assert check_path(trainer.history) == []
    path = trainer.dump_history("memory://runs/history.json")
    loaded = load_history(path)
    assert loaded.matches(TABLE)
    assert [r.model_dump() for r in loaded.records] == [r.model_dump() for r in trainer.history]
    fit_record = loaded.records[0]
    # The set-up order for fit: connect (and start the profiler), callbacks, data, setup hooks, model, strategy
    # (the module placed, or sharded), restore weights and callback state, optimizers, on_fit_start,
    # hyperparameters, restore the loops, signals.
    assert [c.name for c in fit_record.callbacks] == [
        "connect_model",
        "setup_profiler",
        "configure_callbacks",
        "prepare_data",
        "call_setup_hooks",
        "configure_model",
        "setup_strategy",
        "restore_weights_and_callbacks",
        "configure_optimizers",
        "call_on_fit_start",
        "log_hyperparams",
        "restore_training_state",
        "release_checkpoint",
        "register_signal_handlers",
    ]
    assert all(c.duration_s >= 0 for c in fit_record.callbacks)


def test_history_dump_is_json_with_version_and_table_hash(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, limit_train_batches=1)
    trainer.fit(TinyModel(), make_loader())
    path = trainer.dump_history(tmp_path / "h.json")
    content = json.loads(open(path).read())
    assert content["format_version"] == 1 and content["table_digest"] == TABLE.digest


def test_history_cli_shows_the_run(tmp_path: Any, capsys: Any) -> None:
    from statemachine.engine.history import main

    trainer = quiet_trainer(tmp_path, limit_train_batches=1)
    with pytest.raises(Boom):
        trainer.fit(TinyModel(fail_in="training_step"), make_loader())
    assert main(["show", trainer.history_dump_path]) in (0, None)
    shown = capsys.readouterr().out
    assert "interrupt" in shown and "Boom" in shown and "fitting.training" in shown


def test_sigint_is_ignored_during_the_shutdown_and_restored_after(tmp_path: Any) -> None:
    seen: list[Any] = []

    class Watcher(L.Callback):
        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            seen.append(signal.getsignal(signal.SIGINT))

    before = signal.getsignal(signal.SIGINT)
    trainer = quiet_trainer(tmp_path, callbacks=[Watcher()], limit_train_batches=1)
    with pytest.raises(Boom):
        trainer.fit(TinyModel(fail_in="training_step"), make_loader())
    assert seen == [signal.SIG_IGN]
    assert signal.getsignal(signal.SIGINT) is before


def _val_check_inputs(epoch_validates: bool) -> list[Any]:
    """Every combination of what the val_check guards read, as runs (plain namespaces: the guards only read)."""
    runs = []
    for is_last, interval, fetches, stop, time_passed, every, batch_idx in product(
        (False, True), (math.inf, None, 1, 3), (False, True), (False, True), (False, True), (None, 1), (0, 2)
    ):
        trainer = SimpleNamespace(
            should_stop=stop,
            min_epochs=None,
            min_steps=None,
            current_epoch=0,
            global_step=batch_idx,
            limit_train_batches=3,
            check_val_every_n_epoch=every,
        )
        loop = SimpleNamespace(
            epoch_validates=epoch_validates,
            is_last_batch=is_last,
            val_check_batch=interval,
            fetches_itself=fetches,
            batch_idx=batch_idx,
            total_batch_idx=batch_idx,
            time_for_validation=lambda passed=time_passed: passed,
        )
        runs.append(SimpleNamespace(trainer=trainer, fit_loop=loop))
    return runs


def test_every_val_check_guard_requires_a_validating_epoch_and_fails_without_one() -> None:
    """The training loop polls val_check only where a candidate may pass: the table says each built-in val_check
    guard requires `epoch_validates`, so each must fail in an epoch that does not validate, whatever else holds
    (and each can pass in one that does, so the inputs above reach it)."""
    specs = TABLE.guard_specs
    names = [t.guard_name for t in TABLE.transitions if t.trigger == "val_check"]
    assert names and None not in names, "every val_check edge has a guard"
    assert resolve(specs["epoch_validates"].path)(_val_check_inputs(epoch_validates=False)[0]) is False
    for name in names:
        assert specs[name].requires == "epoch_validates", name
        guard = resolve(specs[name].path)
        assert not any(guard(run) for run in _val_check_inputs(epoch_validates=False)), name
        assert any(guard(run) for run in _val_check_inputs(epoch_validates=True)), name


def test_an_epoch_that_does_not_validate_asks_no_val_check_guard_but_a_users_candidate_is_still_polled(
    tmp_path: Any,
) -> None:
    """`check_val_every_n_epoch=2`: the first epoch does not validate, so its batches ask none of the table's
    val_check guards (their requirement fails once per epoch); the second validates at its end."""

    def counts(name: str) -> tuple[int, int]:  # (true, false) so far in this session
        return COVERAGE.guard_counts(name)

    before = {name: counts(name) for name in ("epoch_validates", "val_batches_counted")}
    trainer = quiet_trainer(
        tmp_path, max_epochs=2, limit_train_batches=3, limit_val_batches=1, check_val_every_n_epoch=2
    )
    trainer.fit(TinyModel(), make_loader(), make_loader())
    added = {name: tuple(a - b for a, b in zip(counts(name), before[name])) for name in before}
    assert added["epoch_validates"] == (1, 1)  # asked once per epoch: the second validates, the first does not
    assert added["val_batches_counted"] == (1, 2)  # asked by the second epoch's three batches alone
    assert [r.batch_idx for r in trainer.history if r.trigger == "val_check"] == [2]
