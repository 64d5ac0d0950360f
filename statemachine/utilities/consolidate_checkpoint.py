"""`python -m statemachine.utilities.consolidate_checkpoint FOLDER [--output_file FILE]`: turn a sharded
checkpoint folder (FSDPStrategy(state_dict_type="sharded"), ModelParallelStrategy) into one full checkpoint file
that loads on one process with no strategy, as Lightning's command of the same name does."""

from __future__ import annotations

import argparse
import os
import sys

from devices import checkpoint_io, sharded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "checkpoint_folder",
        help="Path to a checkpoint folder, containing the sharded checkpoint files saved using the "
        "`torch.distributed.checkpoint` API.",
    )
    parser.add_argument(
        "--output_file",
        default=None,
        help="Path to the file where the converted checkpoint should be saved. The file should not already exist. "
        "If no path is provided, the file is saved next to the input checkpoint folder with the same name and a "
        "'.consolidated' suffix.",
    )
    arguments = parser.parse_args(argv)
    folder = os.path.normpath(arguments.checkpoint_folder)
    output = arguments.output_file or f"{folder}.consolidated"
    if not os.path.isdir(folder):
        print(f"The provided checkpoint folder does not exist: {folder}", file=sys.stderr)
        return 1
    if not sharded.is_sharded_checkpoint(folder) or not os.path.isfile(os.path.join(folder, sharded.META_FILE)):
        print(
            "Only FSDP-sharded checkpoints saved with Lightning are supported for consolidation. The provided folder "
            f"is not in that format: {folder}",
            file=sys.stderr,
        )
        return 1
    if os.path.exists(output):
        print(f"The output file already exists: {output}; give another --output_file", file=sys.stderr)
        return 1
    checkpoint_io.save_checkpoint(sharded.consolidate(folder), output)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
