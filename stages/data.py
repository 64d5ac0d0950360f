"""Dataloaders: where they come from, how many batches each gives, and how batches are fetched."""

from __future__ import annotations

import math
import multiprocessing
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, RandomSampler

from devices.strategy import Strategy
from devices.transfer import mover_to
from stages import samplers, seed
from stages.combined_loader import CombinedLoader, length
from stages.contract import module_of, run_of
from stages.datamodule import LightningDataModule
from stages.exceptions import MisconfigurationException, PossibleUserWarning, TrainerWarning
from stages.hooks import is_overridden
from stages.module import LightningModule
from stages.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from stages.contract import TrainerView

KINDS = ("train", "val", "test", "predict")


def has_source(trainer: TrainerView, kind: str) -> bool:
    """Whether the run in flight has a loader for `kind`."""
    return has_loader_source(kind, run_of(trainer).loaders.get(kind), trainer.datamodule, trainer.lightning_module)


def has_loader_source(kind: str, given: Any, datamodule: LightningDataModule | None, module: Any) -> bool:
    """Whether a loader for `kind` exists: passed to the entry point (`given`), or a DataModule's hook (which wins
    over the module's), or the module's hook."""
    if given is not None:
        return True
    hook = f"{kind}_dataloader"
    if datamodule is not None:
        return is_overridden(hook, datamodule, LightningDataModule)
    return is_overridden(hook, module, LightningModule)


def request(trainer: TrainerView, kind: str) -> Any:
    """Get the loader(s) for `kind`: the entry point's argument wins, then the DataModule, then the module."""
    given = run_of(trainer).loaders.get(kind)
    if given is None:
        hook = f"{kind}_dataloader"
        hooks = run_of(trainer).hooks
        owner = trainer.datamodule if trainer.datamodule is not None else trainer.lightning_module
        given = hooks.datamodule(hook) if trainer.datamodule is not None else hooks.module(hook)
        check_returned(type(owner).__name__, hook, given)
    seed.add_worker_seeding(given, trainer.global_rank)
    for loader in loaders_in(given):
        check_workers(trainer, loader, f"{kind}_dataloader")
    if trainer.use_distributed_sampler and trainer.strategy.is_distributed:
        # overfit_batches trains on the same first batches every epoch, so it never shuffles.
        shuffle = trainer.overfit_batches == 0
        split = trainer.strategy.distributed_sampler_kwargs  # the data-parallel ranks, which may be fewer
        # validate/test say what the samplers added here repeat; a user's own distributed sampler is not said
        fn = trainer.state.fn
        evaluating = fn if fn in ("validate", "test") and split["num_replicas"] > 1 else None
        own = {id(loader.sampler) for loader in loaders_in(given)} if evaluating else set()
        given = samplers.distribute(given, kind, split["num_replicas"], split["rank"], shuffle)
        if evaluating:
            made = [loader.sampler for loader in loaders_in(given) if id(loader.sampler) not in own]
            _warn_repeated_samples(evaluating, made, split["num_replicas"])
    check_lengths(trainer, kind, given)
    return given


def _warn_repeated_samples(fn: str, made: list[Any], replicas: int) -> None:
    """Lightning's advice for validate/test on several ranks, with how many samples the split repeats here."""
    repeats = [samplers.repeated_samples(sampler) for sampler in made]
    if not repeats:
        return  # the user's own distributed samplers: nothing was added
    counted = sum(count for count in repeats if count is not None)
    here = (
        f"Here {counted} sample(s) are evaluated twice to give each of the {replicas} ranks as many batches."
        if counted
        else f"Here every sample is evaluated once: the samples split evenly over the {replicas} ranks."
    )
    rank_zero_warn(
        f"Using `DistributedSampler` with the dataloaders. During `trainer.{fn}()`, it is recommended to use "
        "`Trainer(devices=1, num_nodes=1)` to ensure each sample/batch gets evaluated exactly once. Otherwise, "
        "multi-device settings use `DistributedSampler` that replicates some samples to make sure all devices have "
        f"same batch size in case of uneven inputs. {here}",
        category=PossibleUserWarning,
    )


def check_lengths(trainer: TrainerView, kind: str, loaders: Any) -> None:
    """Each loader with a length has batches on every rank. Empty everywhere, it is warned about; empty on some
    ranks only, every rank refuses it now (the others would wait for the empty ones in their next collective until
    the timeout), unless the module or DataModule sets `allow_zero_length_dataloader_with_multiple_devices`."""
    members = _members(loaders)
    local = [length(member) for member in members]
    every_rank = trainer.strategy.all_gather_object(local) if trainer.world_size > 1 else [local]
    rank = trainer.global_rank
    for index, member in enumerate(members):
        counts = [lengths[index] for lengths in every_rank]
        empty = [r for r, count in enumerate(counts) if count == 0]
        name = type(member).__name__
        if not empty:
            continue
        if len(empty) == len(counts):
            warnings.warn(
                f"Total length of `{name}` across ranks is zero. Please make sure this was your intention.",
                TrainerWarning,
                stacklevel=4,
            )
        elif _zero_length_allowed(trainer):
            if rank in empty:
                warnings.warn(
                    f"Total length of `{name}` across ranks is zero, but local rank has zero length. Please be "
                    "cautious of uneven batch length.",
                    TrainerWarning,
                    stacklevel=4,
                )
        else:
            which = f"`{kind}_dataloader`" + (f" (loader {index})" if len(members) > 1 else "")
            here = (
                f"`{name}` within local rank has zero length. Please make sure that it returns at least 1 batch."
                if rank in empty
                else f"`{name}` has zero length on other ranks, not on this one."
            )
            raise RuntimeError(
                f"{here} {which} gives no batches on rank(s) {empty} of {len(counts)} (batches per rank: {counts}): "
                "every rank stops here instead of waiting for the empty ones. Set "
                "`allow_zero_length_dataloader_with_multiple_devices = True` on the LightningModule or "
                "LightningDataModule to run with it anyway."
            )


def _zero_length_allowed(trainer: TrainerView) -> bool:
    datamodule = trainer.datamodule
    allowed = module_of(trainer).allow_zero_length_dataloader_with_multiple_devices
    return allowed or (datamodule is not None and datamodule.allow_zero_length_dataloader_with_multiple_devices)


def _members(loaders: Any) -> list[Any]:
    """The loaders of one loader, a list, tuple or dict of them, or a CombinedLoader."""
    if isinstance(loaders, CombinedLoader):
        return list(loaders.flattened)
    if isinstance(loaders, Mapping):
        return list(loaders.values())
    return list(loaders) if isinstance(loaders, list | tuple) else [loaders]


def loaders_in(loaders: Any) -> list[DataLoader]:
    """The DataLoaders of one loader, a list, tuple or dict of them, or a CombinedLoader."""
    return [member for member in _members(loaders) if isinstance(member, DataLoader)]


def suggested_max_num_workers(local_world_size: int) -> int:
    """Workers a loader could use: this machine's cores shared by its processes, one core left to each process."""
    if local_world_size < 1:
        raise ValueError(f"`local_world_size` should be >= 1, got {local_world_size}.")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // local_world_size - 1)


def check_workers(trainer: TrainerView, loader: DataLoader, name: str) -> None:
    """Lightning's advice on a loader's workers, when it is requested: spawned workers that restart every epoch,
    too few workers for the cores there are, and pinned persistent workers that reloads destabilise."""
    workers = loader.num_workers
    context = loader.multiprocessing_context
    start_method = context.get_start_method() if context is not None else multiprocessing.get_start_method()
    if workers > 0 and start_method == "spawn" and not loader.persistent_workers:
        warnings.warn(
            f"Consider setting `persistent_workers=True` in '{name}' to speed up the dataloader worker initialization.",
            TrainerWarning,
            stacklevel=3,
        )
    elif workers < 2 and (suggested := suggested_max_num_workers(trainer.num_devices)) > 1:
        warnings.warn(
            f"The '{name}' does not have many workers which may be a bottleneck. Consider increasing the value of "
            f"the `num_workers` argument` to `num_workers={suggested}` in the `DataLoader` to improve performance.",
            PossibleUserWarning,
            stacklevel=3,
        )
    if loader.persistent_workers and loader.pin_memory and trainer.reload_dataloaders_every_n_epochs > 0:
        warnings.warn(
            "The combination of `DataLoader(`pin_memory=True`, `persistent_workers=True`) and `Trainer("
            "reload_dataloaders_every_n_epochs > 0)` can lead to instability due to limitations in PyTorch "
            "(https://github.com/pytorch/pytorch/issues/91252). We recommend setting `pin_memory=False` in this case.",
            PossibleUserWarning,
            stacklevel=3,
        )


def shut_down_workers(loaders: Any) -> None:
    """Stop the worker processes a loader keeps between epochs (`persistent_workers=True`) once a call is over,
    as Lightning does; the next iteration starts new ones."""
    # torch has no public way to stop them: a DataLoader keeps its persistent iterator in `_iterator`, and that
    # iterator's `_shutdown_workers` is what its own `__del__` calls.
    for loader in loaders_in(loaders):
        iterator = loader.__dict__.get("_iterator")
        if iterator is not None:
            shutdown = getattr(iterator, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            loader._iterator = None


def check_argument(method: str, name: str, value: Any) -> None:
    """Refuse a `*dataloaders` argument that is not a loader, an iterable of batches, or a collection of them.

    A string is refused, not iterated: `"data.csv"` would otherwise train on its characters.
    """
    if value is None or isinstance(value, LightningDataModule):
        return
    bad = _first_bad_member(name, value)
    if bad is not None:
        shown, member = bad
        raise TypeError(
            f"An invalid dataloader was passed to `Trainer.{method}({name}=...)`. Found {member}. "
            f"{method}({shown}={member!r}) is not a dataloader ({_why(member)}); pass a torch.utils.data.DataLoader "
            "or another iterable of batches, a list, tuple or dict of them, or a LightningDataModule"
        )


def check_returned(owner: str, hook: str, value: Any) -> None:
    """Refuse what a `*_dataloader` hook returned when it is not a loader (None included) or holds a non-loader."""
    bad = ("", None) if value is None else _first_bad_member("", value)
    if bad is not None:
        shown, member = bad
        inside = f" ({hook}(){shown} is {member!r})" if shown else ""
        raise TypeError(
            f"An invalid dataloader was returned from `{owner}.{hook}()`. Found {value}.{inside} Return a "
            "torch.utils.data.DataLoader or another iterable of batches, or a list, tuple or dict of them"
        )


def _first_bad_member(name: str, value: Any) -> tuple[str, Any] | None:
    """The first member (named as `name[key]`) of a loader collection that is not a loader."""
    if isinstance(value, Mapping):
        members: list[tuple[str, Any]] = [(f"{name}[{key!r}]", member) for key, member in value.items()]
    elif isinstance(value, list | tuple):
        members = [(f"{name}[{index}]", member) for index, member in enumerate(value)]
    else:
        members = [(name, value)]
    for shown, member in members:
        if isinstance(member, str | bytes) or not _iterable(member):
            return shown, member
    return None


def _why(member: Any) -> str:
    why = "a path or text is not loaded for you" if isinstance(member, str | bytes) else "it is not iterable"
    return f"{type(member).__name__}: {why}"


def _iterable(value: Any) -> bool:
    # No iter() call: on a DataLoader with workers it would start them.
    return hasattr(value, "__iter__") or hasattr(value, "__getitem__")


def as_list(loaders: Any) -> list[Any]:
    """Evaluation loaders run one after the other: a single loader, a list, tuple or dict of them, or a
    sequential CombinedLoader; a CombinedLoader in another mode is one loader of combined batches."""
    if loaders is None:
        return []
    if isinstance(loaders, CombinedLoader):
        return list(loaders.flattened) if loaders.mode == "sequential" else [loaders]
    if isinstance(loaders, Mapping):
        return list(loaders.values())
    if isinstance(loaders, list | tuple):
        return list(loaders)
    return [loaders]


def has_len_all_ranks(
    dataloader: object, strategy: Any, allow_zero_length_dataloader_with_multiple_devices: bool = False
) -> bool:
    """Whether `dataloader` has a length (then on every rank: the lengths are summed across ranks). A length of
    zero everywhere warns; zero on this rank while others have batches is refused, unless allowed (then warns)."""
    local = length(dataloader)
    if local is None:
        return False
    total = int(strategy.reduce(torch.tensor(local, device=strategy.root_device), reduce_op="sum"))
    name = type(dataloader).__name__
    if total == 0:
        warnings.warn(
            f"Total length of `{name}` across ranks is zero. Please make sure this was your intention.",
            TrainerWarning,
            stacklevel=2,
        )
    elif local == 0:
        if not allow_zero_length_dataloader_with_multiple_devices:
            raise RuntimeError(
                f"`{name}` within local rank has zero length. Please make sure that it returns at least 1 batch."
            )
        warnings.warn(
            f"Total length of `{name}` across ranks is zero, but local rank has zero length. Please be cautious "
            "of uneven batch length.",
            TrainerWarning,
            stacklevel=2,
        )
    return True


def limited_batches(loader: Iterable[Any], limit: int | float, flag: str) -> int | float:
    """Batches per loader under a `limit_*_batches` value; a CombinedLoader's limit applies to
    each of its iterables."""
    if isinstance(loader, CombinedLoader):
        loader.limits = [limited_batches(member, limit, flag) for member in loader.flattened]
        return loader.num_batches
    size = length(loader)
    if size is None:
        if isinstance(limit, int):
            return limit
        if limit == 1.0:
            return math.inf
        kind = flag.removeprefix("limit_").removesuffix("_batches")
        raise MisconfigurationException(
            f"When using an `IterableDataset`, `Trainer({flag})` must be `1.0` or an int. An int specifies "
            f"`num_{kind}_batches` to use. ({flag}={limit!r} is a fraction of a loader without a length)"
        )
    if size == 0:
        return 0
    if isinstance(limit, int):
        return min(size, limit)
    batches = int(size * limit)
    if limit > 0 and batches == 0:
        kind = flag.removeprefix("limit_").removesuffix("_batches")
        raise MisconfigurationException(
            f"You requested to check {limit} of the `{kind}_dataloader` but {limit} * {size} < 1. Please increase "
            f"the `{flag}` argument. Try at least `{flag}={1 / size}`"
        )
    return batches


def warn_if_no_training_batches(loader: Any, num_batches: int | float) -> None:
    """An empty training loader makes fit "finish" without a single step; say so, and why."""
    if num_batches != 0:
        return
    reason = "it has no batches"
    if isinstance(loader, DataLoader):
        samples = length(loader.dataset)
        if samples == 0:
            reason = "its dataset is empty"
        elif loader.drop_last and samples is not None and loader.batch_size and samples < loader.batch_size:
            reason = f"drop_last=True drops its only batch ({samples} samples, batch_size={loader.batch_size})"
    warnings.warn(
        f"The training dataloader is empty ({reason}): no training step will run, so fit leaves the model as it is",
        TrainerWarning,
        stacklevel=3,
    )


def train_loader(loaders: Any) -> Any:
    """Several training loaders run together, by default as long as the longest (`max_size_cycle`)."""
    if isinstance(loaders, CombinedLoader):
        return loaders
    if isinstance(loaders, Mapping | list | tuple):
        return CombinedLoader(loaders, "max_size_cycle")
    return loaders


def check_training_mode(loader: Any) -> None:
    """A training epoch cannot run a `sequential` CombinedLoader (one loader after the other): refused when the
    epoch starts to fetch, after its start hooks."""
    if isinstance(loader, CombinedLoader) and loader.mode == "sequential":
        raise ValueError(
            '`_FitLoop` does not support the `CombinedLoader(mode="sequential")` mode. The available modes are: '
            "['min_size', 'max_size_cycle', 'max_size'] (training runs its loaders together, not one after another)"
        )


def fetch(
    loader: Iterable[Any],
    num_batches: int | float,
    start: int = 0,
    positioned: Callable[[], None] | None = None,
    profiler: Any = None,
    action: str = "",
) -> Iterator[tuple[int, Any, bool]]:
    """Yield `(batch_idx, batch, is_last)`, knowing `is_last` before the batch runs (one batch prefetched).

    A resumed epoch continues its count at `start`. With `positioned`, the `start` batches it already ran are drawn
    from the loader and dropped, and `positioned()` runs once the next batch is in hand, where the saving run stood
    (exact resume). Without it the loader starts over and only the remaining number runs (Lightning's rule).
    With a `profiler`, every `next` on the loader is timed as `action` (decided here once per epoch).
    """
    if num_batches <= start:
        return
    iterator = loader.batches() if isinstance(loader, CombinedLoader) else iter(loader)
    if profiler is not None:
        iterator = _ProfiledIterator(iterator, profiler, action)
    try:
        for _ in range(start if positioned is not None else 0):
            next(iterator)
        upcoming = next(iterator)
    except StopIteration:
        return
    if positioned is not None:
        positioned()
    index = start
    while True:
        if index + 1 >= num_batches:
            yield index, upcoming, True
            return
        try:
            following = next(iterator)
        except StopIteration:
            yield index, upcoming, True
            return
        yield index, upcoming, False
        upcoming = following
        index += 1


class _ProfiledIterator:
    def __init__(self, iterator: Iterator[Any], profiler: Any, action: str) -> None:
        self.iterator, self.profiler, self.action = iterator, profiler, action

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        self.profiler.start(self.action)
        try:
            return next(self.iterator)
        finally:
            self.profiler.stop(self.action)


_TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def transfer(trainer: TrainerView, batch: Any, dataloader_idx: int) -> Any:
    """The three transfer hooks; a DataModule's override wins over the module's."""
    return transfer_for(trainer)(batch, dataloader_idx)


def transfer_for(trainer: TrainerView) -> Callable[[Any, int], Any]:
    """`transfer` decided once (a loop asks per epoch): what the three default hooks amount to when neither the
    module nor a DataModule overrides any, else the hooks themselves."""
    direct = _direct_transfer(trainer)
    if direct is None:
        return partial(_transfer_through_hooks, trainer)
    return lambda batch, _: direct(batch)


def train_transfer_for(trainer: TrainerView) -> Callable[[Any], Any]:
    """`transfer_for` for the one training loader (index 0), with no call around the direct transfer: it runs for
    every training batch."""
    direct = _direct_transfer(trainer)
    return partial(_transfer_through_hooks, trainer, dataloader_idx=0) if direct is None else direct


def _direct_transfer(trainer: TrainerView) -> Callable[[Any], Any] | None:
    """What the three default transfer hooks amount to, when neither the module nor a DataModule overrides any."""
    strategy = trainer.strategy
    if trainer.datamodule is not None or run_of(trainer).hooks.module_overrides_any(_TRANSFER_HOOKS):
        return None
    device, precision = strategy.root_device, strategy.precision
    # The strategy's default batch_to_device is move_to_device: its mover, called directly, is one call per batch.
    to_device: Callable[[Any], Any] = (
        mover_to(device)
        if type(strategy).batch_to_device is Strategy.batch_to_device
        else partial(strategy.batch_to_device, device=device)
    )
    if not precision.casts_input:
        return to_device
    return lambda batch: precision.convert_input(to_device(batch))


def _transfer_through_hooks(trainer: TrainerView, batch: Any, dataloader_idx: int) -> Any:
    hooks = run_of(trainer).hooks
    datamodule = trainer.datamodule
    device = trainer.strategy.root_device
    for name in _TRANSFER_HOOKS:
        args = (batch, device, dataloader_idx) if name == "transfer_batch_to_device" else (batch, dataloader_idx)
        if datamodule is not None and is_overridden(name, datamodule, LightningDataModule):
            batch = hooks.datamodule(name, *args)  # timed by a profiler as the DataModule's hook
        elif name == "transfer_batch_to_device" or hooks.module_overrides(name):
            batch = hooks.module(name, *args)
    # A true precision (e.g. bf16-true) casts the floating-point inputs after the hooks, as the step sees them.
    return trainer.strategy.precision.convert_input(batch)


def without_shuffling(loader: Any) -> Any:
    """`overfit_batches` trains on the same first batches every epoch: a shuffling loader becomes sequential."""
    if isinstance(loader, CombinedLoader):
        loader.flattened = [without_shuffling(member) for member in loader.flattened]
        return loader
    if not isinstance(loader, DataLoader) or not isinstance(loader.sampler, RandomSampler):
        return loader
    warnings.warn(
        "overfit_batches > 0: the shuffling loader is replaced by a sequential one", TrainerWarning, stacklevel=2
    )
    return samplers.rebuild(loader, None, shuffle=False)


def set_sampler_epoch(loader: Any, epoch: int) -> None:
    """Samplers that shuffle per epoch (such as DistributedSampler) learn the epoch before it starts (before each
    evaluation run too): the loader's sampler and its batch sampler's sampler, once each when they are one."""
    for member in loader.flattened if isinstance(loader, CombinedLoader) else [loader]:
        sampler = getattr(member, "sampler", None)
        inner = getattr(getattr(member, "batch_sampler", None), "sampler", None)
        for each in (sampler,) if inner is sampler else (sampler, inner):
            set_epoch = getattr(each, "set_epoch", None)
            if set_epoch is not None:
                set_epoch(epoch)
