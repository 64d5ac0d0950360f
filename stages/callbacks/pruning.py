"""ModelPruning: prune weights with `torch.nn.utils.prune` during training, optionally rewinding the kept
weights to their initial values (lottery ticket hypothesis)."""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.nn.utils import prune

from stages.callbacks.callback import Callback
from stages.exceptions import MisconfigurationException
from stages.module import LightningModule

_log = logging.getLogger(__name__)

_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "ln_structured": prune.ln_structured,
    "l1_unstructured": prune.l1_unstructured,
    "random_structured": prune.random_structured,
    "random_unstructured": prune.random_unstructured,
}
_METHODS: dict[str, type[prune.BasePruningMethod]] = {
    "ln_structured": prune.LnStructured,
    "l1_unstructured": prune.L1Unstructured,
    "random_structured": prune.RandomStructured,
    "random_unstructured": prune.RandomUnstructured,
}
# containers hold no parameters of their own worth pruning
_CONTAINERS = (LightningModule, nn.Sequential, nn.ModuleList, nn.ModuleDict)

EpochFlag = bool | Callable[[int], bool]


class ModelPruning(Callback):
    """Prunes `parameters_to_prune` (pairs of module and parameter name; default: every module's
    `parameter_names`, which default to weight and bias) by `amount` (a fraction, a count, or a function of the
    epoch) at each training epoch end, or each validation epoch end with `prune_on_train_epoch_end=False`.

    `pruning_fn` is a name ("l1_unstructured", "random_unstructured", "ln_structured", "random_structured"), a
    `BasePruningMethod` subclass (global pruning only) or a function `fn(module, name, amount)` (local only).
    `use_global_unstructured` prunes all the parameters together (needs an unstructured method). With
    `use_lottery_ticket_hypothesis` the unpruned weights go back to their values from when fit set up (or to
    freshly drawn ones with `resample_parameters`). `make_pruning_permanent` removes the masks when training ends
    and saves checkpoints with the pruned weights folded in."""

    PARAMETER_NAMES = ("weight", "bias")

    def __init__(
        self,
        pruning_fn: Callable[..., Any] | str,
        parameters_to_prune: Sequence[tuple[nn.Module, str]] = (),
        parameter_names: list[str] | None = None,
        use_global_unstructured: bool = True,
        amount: int | float | Callable[[int], int | float] = 0.5,
        apply_pruning: EpochFlag = True,
        make_pruning_permanent: bool = True,
        use_lottery_ticket_hypothesis: EpochFlag = True,
        resample_parameters: bool = False,
        pruning_dim: int | None = None,
        pruning_norm: int | None = None,
        verbose: int = 0,
        prune_on_train_epoch_end: bool = True,
    ) -> None:
        self._use_global_unstructured = use_global_unstructured
        self._parameters_to_prune = parameters_to_prune
        self._use_lottery_ticket_hypothesis = use_lottery_ticket_hypothesis
        self._resample_parameters = resample_parameters
        self._prune_on_train_epoch_end = prune_on_train_epoch_end
        self._parameter_names = list(parameter_names or self.PARAMETER_NAMES)
        self._global_kwargs: dict[str, Any] = {}
        self._original_layers: dict[int, tuple[nn.Module, list[tuple[int, str]]]] | None = None
        bad_names = [name for name in self._parameter_names if name not in self.PARAMETER_NAMES]
        if bad_names:
            raise MisconfigurationException(
                f"parameter_names {bad_names} are not allowed; use names from {list(self.PARAMETER_NAMES)}"
            )
        self.pruning_fn = self._resolve_pruning_fn(pruning_fn, pruning_dim, pruning_norm)
        if use_global_unstructured and getattr(self.pruning_fn, "PRUNING_TYPE", None) != "unstructured":
            raise MisconfigurationException(
                f"use_global_unstructured=True needs an unstructured pruning method; {self._pruning_method_name} is "
                f"{getattr(self.pruning_fn, 'PRUNING_TYPE', 'not a BasePruningMethod')}"
            )
        if isinstance(amount, bool) or not (isinstance(amount, int | float) or callable(amount)):
            raise MisconfigurationException(f"amount={amount!r} must be an int, a float or a function of the epoch")
        if verbose not in (0, 1, 2):
            raise MisconfigurationException(f"verbose={verbose!r} must be 0, 1 or 2")
        self.amount = amount
        self._apply_pruning = apply_pruning
        self._make_pruning_permanent = make_pruning_permanent
        self._verbose = verbose

    def _resolve_pruning_fn(self, pruning_fn: Any, dim: int | None, norm: int | None) -> Callable[..., Any]:
        if isinstance(pruning_fn, str):
            name = pruning_fn.lower()
            if name not in _FUNCTIONS:
                raise MisconfigurationException(f"pruning_fn={pruning_fn!r} must be one of {list(_FUNCTIONS)}")
            options: dict[str, Any] = {}
            if name.endswith("_structured"):
                if dim is None:
                    raise MisconfigurationException(f"pruning_fn={name!r} (structured) needs pruning_dim")
                if name == "ln_structured":
                    if norm is None:
                        raise MisconfigurationException("pruning_fn='ln_structured' needs pruning_norm")
                    options["n"] = norm
                options["dim"] = dim
            if self._use_global_unstructured:
                self._global_kwargs = options
                self._pruning_method_name = _METHODS[name].__name__
                return _METHODS[name]
            self._pruning_method_name = _FUNCTIONS[name].__name__
            return partial(_FUNCTIONS[name], **options)
        if inspect.isclass(pruning_fn) and issubclass(pruning_fn, prune.BasePruningMethod):
            if not self._use_global_unstructured:
                raise MisconfigurationException(
                    "a BasePruningMethod subclass as pruning_fn needs use_global_unstructured=True"
                )
            self._pruning_method_name = pruning_fn.__name__
            return pruning_fn
        if callable(pruning_fn) and not isinstance(pruning_fn, prune.BasePruningMethod):
            self._pruning_method_name = getattr(pruning_fn, "__name__", type(pruning_fn).__name__)
            return pruning_fn
        raise MisconfigurationException(
            f"pruning_fn={pruning_fn!r} must be a name in {list(_FUNCTIONS)}, a BasePruningMethod subclass (the "
            "class, not an instance) or a function(module, name, amount)"
        )

    # ---- hooks ------------------------------------------------------------------------------------------

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        chosen = self.sanitize_parameters_to_prune(pl_module, self._parameters_to_prune, self._parameter_names)
        self._parameters_to_prune = self.filter_parameters_to_prune(chosen)
        if self._use_lottery_ticket_hypothesis:
            # one copy of each module's initial weights, shared by all of its pruned parameters
            self._original_layers = {}
            for index, (module, name) in enumerate(self._parameters_to_prune):
                entry = self._original_layers.setdefault(id(module), (copy.deepcopy(module), []))
                entry[1].append((index, name))

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._prune_on_train_epoch_end:
            self._run_pruning(pl_module.current_epoch)

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking and not self._prune_on_train_epoch_end:
            self._run_pruning(pl_module.current_epoch)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self._make_pruning_permanent:
            self.make_pruning_permanent(pl_module)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        if self._make_pruning_permanent:
            # the file gets the pruned weights; training keeps its masks
            checkpoint["state_dict"] = _folded_state_dict(pl_module)

    # ---- pruning ----------------------------------------------------------------------------------------

    def _run_pruning(self, epoch: int) -> None:
        should_prune = self._apply_pruning(epoch) if callable(self._apply_pruning) else self._apply_pruning
        amount = self.amount(epoch) if callable(self.amount) else self.amount
        if not should_prune or not amount:
            return
        self.apply_pruning(amount)
        rewind = self._use_lottery_ticket_hypothesis
        if rewind(epoch) if callable(rewind) else rewind:
            self.apply_lottery_ticket_hypothesis()

    def apply_pruning(self, amount: int | float) -> None:
        before = [_pruned_stats(module, name) for module, name in self._parameters_to_prune]
        if self._use_global_unstructured:
            accepted = set(inspect.signature(self.pruning_fn).parameters) - {"self"}
            options = {k: v for k, v in {**self._global_kwargs, "amount": amount}.items() if k in accepted}
            prune.global_unstructured(self._parameters_to_prune, pruning_method=self.pruning_fn, **options)
        else:
            for module, name in self._parameters_to_prune:
                self.pruning_fn(module, name=name, amount=amount)
        if self._verbose:
            after = [_pruned_stats(module, name) for module, name in self._parameters_to_prune]
            self._log_sparsity(before, after, amount)

    def _log_sparsity(self, before: list[tuple[int, int]], after: list[tuple[int, int]], amount: Any) -> None:
        total = sum(p.numel() for module, _ in self._parameters_to_prune for p in module.parameters())
        was, now = sum(zeros for zeros, _ in before), sum(zeros for zeros, _ in after)
        _log.info(
            "Applied %s. Pruned: %d/%d (%.2f%%) -> %d/%d (%.2f%%)",
            self._pruning_method_name,
            was,
            total,
            100 * was / total,
            now,
            total,
            100 * now / total,
        )
        if self._verbose == 2:
            for (module, name), (was_zeros, size), (now_zeros, _) in zip(self._parameters_to_prune, before, after):
                _log.info(
                    "Applied %s to %r.%s with amount=%s. Pruned: %d (%.2f%%) -> %d (%.2f%%)",
                    self._pruning_method_name,
                    module,
                    name,
                    amount,
                    was_zeros,
                    100 * was_zeros / size,
                    now_zeros,
                    100 * now_zeros / size,
                )

    def apply_lottery_ticket_hypothesis(self) -> None:
        """Reset the weights that survived pruning to their initial values (or to newly drawn ones)."""
        for original, names in (self._original_layers or {}).values():
            source = original
            if self._resample_parameters and callable(getattr(original, "reset_parameters", None)):
                source = copy.deepcopy(original)
                source.reset_parameters()  # type: ignore[operator]  # typed Tensor | Module; callable: checked above
            for index, name in names:
                module, _ = self._parameters_to_prune[index]
                _copy_param(module, source, name)

    def make_pruning_permanent(self, module: nn.Module) -> None:
        """Fold the masks into the weights and drop the pruning re-parametrisation."""
        for submodule in module.modules():
            for key, hook in list(submodule._forward_pre_hooks.items()):
                if isinstance(hook, prune.BasePruningMethod):
                    hook.remove(submodule)
                    del submodule._forward_pre_hooks[key]

    @staticmethod
    def sanitize_parameters_to_prune(
        pl_module: nn.Module,
        parameters_to_prune: Sequence[tuple[nn.Module, str]] = (),
        parameter_names: Sequence[str] = (),
    ) -> list[tuple[nn.Module, str]]:
        names = list(parameter_names or ModelPruning.PARAMETER_NAMES)
        modules = [m for m in pl_module.modules() if not isinstance(m, _CONTAINERS)]
        if not parameters_to_prune:
            return [(m, name) for name in names for m in modules if getattr(m, name, None) is not None]
        well_formed = isinstance(parameters_to_prune, list | tuple) and all(
            isinstance(pair, list | tuple)
            and len(pair) == 2
            and isinstance(pair[0], nn.Module)
            and isinstance(pair[1], str)
            for pair in parameters_to_prune
        )
        if not well_formed:
            raise MisconfigurationException(
                "parameters_to_prune must be a list of (nn.Module, parameter_name) pairs, or empty for all"
            )
        missing_modules = [m for m, _ in parameters_to_prune if not any(m is other for other in modules)]
        missing_names = [name for m, name in parameters_to_prune if not hasattr(m, name)]
        if missing_modules or missing_names:
            raise MisconfigurationException(
                f"Some parameters_to_prune are not in the model: modules {missing_modules}, parameters {missing_names}"
            )
        return [(m, name) for m, name in parameters_to_prune]

    def filter_parameters_to_prune(
        self, parameters_to_prune: Sequence[tuple[nn.Module, str]] = ()
    ) -> Sequence[tuple[nn.Module, str]]:
        """Override to drop some of the chosen (module, name) pairs."""
        return parameters_to_prune


def _pruned_stats(module: nn.Module, name: str) -> tuple[int, int]:
    mask = getattr(module, f"{name}_mask", None)
    if mask is None:
        return 0, 1
    return int((mask == 0).sum().item()), mask.numel()


def _copy_param(target: nn.Module, source: nn.Module, name: str) -> None:
    """Copy `source.name` into `target`; a pruned target trains `name_orig`, so that is where the values go (the
    mask keeps pruned entries at zero)."""
    origin = getattr(source, f"{name}_orig", None)
    origin = getattr(source, name) if origin is None else origin
    pruned = hasattr(target, f"{name}_orig")
    destination = getattr(target, f"{name}_orig" if pruned else name)
    if not isinstance(destination, torch.Tensor) or not isinstance(origin, torch.Tensor):
        return
    destination.data = origin.data.to(destination.device)
    if pruned:
        mask = getattr(target, f"{name}_mask")
        setattr(target, name, mask.to(dtype=destination.dtype) * destination)


def _folded_state_dict(module: nn.Module) -> dict[str, Any]:
    state = module.state_dict()
    for masked in [key[: -len("_mask")] for key in state if key.endswith("_mask")]:
        original = state.pop(masked + "_orig")
        mask = state.pop(masked + "_mask")
        state[masked] = mask.to(dtype=original.dtype) * original
    return {key: value.cpu() for key, value in state.items()}
