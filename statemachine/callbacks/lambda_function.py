"""`lightning.pytorch.callbacks.lambda_function`."""

from stages.callbacks.lambda_function import LambdaCallback

__all__ = ["LambdaCallback"]
