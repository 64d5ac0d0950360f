"""`class_only`: a classmethod that refuses to run on an instance.

`model.load_from_checkpoint(path)` on an instance builds and returns a new object while leaving `model` unchanged,
a silent mistake; Lightning refuses it, and so does this.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


class class_only:  # lower case: used as a decorator, like classmethod
    def __init__(self, method: Callable[..., Any]) -> None:
        self.method = method
        functools.update_wrapper(self, method)  # type: ignore[arg-type]

    def __get__(self, instance: Any, owner: type) -> Callable[..., Any]:
        # TorchScript reads every attribute of a module it compiles; that read must not raise
        if instance is not None and not instance.__dict__.get("_jit_is_scripting", False):
            name = f"{owner.__name__}.{self.method.__name__}"
            raise TypeError(
                f"{name} is a classmethod: call it on the class and use its result, e.g. model = {name}(path)"
            )
        return functools.partial(self.method, owner)
