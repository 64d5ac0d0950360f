"""`lightning.pytorch.callbacks.throughput_monitor`."""

from stages.callbacks.throughput_monitor import ThroughputMonitor

__all__ = ["ThroughputMonitor"]
