"""Cluster environments (Lightning's `lightning.pytorch.plugins.environments`)."""

from devices.environments import ClusterEnvironment, LightningEnvironment, SLURMEnvironment, TorchElasticEnvironment

__all__ = ["ClusterEnvironment", "LightningEnvironment", "SLURMEnvironment", "TorchElasticEnvironment"]
