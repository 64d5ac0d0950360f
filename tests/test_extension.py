"""Users extend the machine: a derived table with their own state, handler, guard and callbacks runs end to end,
is validated like the built-in one, and the diagram, history check and coverage all work on it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import TinyModel, make_loader, quiet_trainer, run_example

import statemachine as L
from statemachine.config import InvalidTrainerArguments
from statemachine.engine.coverage import COVERAGE
from statemachine.engine.diagram import build_graph
from statemachine.engine.history import check_path
from statemachine.engine.history import main as history_main

STOP = L.TABLE.by_key["epoch_boundary: fitting.between_epochs -> finished [fit_done]"]
WARMUP_EDGE = "train_ready: fitting.train_setup -> fitting.warming_up [needs_warmup]"


def training_stage(name: str, handler: str) -> L.StateSpec:
    """A running state of fit's training stage, with its handler."""
    return L.StateSpec(
        name=name,
        status=L.TrainerStatus.RUNNING,
        fn=L.TrainerFn.FITTING,
        stage=L.RunningStage.TRAINING,
        handler=handler,
    )


# ---- a warm-up stage: a few batches at a low learning rate before training starts --------------------------


def needs_warmup(run: Any) -> bool:
    return run.model.warmup_batches > 0 and not fit_done_now(run)


def fit_done_now(run: Any) -> bool:
    from statemachine.guards import fit_done

    return bool(fit_done(run))


def warm_up(run: Any) -> str:
    """`fitting.warming_up`: the module's warm-up batches, without an optimizer step counted by the trainer."""
    module = run.model
    for x, _ in list(run.trainer.train_dataloader)[: module.warmup_batches]:
        module.warmed.append(float(module.layer(x).sum().detach()))
    return "warmed_up"


def note_warmup(run: Any) -> str:
    return f"warm-up ran {len(run.model.warmed)} batches"


WARMUP = L.TABLE.extend(
    name="trainer+warmup",
    states=[training_stage("fitting.warming_up", handler="warm_up")],
    transitions=[
        L.TransitionSpec(
            trigger="train_ready", source="fitting.train_setup", dest="fitting.warming_up", guard="needs_warmup"
        ),
        L.TransitionSpec(
            trigger="warmed_up",
            source="fitting.warming_up",
            dest="fitting.between_epochs",
            after=("start_training", "note_warmup"),
        ),
    ],
    guards={"needs_warmup": needs_warmup},
    callbacks={"note_warmup": note_warmup},
    handlers={"warm_up": warm_up},
)


class WarmModel(TinyModel):
    def __init__(self, warmup_batches: int = 2):
        super().__init__()
        self.warmup_batches = warmup_batches
        self.warmed: list[float] = []


def test_an_extended_table_runs_its_stage_and_records_it(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, table=WARMUP, limit_train_batches=3)
    model = WarmModel(warmup_batches=2)
    trainer.fit(model, make_loader())
    assert len(model.warmed) == 2 and trainer.global_step == 3 and trainer.state.finished
    path = [r.end_state for r in trainer.history]
    assert path == ["fitting.setup", "fitting.train_setup", "fitting.warming_up", "fitting.between_epochs"] + [
        "fitting.training",
        "fitting.between_epochs",
        "finished",
    ]
    warmed = trainer.history[3]
    assert warmed.transition == "warmed_up: fitting.warming_up -> fitting.between_epochs"
    assert [(c.name, c.note) for c in warmed.callbacks] == [
        ("start_training", None),
        ("note_warmup", "warm-up ran 2 batches"),
    ]
    assert check_path(trainer.history, WARMUP) == []
    assert check_path(trainer.history) != []  # not a legal path through the built-in table
    assert COVERAGE.hits(WARMUP_EDGE) >= 1 and WARMUP in COVERAGE.tables


def test_the_built_in_edge_still_runs_when_the_new_guard_is_false(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, table=WARMUP, limit_train_batches=2)
    model = WarmModel(warmup_batches=0)
    trainer.fit(model, make_loader())
    assert model.warmed == [] and trainer.history[2].end_state == "fitting.between_epochs"
    assert [(g.name, g.value) for g in trainer.history[2].guards] == [
        ("needs_warmup", False),
        ("fit_done", False),
        ("needs_val_loaders", False),
        ("resumes_mid_epoch", False),
    ]


def test_a_failure_in_a_users_stage_takes_its_interrupt_edge(tmp_path: Any) -> None:
    class Broken(WarmModel):
        @property
        def warmed(self) -> list[float]:
            raise ZeroDivisionError("warm-up failed")

        @warmed.setter
        def warmed(self, value: list[float]) -> None:
            pass

    trainer = quiet_trainer(tmp_path, table=WARMUP, limit_train_batches=2)
    with pytest.raises(ZeroDivisionError):
        trainer.fit(Broken(), make_loader())
    last = trainer.history[-1]
    assert (last.transition, last.dest) == ("interrupt: fitting.warming_up -> interrupted", "interrupted")


def test_the_diagram_and_the_history_command_take_the_extended_table(tmp_path: Any, capsys: Any) -> None:
    source = build_graph(WARMUP).source
    assert "warming_up" in source and "needs_warmup" in source and "note_warmup" in source
    trainer = quiet_trainer(tmp_path, table=WARMUP, limit_train_batches=2)
    trainer.fit(WarmModel(), make_loader())
    dump = trainer.dump_history(tmp_path / "run.json")
    assert history_main(["check", dump, "--table", "test_extension:WARMUP"]) == 0
    assert capsys.readouterr().out == f"legal path: {len(trainer.history)} records\n"
    assert history_main(["check", dump]) == 1  # against the built-in table it is not legal


# ---- validation: errors name the problem ------------------------------------------------------------------


def warming_state(**changes: Any) -> L.StateSpec:
    spec = {
        "name": "fitting.warming_up",
        "status": L.TrainerStatus.RUNNING,
        "fn": L.TrainerFn.FITTING,
        "stage": L.RunningStage.TRAINING,
        "handler": "warm_up",
    }
    return L.StateSpec(**{**spec, **changes})


def test_an_unknown_handler_is_named() -> None:
    with pytest.raises(ValueError, match="state 'fitting.warming_up' has no known handler \\(got 'warm_up'\\)"):
        L.TABLE.extend(states=[warming_state()])


def test_an_unreachable_state_and_one_without_a_normal_end_are_named() -> None:
    with pytest.raises(ValueError) as error:
        L.TABLE.extend(states=[warming_state()], handlers={"warm_up": warm_up})
    assert "state 'fitting.warming_up' is unreachable from 'idle'" in str(error.value)
    edge = L.TransitionSpec(
        trigger="train_ready", source="fitting.train_setup", dest="fitting.warming_up", guard="needs_warmup"
    )
    with pytest.raises(ValueError, match="'fitting.warming_up' cannot reach a resting state without an interrupt"):
        L.TABLE.extend(
            states=[warming_state()],
            transitions=[edge],
            handlers={"warm_up": warm_up},
            guards={"needs_warmup": needs_warmup},
        )


def test_unknown_guards_and_callbacks_are_named() -> None:
    edge = L.TransitionSpec(
        trigger="val_check", source="fitting.training", dest="fitting.validating", guard="bogus", before=("nope",)
    )
    with pytest.raises(ValueError) as error:
        L.TABLE.extend(transitions=[edge])
    message = str(error.value)
    assert "unknown guard 'bogus'" in message and "unknown callbacks ['nope']" in message


def test_a_candidate_that_can_never_fire_is_named() -> None:
    shadowing = STOP.model_copy(update={"dest": "interrupted", "before": ()})
    with pytest.raises(ValueError, match=re.escape(f"{STOP.key} can never fire: an earlier candidate always wins")):
        L.TABLE.extend(transitions=[shadowing])


def test_bad_edits_are_named() -> None:
    with pytest.raises(ValueError, match="remove: no transition 'go: a -> b'"):
        L.TABLE.extend(remove=["go: a -> b"])
    with pytest.raises(ValueError, match="add_after: no transition 'go: a -> b'"):
        L.TABLE.extend(add_after={"go: a -> b": ("x",)})
    with pytest.raises(ValueError, match="lambdas and nested functions cannot"):
        L.TABLE.extend(callbacks={"x": lambda run: None})


def test_a_path_that_does_not_import_is_refused_when_the_trainer_is_built(tmp_path: Any) -> None:
    table = L.TABLE.extend(
        add_after={STOP.key: ("celebrate",)}, callbacks={"celebrate": "no_such_module_here:celebrate"}
    )
    with pytest.raises(ValueError, match="callback 'celebrate': No module named 'no_such_module_here'"):
        quiet_trainer(tmp_path, table=table)
    with pytest.raises(InvalidTrainerArguments, match="table: expected a MachineTable"):
        quiet_trainer(tmp_path, table="trainer")


def test_callbacks_added_to_an_existing_edge_run_there(tmp_path: Any) -> None:
    table = L.TABLE.extend(add_after={STOP.key: ("note_warmup",)}, callbacks={"note_warmup": note_warmup})
    trainer = quiet_trainer(tmp_path, table=table, limit_train_batches=1)
    trainer.fit(WarmModel(), make_loader())
    stop = trainer.history[-1]
    assert [c.name for c in stop.callbacks][-1] == "note_warmup"
    assert stop.callbacks[-1].note == "warm-up ran 0 batches"


# ---- a per-batch stage of the user's, polled with validation --------------------------------------------


def probe_due(run: Any) -> bool:
    return run.fit_loop.batch_idx == 1


def probe(run: Any) -> str:
    run.model.probed_at.append((run.fit_loop.batch_idx, run.trainer.global_step))
    return "probed"


PROBING = L.TABLE.extend(
    name="trainer+probing",
    states=[training_stage("fitting.probing", handler="probe")],
    transitions=[
        L.TransitionSpec(trigger="val_check", source="fitting.training", dest="fitting.probing", guard="probe_due"),
        L.TransitionSpec(trigger="probed", source="fitting.probing", dest="fitting.training"),
    ],
    guards={"probe_due": probe_due},
    handlers={"probe": probe},
)


class ProbedModel(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.probed_at: list[tuple[int, int]] = []


def test_a_users_candidate_for_the_per_batch_poll_pauses_the_epoch_at_its_batch(tmp_path: Any) -> None:
    """`val_check` in training has two candidates here: the user's first (an extension's edges come first), then
    validation's. The poll asks them in that order, each guard once, and the first that passes decides."""
    trainer = quiet_trainer(tmp_path, table=PROBING, limit_train_batches=3, limit_val_batches=1)
    model = ProbedModel()
    trainer.fit(model, make_loader(), make_loader())
    assert model.probed_at == [(1, 2)] and trainer.global_step == 3 and trainer.state.finished
    polled = [r for r in trainer.history if r.trigger == "val_check"]
    assert [(r.batch_idx, r.dest, [(g.name, g.value) for g in r.guards]) for r in polled] == [
        (1, "fitting.probing", [("probe_due", True)]),
        (
            2,
            "fitting.validating",
            [
                ("probe_due", False),
                ("validates_at_epoch_end", False),  # the loader has a length: the epoch's end is counted in batches
                ("validates_before_stop", False),
                ("val_time_elapsed", False),
                ("val_batches_counted", True),
            ],
        ),
    ]
    assert check_path(trainer.history, PROBING) == []


def test_a_failure_in_a_polled_stage_takes_its_interrupt_edge_mid_epoch(tmp_path: Any) -> None:
    class FailingRecord(list):
        def append(self, item: Any) -> None:
            raise ZeroDivisionError("probe failed")

    model = ProbedModel()
    model.probed_at = FailingRecord()
    trainer = quiet_trainer(tmp_path, table=PROBING, limit_train_batches=3, limit_val_batches=0)
    with pytest.raises(ZeroDivisionError, match="probe failed"):
        trainer.fit(model, make_loader())
    last = trainer.history[-1]
    assert (last.transition, last.dest) == ("interrupt: fitting.probing -> interrupted", "interrupted")
    assert trainer.global_step == 2  # the epoch went no further than the probed batch


# ---- the README's example ----------------------------------------------------------------------------------


def test_the_calibration_example_calibrates_after_training(tmp_path: Path) -> None:
    lines = run_example("calibration", "--epochs", "1", "--root", str(tmp_path)).splitlines()
    temperature = float(lines[-2].removeprefix("fitted temperature: "))
    assert temperature > 0 and temperature != 1.0
    assert lines[-1].endswith("fitting.training -> fitting.between_epochs -> fitting.calibrating -> finished")


# ---- a callback that needs states of its own ---------------------------------------------------------------


class NeedsWarmup(L.Callback):
    """Declares the warm-up stage it relies on: the trainer extends its table with it before the run."""

    def extend_table(self, table: L.MachineTable) -> L.MachineTable:
        return WARMUP if table is L.TABLE else table


def test_a_callbacks_extend_table_extends_the_machine_before_the_run(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, limit_train_batches=2)
    model = WarmModel(warmup_batches=1)
    trainer.validate(model, make_loader())
    assert trainer.table is L.TABLE
    trainer.callbacks.append(NeedsWarmup())
    trainer.fit(model, make_loader())
    assert trainer.table is WARMUP and len(model.warmed) == 1
    # one history across the change: both runs, a legal path through the extended table
    assert [r.trigger for r in trainer.history][:2] == ["validate", "finish"]
    assert "fitting.warming_up" in [r.end_state for r in trainer.history]
    assert check_path(trainer.history, WARMUP) == []


def test_a_guard_requiring_an_unknown_guard_is_named() -> None:
    with pytest.raises(ValueError, match="guard 'late' requires unknown guard 'never_declared'"):
        L.TABLE.extend(
            guards={"late": L.GuardSpec(name="late", path="statemachine.guards:fit_done", requires="never_declared")}
        )
