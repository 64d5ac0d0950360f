"""`lightning.fabric.utilities.cloud_io` (as trainer-side code imports it): the filesystem of a path."""

from statemachine.core.saving import get_filesystem

__all__ = ["get_filesystem"]
