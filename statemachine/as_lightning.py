"""Importing this module makes Lightning's import paths resolve to this project, for code you cannot rewrite.

    import statemachine.as_lightning  # first, before the library that imports Lightning
    import darts  # its `pytorch_lightning.Trainer` is now `statemachine.Trainer`

From then on, in this process:

- `lightning.pytorch.X` and `pytorch_lightning.X` are `statemachine.X`: the same module objects, so classes compare
  identical under every spelling;
- `lightning.Trainer` (and Lightning's other top-level names) are `statemachine`'s;
- the `lightning.fabric.X` / `lightning_fabric.X` helper modules that trainer-side code imports are mapped to the
  statemachine modules that hold the same helpers (`FABRIC_MODULES`); Fabric itself is not provided.

An installed Lightning is never imported after this: a path the project does not have raises ModuleNotFoundError
naming it. Turning the alias on after Lightning was imported raises ImportError, as the modules already holding
Lightning's classes cannot be switched.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import sys
import types
import warnings
from collections.abc import Sequence
from typing import Any

from stages.exceptions import TrainerWarning

_PYTORCH_ROOTS = ("lightning.pytorch", "pytorch_lightning")
_FABRIC_ROOTS = ("lightning.fabric", "lightning_fabric")
_ROOTS = ("lightning", *_PYTORCH_ROOTS, *_FABRIC_ROOTS)
_DISTRIBUTIONS = ("lightning", "pytorch-lightning", "lightning-fabric")

# `lightning.fabric.<path>` -> the statemachine module holding what trainer-side code imports from it.
FABRIC_MODULES = {
    "plugins": "statemachine.plugins",
    "plugins.environments": "statemachine.plugins.environments",
    "plugins.io": "statemachine.plugins.io",
    "plugins.io.checkpoint_io": "statemachine.plugins.io",
    "plugins.io.torch_io": "statemachine.plugins.io",
    "utilities": "statemachine.utilities",
    "utilities.apply_func": "statemachine.utilities.apply_func",
    "utilities.cloud_io": "statemachine.utilities.cloud_io",
    "utilities.data": "statemachine.utilities.data",
    "utilities.exceptions": "statemachine.utilities.exceptions",
    "utilities.rank_zero": "statemachine.utilities.rank_zero",
    "utilities.seed": "statemachine.utilities.seed",
    "utilities.types": "statemachine.utilities.types",
}
# Lightning's top-level names (`from lightning import Trainer`) and those of `lightning.fabric`.
_LIGHTNING_NAMES = ("Callback", "LightningDataModule", "LightningModule", "Trainer", "seed_everything")
_FABRIC_NAMES = ("seed_everything",)


class LightningAliasWarning(TrainerWarning):
    """Lightning is installed, but the alias makes its import paths resolve to statemachine."""


def target(fullname: str) -> str | None:
    """The statemachine module an aliased import path names; None where the project has none to give."""
    for root in _PYTORCH_ROOTS:
        if fullname == root or fullname.startswith(root + "."):
            return "statemachine" + fullname[len(root) :]
    for root in _FABRIC_ROOTS:
        if fullname.startswith(root + "."):
            return FABRIC_MODULES.get(fullname[len(root) + 1 :])
    return None


def is_aliased(fullname: str) -> bool:
    return any(fullname == root or fullname.startswith(root + ".") for root in _ROOTS)


class _AliasLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if spec.name == "lightning":
            return _namespace("lightning", _LIGHTNING_NAMES, ("pytorch", "fabric"))
        if spec.name in _FABRIC_ROOTS:
            return _namespace(spec.name, _FABRIC_NAMES, ("plugins", "utilities"))
        home = target(spec.name)
        if home is None:
            raise ModuleNotFoundError(_missing_message(spec.name, home), name=spec.name)
        try:
            module = importlib.import_module(home)
        except ModuleNotFoundError as missing:
            if missing.name is None or not home.startswith(missing.name):
                raise  # a dependency of the module is missing, not the module
            raise ModuleNotFoundError(_missing_message(spec.name, home), name=spec.name) from None
        _alias_loaded_submodules(home, spec.name)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """The module was imported under its own name already."""


class _AliasFinder(importlib.abc.MetaPathFinder):
    """First on `sys.meta_path`, so no installed Lightning is found for an aliased name."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not is_aliased(fullname):
            return None
        return importlib.machinery.ModuleSpec(fullname, _LOADER, is_package=True)


_LOADER = _AliasLoader()


def _namespace(name: str, names: tuple[str, ...], submodules: tuple[str, ...]) -> types.ModuleType:
    """A root module of Lightning's (`lightning`, `lightning_fabric`): a few of statemachine's top-level `names`, and
    its aliased `submodules` as attributes."""
    module = types.ModuleType(name, f"{name}, aliased to statemachine by statemachine.as_lightning")
    module.__path__ = []

    def __getattr__(attribute: str) -> Any:
        if attribute in names:
            return getattr(importlib.import_module("statemachine"), attribute)
        if attribute in submodules:
            return importlib.import_module(f"{name}.{attribute}")
        raise AttributeError(
            f"module {name!r} has no attribute {attribute!r}: statemachine.as_lightning provides "
            f"{list(names + submodules)} here"
        )

    vars(module)["__getattr__"] = __getattr__
    return module


def _alias_loaded_submodules(home: str, alias: str) -> None:
    """Submodules `home` registered itself, such as `statemachine.trainer.states` of the single-file
    `statemachine.trainer`, which the import system could not find under the alias, as the module is no package."""
    for name, module in list(sys.modules.items()):
        if name.startswith(home + "."):
            sys.modules.setdefault(alias + name[len(home) :], module)


def _missing_message(fullname: str, home: str | None) -> str:
    if home is None:
        return (
            f"No module named {fullname!r}: statemachine.as_lightning provides lightning.pytorch (as statemachine) "
            f"and, of lightning.fabric, only the helper modules trainer code imports "
            f"({', '.join(sorted(FABRIC_MODULES))}); Fabric itself is not provided"
        )
    return (
        f"No module named {fullname!r}: statemachine.as_lightning maps it to {home!r}, which this project does not have"
    )


def _install() -> None:
    if any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
        return
    imported = sorted(name for name in ("lightning", "pytorch_lightning", "lightning_fabric") if name in sys.modules)
    if imported:
        raise ImportError(
            f"statemachine.as_lightning was imported after {', '.join(imported)}: import it first, before any "
            "library that imports Lightning, so that every Lightning path resolves to statemachine"
        )
    sys.meta_path.insert(0, _AliasFinder())
    installed = [f"{name} {version}" for name in _DISTRIBUTIONS if (version := _installed_version(name))]
    if installed:
        warnings.warn(
            f"statemachine.as_lightning: lightning.pytorch, pytorch_lightning and lightning_fabric now resolve to "
            f"statemachine; the installed {', '.join(installed)} will not be imported in this process",
            LightningAliasWarning,
            stacklevel=3,
        )


def _installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


_install()
