"""`lightning.pytorch.callbacks.device_stats_monitor`."""

from stages.callbacks.device_stats_monitor import DeviceStatsMonitor

__all__ = ["DeviceStatsMonitor"]
