"""Accelerators: which kind of hardware runs the model, and how a `devices` request maps onto it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

_DEVICES_HELP = "an int > 0, a list of device indices, a string such as '1' or '0,1', -1 or 'auto'"


class Accelerator(ABC):
    """One kind of hardware. Stateless apart from what the device runtime itself keeps."""

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def is_available(cls) -> bool:
        """Whether this kind of hardware can be used in this process."""

    @classmethod
    @abstractmethod
    def auto_device_count(cls) -> int:
        """How many devices `devices="auto"` means."""

    @classmethod
    @abstractmethod
    def parse_devices(cls, devices: Any) -> list[int]:
        """Turn a user's `devices` value into the indices of the devices (or processes) it asks for."""

    @abstractmethod
    def device_for(self, index: int) -> torch.device:
        """The torch device for one parsed index."""

    @abstractmethod
    def setup_device(self, device: torch.device) -> None:
        """Prepare `device` for this process before the model moves onto it."""

    @abstractmethod
    def teardown(self) -> None:
        """Release what the runtime holds once the run is over."""

    def _check_device_type(self, device: torch.device) -> None:
        if device.type != self.name:
            raise ValueError(
                f"{type(self).__name__} cannot set up device {str(device)!r}: expected a {self.name!r} device"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class CPUAccelerator(Accelerator):
    """The CPU. For it, an int `devices` counts processes, as in Lightning."""

    name: ClassVar[str] = "cpu"

    @classmethod
    def is_available(cls) -> bool:
        return True

    @classmethod
    def auto_device_count(cls) -> int:
        return 1

    @classmethod
    def parse_devices(cls, devices: Any) -> list[int]:
        count = devices
        if isinstance(devices, str):
            text = devices.strip()
            if text == "auto":
                count = cls.auto_device_count()
            elif text.isdigit():
                count = int(text)
        if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
            # Lightning also refuses lists and -1 for the CPU: there is no set of CPU "devices" to index.
            zero = count == 0 and not isinstance(count, bool)
            lightning = (
                f"`Trainer(devices={devices!r})` value is not a valid input using cpu accelerator."
                if zero
                else "`devices` selected with `CPUAccelerator` should be an int > 0."
            )
            raise ValueError(
                f"{lightning} devices={devices!r}: use an int > 0 (the number of processes), a string of digits "
                "such as '1', or 'auto'"
            )
        return list(range(count))

    def device_for(self, index: int) -> torch.device:
        return torch.device("cpu")

    def setup_device(self, device: torch.device) -> None:
        self._check_device_type(device)

    def teardown(self) -> None:
        """The CPU keeps no per-run runtime state to release."""


class CUDAAccelerator(Accelerator):
    """NVIDIA GPUs through torch.cuda. An int `devices` counts GPUs; a list names their indices."""

    name: ClassVar[str] = "cuda"

    @classmethod
    def is_available(cls) -> bool:
        return torch.cuda.is_available()

    @classmethod
    def auto_device_count(cls) -> int:
        return torch.cuda.device_count()

    @classmethod
    def parse_devices(cls, devices: Any) -> list[int]:
        available = cls.auto_device_count()
        requested = _normalise_gpu_request(devices)
        if requested == "auto" or requested == -1:
            if available == 0:
                raise ValueError(f"devices={devices!r} asks for every CUDA device, but none is visible")
            return list(range(available))
        indices = list(range(requested)) if isinstance(requested, int) else [int(index) for index in requested]
        if len(set(indices)) != len(indices):
            raise ValueError(f"devices={devices!r} names a CUDA device more than once; indices must be unique")
        missing = [index for index in indices if index >= available]
        if missing:
            raise ValueError(
                f"devices={devices!r} asks for CUDA device(s) {missing}, but only {available} "
                f"device(s) are visible (indices 0 to {available - 1})"
            )
        return indices

    def device_for(self, index: int) -> torch.device:
        return torch.device("cuda", index)

    def setup_device(self, device: torch.device) -> None:
        self._check_device_type(device)
        # Kernels launched without an explicit device (and NCCL later) go to the current device.
        torch.cuda.set_device(device)

    def teardown(self) -> None:
        # Hand cached blocks back so a later run or another process in this job can use them.
        torch.cuda.empty_cache()


def _normalise_gpu_request(devices: Any) -> int | list[int] | str:
    """Lightning's GPU `devices` syntax: a count, -1, 'auto', an index list, or a string of one of these."""
    bad = ValueError(f"devices={devices!r} is not valid for the 'cuda' accelerator: use {_DEVICES_HELP}")
    if isinstance(devices, str):
        text = devices.strip()
        if text in ("auto", "-1"):
            return "auto"
        if "," in text:
            parts = [part.strip() for part in text.split(",") if part.strip()]
            if not parts or not all(part.isdigit() for part in parts):
                raise bad
            return [int(part) for part in parts]
        if not text.isdigit():
            raise bad
        devices = int(text)
    if isinstance(devices, bool):
        raise bad
    if isinstance(devices, int):
        if devices == -1:
            return "auto"
        if devices <= 0:
            raise bad
        return devices
    if isinstance(devices, (list, tuple)):
        if not devices or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in devices):
            raise bad
        return list(devices)
    raise bad
