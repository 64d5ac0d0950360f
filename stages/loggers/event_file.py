"""TensorBoard's event file, written in the caller's thread.

torch's SummaryWriter hands every event to a background thread and, on `flush`, waits for that thread to write
them. The TensorBoard logger flushes after every logging step (as Lightning's does), and each hand-off contends
for the GIL with the training loop: about half a millisecond per logging step on a small model. `EventFile` writes
the same records (tensorboard's own `RecordWriter` framing) into a buffered file in the caller's thread, and
`flush` writes them out, so what a flush returns from is on disk as before, without a second thread.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.summary.writer.record_writer import RecordWriter
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.writer import FileWriter

# Event files of one process get distinct names even when made in the same second, as tensorboard's own do.
_file_numbers = itertools.count()


class EventFile:
    """One new event file in `log_dir`, named as TensorBoard expects (`events.out.tfevents.<time>.<host>...`),
    starting with the file-version event. The methods are the ones torch's FileWriter calls on its event writer;
    a lock keeps records whole when several threads log."""

    def __init__(self, log_dir: str, filename_suffix: str) -> None:
        os.makedirs(log_dir, exist_ok=True)
        self._log_dir = log_dir
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}."
        path = os.path.join(log_dir, f"{name}{next(_file_numbers)}{filename_suffix}")
        self._file = open(path, "wb")  # open until close(), as tensorboard keeps its own
        self._records = RecordWriter(self._file)
        self._lock = threading.Lock()
        self.add_event(Event(wall_time=time.time(), file_version="brain.Event:2"))
        self.flush()

    def get_logdir(self) -> str:
        return self._log_dir

    def add_event(self, event: Event) -> None:
        record = event.SerializeToString()
        with self._lock:
            self._records.write(record)

    def flush(self) -> None:
        with self._lock:
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class _EventFileWriter(FileWriter):
    """torch's FileWriter (how SummaryWriter builds events) over an `EventFile`."""

    def __init__(self, log_dir: str, filename_suffix: str) -> None:  # FileWriter.__init__ would start the thread
        self.event_writer = EventFile(log_dir, filename_suffix)


class SynchronousSummaryWriter(SummaryWriter):
    """torch's SummaryWriter, every `add_*` method as documented, writing its event files with `EventFile`."""

    def _get_file_writer(self) -> FileWriter:
        # torch makes its file writer here, on construction and again after close(); purge_step is not offered.
        # Its two attributes are set through vars(): torch's annotations type them as always None.
        state = vars(self)
        writer = state["file_writer"]
        if writer is None or state["all_writers"] is None:
            writer = _EventFileWriter(str(self.log_dir), self.filename_suffix)
            state["file_writer"], state["all_writers"] = writer, {writer.get_logdir(): writer}
        return writer
