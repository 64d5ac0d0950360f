"""Signals during a run.

SIGTERM: note it, and let the loops raise at the next safe point (so `on_exception` can save a checkpoint).
SIGINT: the first Ctrl-C of a run raises KeyboardInterrupt and, in the same handler, makes further presses
ignored until the run has shut down: no second press can cut the interrupt path short.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

from statemachine import requeue

_log = logging.getLogger(__name__)


class SignalConnector:
    """Installs the SIGTERM handler for one run and restores it at teardown; keeps SIGINT guarded from the run's
    start until its entry point returns (a shutdown after a failure ignores it)."""

    def __init__(self, trainer: Any):
        self.trainer = trainer
        self._previous: Any = None
        self._installed = False
        self._previous_sigint: Any = None  # the SIGINT handler before the run; None: the run does not guard it
        self._requeue: tuple[signal.Signals, Any] | None = None

    def register(self) -> None:
        self.trainer.received_sigterm = False
        if threading.current_thread() is not threading.main_thread():
            return
        self._previous = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self._installed = True
        slurm = requeue.slurm_environment(self.trainer)
        if slurm is not None:
            self._requeue = (slurm.requeue_signal, signal.getsignal(slurm.requeue_signal))
            signal.signal(slurm.requeue_signal, lambda signum, frame: requeue.on_requeue_signal(self.trainer, slurm))

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        _log.info("received SIGTERM: the run stops at the next batch boundary")
        self.trainer.received_sigterm = True
        if callable(self._previous):
            self._previous(signum, frame)

    def guard_sigint(self) -> None:
        """For the whole run: Python's default Ctrl-C handler is replaced by one that also ignores the next presses.
        A handler the user installed stays in place until a failure's shutdown ignores SIGINT."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._previous_sigint = signal.getsignal(signal.SIGINT)
        if self._previous_sigint is signal.default_int_handler:
            signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    def release_sigint(self) -> None:
        """The run returned (its interrupt path, history dump included, is done): the handler from before the run
        is back."""
        if self._previous_sigint is not None:
            signal.signal(signal.SIGINT, self._previous_sigint)
            self._previous_sigint = None

    def ignore_sigint(self) -> None:
        """Shutting down after a failure: a press now must not cut the shutdown short (until `release_sigint`)."""
        if self._previous_sigint is not None:
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    def restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False
        if self._requeue is not None:
            signal.signal(*self._requeue)
            self._requeue = None
