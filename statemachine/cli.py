"""LightningCLI: a Trainer, a model and a datamodule built from the command line and YAML config files.

    python train.py fit --config config.yaml --trainer.max_epochs 5 --model.lr 0.01
    python train.py fit --print_config > config.yaml
    python -m statemachine fit --config config.yaml   # a config that names the model and data classes

Arguments come from type hints (jsonargparse reads the classes' `__init__` signatures): `--trainer.*` for the
Trainer, `--model.*` for the model, `--data.*` for the datamodule, plus the arguments of the subcommand's Trainer
method (`--ckpt_path`, `--verbose`, ...). Without a model (or data) class, or with `subclass_mode_model=True`,
the class is chosen with `--model.class_path` (or `--model=ClassName`) and its arguments with
`--model.init_args.*`. Needs the `cli` extra: `pip install 'statemachine-trainer[cli]'`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import fsspec

try:
    from jsonargparse import ActionConfigFile, ArgumentParser, Namespace, lazy_instance
except ImportError as error:  # an optional extra: say how to get it
    raise ImportError(
        "statemachine.cli needs jsonargparse; install the cli extra: pip install 'statemachine-trainer[cli]'"
    ) from error

from stages.callbacks.callback import Callback
from stages.datamodule import LightningDataModule
from stages.module import LightningModule
from stages.seed import seed_everything
from statemachine.engine.history import join_path, write_atomic
from statemachine.trainer import Trainer

__all__ = ["LightningArgumentParser", "LightningCLI", "SaveConfigCallback", "lazy_instance"]

ArgsType = list[str] | dict[str, Any] | Namespace | None

_LIGHTNING_CLASSES = (LightningModule, LightningDataModule, Callback, Trainer)
# Trainer arguments a config cannot hold: the machine table is a Python object, given in `trainer_defaults` or
# left at the built-in one, so the saved config.yaml stays complete and serialisable.
TRAINER_CODE_ONLY = ("table",)


class LightningArgumentParser(ArgumentParser):
    """A jsonargparse parser that knows the Lightning classes; `PL_`-prefixed environment variables are off."""

    def __init__(
        self,
        *args: Any,
        description: str = "statemachine Trainer command line tool",
        env_prefix: str = "PL",
        default_env: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, description=description, env_prefix=env_prefix, default_env=default_env, **kwargs)
        self.callback_keys: list[str] = []

    def add_lightning_class_args(
        self, lightning_class: type, nested_key: str, subclass_mode: bool = False, required: bool = True
    ) -> list[str]:
        """Add `lightning_class`'s `__init__` arguments under `nested_key`.

        A Callback class added this way is instantiated and appended to the Trainer's callbacks. In subclass mode
        the class itself is chosen on the command line or in the config (`class_path` and `init_args`).
        """
        if not (isinstance(lightning_class, type) and issubclass(lightning_class, _LIGHTNING_CLASSES)):
            allowed = ", ".join(c.__name__ for c in _LIGHTNING_CLASSES)
            raise ValueError(f"add_lightning_class_args: {lightning_class!r} is not a subclass of {allowed}")
        if issubclass(lightning_class, Callback):
            self.callback_keys.append(nested_key)
        if subclass_mode:
            return self.add_subclass_arguments(lightning_class, nested_key, fail_untyped=False, required=required)
        is_trainer = issubclass(lightning_class, Trainer)
        return self.add_class_arguments(
            lightning_class,
            nested_key,
            fail_untyped=False,
            instantiate=not is_trainer,
            sub_configs=True,
            skip=set(TRAINER_CODE_ONLY) if is_trainer else None,
        )


class SaveConfigCallback(Callback):
    """Saves the resolved config as `config.yaml` in the log directory when the run is set up.

    An existing file is not overwritten (a previous run's results would lose their config) unless
    `overwrite=True`.
    """

    def __init__(
        self,
        parser: LightningArgumentParser,
        config: Namespace,
        config_filename: str = "config.yaml",
        overwrite: bool = False,
    ) -> None:
        self.parser = parser
        self.config = config
        self.config_filename = config_filename
        self.overwrite = overwrite
        self.already_saved = False

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.already_saved:
            return
        path = join_path(trainer.log_dir, self.config_filename)
        fs, local = fsspec.core.url_to_fs(path)
        if not self.overwrite and trainer.strategy.broadcast(trainer.is_global_zero and fs.isfile(local)):
            raise RuntimeError(
                f"{type(self).__name__} expected {path} to not exist: it would overwrite the config of a previous "
                "run. Delete it, pass LightningCLI(save_config_callback=None) to not save the config, or "
                "LightningCLI(save_config_kwargs={'overwrite': True}) to overwrite it"
            )
        if trainer.is_global_zero:
            write_atomic(path, self.parser.dump(self.config, skip_unset=False).encode())
        self.already_saved = True


class LightningCLI:
    """Parse the command line (or `args`), seed, instantiate the classes and, with `run=True`, run the subcommand.

    After construction: `cli.config` (the parsed config), `cli.config_init` (with classes instantiated),
    `cli.model`, `cli.datamodule`, `cli.trainer`, `cli.subcommand` (None with `run=False`). Override
    `add_arguments_to_parser(parser)` to add arguments, `before_instantiate_classes()`, and
    `before_<subcommand>()`/`after_<subcommand>()` to run code around a subcommand.
    """

    def __init__(
        self,
        model_class: type[LightningModule] | None = None,
        datamodule_class: type[LightningDataModule] | None = None,
        save_config_callback: type[SaveConfigCallback] | None = SaveConfigCallback,
        save_config_kwargs: dict[str, Any] | None = None,
        trainer_class: type[Trainer] = Trainer,
        trainer_defaults: dict[str, Any] | None = None,
        seed_everything_default: bool | int = True,
        parser_kwargs: dict[str, Any] | None = None,
        subclass_mode_model: bool = False,
        subclass_mode_data: bool = False,
        args: ArgsType = None,
        run: bool = True,
    ) -> None:
        self.save_config_callback = save_config_callback
        self.save_config_kwargs = save_config_kwargs or {}
        self.trainer_class = trainer_class
        self.trainer_defaults = trainer_defaults or {}
        self.seed_everything_default = seed_everything_default
        self.parser_kwargs = parser_kwargs or {}
        self.model_class = model_class
        self._model_class = model_class or LightningModule
        self.subclass_mode_model = model_class is None or subclass_mode_model
        self.datamodule_class = datamodule_class
        self._datamodule_class = datamodule_class or LightningDataModule
        self.subclass_mode_data = datamodule_class is None or subclass_mode_data

        names = self.subcommands()
        main_kwargs = {key: value for key, value in self.parser_kwargs.items() if key not in names}
        subcommand_kwargs = {key: value for key, value in self.parser_kwargs.items() if key in names}
        self.setup_parser(run, main_kwargs, subcommand_kwargs)
        self.parse_arguments(self.parser, args)
        self.subcommand: str | None = self.config["subcommand"] if run else None
        self._set_seed()
        self.before_instantiate_classes()
        self.instantiate_classes()
        if self.subcommand is not None:
            self._run_subcommand(self.subcommand)

    # ---- the parser -------------------------------------------------------------------------------------

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """Each subcommand and the Trainer-method arguments the CLI fills itself (not read from the config)."""
        return {
            "fit": {"model", "train_dataloaders", "val_dataloaders", "datamodule"},
            "validate": {"model", "dataloaders", "datamodule"},
            "test": {"model", "dataloaders", "datamodule"},
            "predict": {"model", "dataloaders", "datamodule"},
        }

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        parser = LightningArgumentParser(**kwargs)
        parser.add_argument(
            "-c", "--config", action=ActionConfigFile, help="A YAML or JSON config file; repeat to merge several."
        )
        return parser

    def setup_parser(
        self, add_subcommands: bool, main_kwargs: dict[str, Any], subcommand_kwargs: dict[str, Any]
    ) -> None:
        self.parser = self.init_parser(**main_kwargs)
        self._subcommand_parsers: dict[str, LightningArgumentParser] = {}
        self._subcommand_method_arguments: dict[str, list[str]] = {}
        if not add_subcommands:
            self._add_arguments(self.parser)
            return
        subcommands = self.parser.add_subcommands()
        for name in self.subcommands():
            description = _first_line(getattr(self.trainer_class, name))
            kwargs = {"description": description, **subcommand_kwargs.get(name, {})}
            parser = self.init_parser(**kwargs)
            self._add_arguments(parser)
            self._subcommand_method_arguments[name] = parser.add_method_arguments(
                self.trainer_class, name, skip=self.subcommands()[name]
            )
            self._subcommand_parsers[name] = parser
            subcommands.add_subcommand(name, parser, help=description)

    def _add_arguments(self, parser: LightningArgumentParser) -> None:
        self.add_default_arguments_to_parser(parser)
        self.add_core_arguments_to_parser(parser)
        self.add_arguments_to_parser(parser)

    def add_default_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--seed_everything",
            type=bool | int,
            default=self.seed_everything_default,
            help="Seed every random generator before the classes are built: an int, true (a random seed, saved "
            "into the config) or false (no seeding).",
        )

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(self.trainer_class, "trainer")
        defaults = {
            f"trainer.{key}": value
            for key, value in self.trainer_defaults.items()
            if key != "callbacks" and key not in TRAINER_CODE_ONLY
        }
        parser.set_defaults(defaults)
        parser.add_lightning_class_args(self._model_class, "model", subclass_mode=self.subclass_mode_model)
        # not required without a datamodule class: the model's own *_dataloader hooks may provide the data
        parser.add_lightning_class_args(
            self._datamodule_class,
            "data",
            subclass_mode=self.subclass_mode_data,
            required=self.datamodule_class is not None,
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Override to add arguments (for example `parser.add_lightning_class_args(EarlyStopping, "early")`)."""

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        if isinstance(args, dict | Namespace):
            self.config = parser.parse_object(args)
        else:
            self.config = parser.parse_args(sys.argv[1:] if args is None else args)

    # ---- instantiation and the run ----------------------------------------------------------------------

    def before_instantiate_classes(self) -> None:
        """Override to change `self.config` before the classes are built."""

    def instantiate_classes(self) -> None:
        self.config_init = self.parser.instantiate(self.config)
        self.datamodule = self._get(self.config_init, "data")
        self.model = self._get(self.config_init, "model")
        self.trainer = self.instantiate_trainer()

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer from the `trainer` arguments (overridden by `kwargs`), with the extra callbacks added."""
        parser = self._parser(self.subcommand)
        extra = [self._get(self.config_init, key) for key in parser.callback_keys]
        section = self._get(self.config_init, "trainer")
        code_only = {key: value for key, value in self.trainer_defaults.items() if key in TRAINER_CODE_ONLY}
        config = {**(section.as_dict() if section is not None else {}), **code_only, **kwargs}
        callbacks = _as_list(config.get("callbacks")) + extra
        callbacks += _as_list(self.trainer_defaults.get("callbacks"))
        if self.save_config_callback is not None and not config.get("fast_dev_run"):
            config_section = self.config[self.subcommand] if self.subcommand else self.config
            callbacks.append(self.save_config_callback(parser, config_section, **self.save_config_kwargs))
        config["callbacks"] = callbacks
        return self.trainer_class(**config)

    def _run_subcommand(self, subcommand: str) -> None:
        before: Callable[[], None] | None = getattr(self, f"before_{subcommand}", None)
        if callable(before):
            before()
        method = getattr(self.trainer, subcommand)
        section = self.config_init[subcommand]
        kwargs = {key: section[key] for key in self._subcommand_method_arguments[subcommand]}
        kwargs["model"] = self.model
        if self.datamodule is not None:
            kwargs["datamodule"] = self.datamodule
        method(**kwargs)
        after: Callable[[], None] | None = getattr(self, f"after_{subcommand}", None)
        if callable(after):
            after()

    def _set_seed(self) -> None:
        """Seed before the classes are built (`true`: `PL_GLOBAL_SEED` or 0, as Lightning), written back so the saved
        config has it."""
        seed = self._get(self.config, "seed_everything")
        if seed is False:
            return
        chosen = seed_everything(None if seed is True else seed, workers=True)  # as Lightning's CLI seeds
        if self.subcommand is not None:
            self.config[self.subcommand]["seed_everything"] = chosen
        else:
            self.config["seed_everything"] = chosen

    def _parser(self, subcommand: str | None) -> LightningArgumentParser:
        return self.parser if subcommand is None else self._subcommand_parsers[subcommand]

    def _get(self, config: Namespace, key: str) -> Any:
        if self.subcommand is not None:
            config = config[self.subcommand]
        return config.get(key)


def _as_list(value: Any) -> list[Any]:
    return [] if value is None else list(value) if isinstance(value, list | tuple) else [value]


def _first_line(function: Callable[..., Any]) -> str:
    doc = function.__doc__ or ""
    return doc.strip().splitlines()[0] if doc.strip() else f"Runs Trainer.{function.__name__}"
