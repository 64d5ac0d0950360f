"""BaseFinetuning and BackboneFinetuning: freeze parts of a model before training and unfreeze them later, each
unfrozen part joining the optimizer as a new parameter group."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Generator, Iterable
from typing import Any

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim import Optimizer

from stages.callbacks.callback import Callback
from stages.exceptions import MisconfigurationException, TrainerWarning

_log = logging.getLogger(__name__)

Modules = nn.Module | Iterable[nn.Module | Iterable[Any]]


class BaseFinetuning(Callback):
    """Subclass it: `freeze_before_training(pl_module)` runs when fit sets up, and
    `finetune_function(pl_module, epoch, optimizer)` at each training epoch start for every optimizer.

    The parameter groups added during training are remembered (by parameter name) in this callback's state, so
    a resumed fit rebuilds them before the optimizer state is loaded back."""

    def __init__(self) -> None:
        self._internal_optimizer_metadata: dict[int, list[dict[str, Any]]] = {}
        self._restarting = False

    def state_dict(self) -> dict[str, Any]:
        return {"internal_optimizer_metadata": self._internal_optimizer_metadata}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restarting = True
        self._internal_optimizer_metadata = state_dict["internal_optimizer_metadata"]

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self.freeze_before_training(pl_module)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if not self._restarting:
            return
        by_name = dict(pl_module.named_parameters())
        for index, optimizer in enumerate(trainer.optimizers):
            saved = self._internal_optimizer_metadata[index]
            configured = len(optimizer.param_groups)
            optimizer.param_groups = [_with_params(group, [by_name[n] for n in group["params"]]) for group in saved]
            # freeze_before_training froze them again at setup; the groups added during training were unfrozen
            for group in saved[configured:]:
                for name in group["params"]:
                    by_name[name].requires_grad = True
                    owner = pl_module.get_submodule(name.rpartition(".")[0])
                    if isinstance(owner, _BatchNorm):
                        owner.track_running_stats = True
        self._restarting = False

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        for index, optimizer in enumerate(trainer.optimizers):
            before = len(optimizer.param_groups)
            self.finetune_function(pl_module, trainer.current_epoch, optimizer)
            self._remember(pl_module, index, before, optimizer.param_groups)

    def _remember(self, pl_module: Any, index: int, before: int, groups: list[dict[str, Any]]) -> None:
        names = {param: name for name, param in pl_module.named_parameters()}
        known = self._internal_optimizer_metadata.get(index)
        if known is None:
            self._internal_optimizer_metadata[index] = [_named(group, names) for group in groups]
        elif len(groups) != before:
            known.extend(_named(group, names) for group in groups[before:])

    def freeze_before_training(self, pl_module: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define freeze_before_training(pl_module)")

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: Optimizer) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define finetune_function(pl_module, epoch, optimizer)")

    @staticmethod
    def flatten_modules(modules: Modules) -> list[nn.Module]:
        """The leaf modules, plus parent modules that hold parameters of their own."""
        if isinstance(modules, nn.ModuleDict):
            modules = modules.values()
        if isinstance(modules, nn.Module):
            candidates: Iterable[nn.Module] = modules.modules()
        else:
            candidates = [leaf for module in modules for leaf in BaseFinetuning.flatten_modules(module)]
        return [m for m in candidates if not list(m.children()) or m._parameters]

    @staticmethod
    def filter_params(
        modules: Modules, train_bn: bool = True, requires_grad: bool = True
    ) -> Generator[nn.Parameter, None, None]:
        """The parameters whose `requires_grad` equals `requires_grad`; BatchNorm's skipped unless `train_bn`."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and not train_bn:
                continue
            # own parameters only: a parent holding parameters is listed next to its children
            for param in module.parameters(recurse=False):
                if param.requires_grad == requires_grad:
                    yield param

    @staticmethod
    def make_trainable(modules: Modules) -> None:
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm):
                module.track_running_stats = True
            for param in module.parameters(recurse=False):
                param.requires_grad = True

    @staticmethod
    def freeze_module(module: nn.Module) -> None:
        if isinstance(module, _BatchNorm):
            module.track_running_stats = False
        for param in module.parameters(recurse=False):
            param.requires_grad = False

    @staticmethod
    def freeze(modules: Modules, train_bn: bool = True) -> None:
        """Freeze every parameter of `modules`; BatchNorm layers stay trainable when `train_bn`."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and train_bn:
                BaseFinetuning.make_trainable(module)
            else:
                BaseFinetuning.freeze_module(module)

    @staticmethod
    def filter_on_optimizer(optimizer: Optimizer, params: Iterable[nn.Parameter]) -> list[nn.Parameter]:
        """`params` without those the optimizer already holds (a parameter may belong to one group only)."""
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        params = list(params)
        kept = [p for p in params if id(p) not in held]
        if len(kept) != len(params):
            warnings.warn(
                f"{len(params) - len(kept)} of the parameters to unfreeze are already in an optimizer group and were "
                f"skipped. Hint: build the optimizer from trainable parameters only, e.g. "
                f"{type(optimizer).__name__}(filter(lambda p: p.requires_grad, self.parameters()), ...)",
                TrainerWarning,
                stacklevel=2,
            )
        return kept

    @staticmethod
    def unfreeze_and_add_param_group(
        modules: Modules,
        optimizer: Optimizer,
        lr: float | None = None,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
    ) -> None:
        """Unfreeze `modules` and add their parameters as a new group with learning rate `lr`, or the first
        group's learning rate divided by `initial_denom_lr` when `lr` is None."""
        BaseFinetuning.make_trainable(modules)
        group_lr = optimizer.param_groups[0]["lr"] / initial_denom_lr if lr is None else float(lr)
        trainable = BaseFinetuning.filter_params(modules, train_bn=train_bn, requires_grad=True)
        params = BaseFinetuning.filter_on_optimizer(optimizer, trainable)
        if params:
            optimizer.add_param_group({"params": params, "lr": group_lr})


def multiplicative(epoch: int) -> float:
    return 2.0


class BackboneFinetuning(BaseFinetuning):
    """Freezes `pl_module.backbone` before training and unfreezes it at `unfreeze_backbone_at_epoch`, with
    learning rate `backbone_initial_lr` (default: the current lr times `backbone_initial_ratio_lr`). From the
    next epoch its lr is multiplied by `lambda_func(epoch + 1)` each epoch, capped at the main lr when
    `should_align`."""

    def __init__(
        self,
        unfreeze_backbone_at_epoch: int = 10,
        lambda_func: Callable[[int], float] = multiplicative,
        backbone_initial_ratio_lr: float = 10e-2,
        backbone_initial_lr: float | None = None,
        should_align: bool = True,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
        verbose: bool = False,
        rounding: int = 12,
    ) -> None:
        super().__init__()
        if isinstance(unfreeze_backbone_at_epoch, bool) or not isinstance(unfreeze_backbone_at_epoch, int):
            raise ValueError(f"unfreeze_backbone_at_epoch {unfreeze_backbone_at_epoch!r} must be an int")
        if not callable(lambda_func):
            raise ValueError(f"lambda_func {lambda_func!r} must be a callable taking the epoch")
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.verbose = verbose
        self.rounding = rounding
        self.previous_backbone_lr: float | None = None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "previous_backbone_lr": self.previous_backbone_lr}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.previous_backbone_lr = state_dict["previous_backbone_lr"]
        super().load_state_dict(state_dict)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if not isinstance(getattr(pl_module, "backbone", None), nn.Module):
            raise MisconfigurationException(
                "BackboneFinetuning needs the LightningModule to have an nn.Module attribute `backbone`"
            )
        super().setup(trainer, pl_module, stage)

    def freeze_before_training(self, pl_module: Any) -> None:
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: Optimizer) -> None:
        if epoch < self.unfreeze_backbone_at_epoch:
            return
        current_lr = optimizer.param_groups[0]["lr"]
        if epoch == self.unfreeze_backbone_at_epoch:
            backbone_lr = (
                self.backbone_initial_lr
                if self.backbone_initial_lr is not None
                else current_lr * self.backbone_initial_ratio_lr
            )
            self.unfreeze_and_add_param_group(
                pl_module.backbone,
                optimizer,
                backbone_lr,
                train_bn=self.train_bn,
                initial_denom_lr=self.initial_denom_lr,
            )
        else:
            if self.previous_backbone_lr is None:
                raise RuntimeError(
                    f"BackboneFinetuning is at epoch {epoch}, after unfreeze_backbone_at_epoch="
                    f"{self.unfreeze_backbone_at_epoch}, without the backbone lr: resume from a checkpoint saved with "
                    "this callback"
                )
            backbone_lr = self.lambda_func(epoch + 1) * self.previous_backbone_lr
            if self.should_align and backbone_lr > current_lr:
                backbone_lr = current_lr
            optimizer.param_groups[-1]["lr"] = backbone_lr
        self.previous_backbone_lr = backbone_lr
        if self.verbose:
            _log.info(
                "Current lr: %s, Backbone lr: %s", round(current_lr, self.rounding), round(backbone_lr, self.rounding)
            )


def _named(group: dict[str, Any], names: dict[nn.Parameter, str]) -> dict[str, Any]:
    return _with_params(group, [names[param] for param in group["params"]])


def _with_params(group: dict[str, Any], params: list[Any]) -> dict[str, Any]:
    return {**{key: value for key, value in group.items() if key != "params"}, "params": params}
