"""The state history's command line:

    python -m statemachine.history show run.json                  # a readable table
    python -m statemachine.history check run.json                 # is this a legal path through the table?
    python -m statemachine.history diff rank0.json rank1.json     # where two ranks' paths part
    python -m statemachine.history trace rank0.json rank1.json -o run.trace.json   # a timeline for Perfetto

`trace` takes one dump per rank, and `--profile FILE` for each profiler trace to merge (torch.profiler's chrome
traces, the timelines of `SimpleProfiler(timeline=True)` and `AdvancedProfiler(timeline=True)`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from statemachine.engine.history import add_commands, load_history, run_command
from statemachine.engine.trace import build_trace, load_profile, write_trace

PROG = "python -m statemachine.history"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="Inspect a state-machine history dump.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_commands(commands)
    trace = commands.add_parser("trace", help="write the run as a Chrome trace (Perfetto, chrome://tracing)")
    trace.add_argument("dumps", nargs="+", metavar="DUMP", help="history dumps, one per rank (files or fsspec URLs)")
    trace.add_argument("-o", "--output", required=True, metavar="PATH", help="the trace to write (file or fsspec URL)")
    trace.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="FILE",
        help="a profiler's chrome trace to merge onto its rank (repeat for several)",
    )
    args = parser.parse_args(argv)
    if args.command == "trace":
        return _run_trace(parser, args.dumps, args.profile, args.output)
    return run_command(parser, args)


def _run_trace(parser: argparse.ArgumentParser, dumps: list[str], profiles: list[str], output: str) -> int:
    repeated = sorted({path for path in [*dumps, *profiles] if [*dumps, *profiles].count(path) > 1})
    if repeated:
        parser.exit(2, f"{parser.prog}: error: {', '.join(map(repr, repeated))} given more than once\n")
    try:
        histories = {path: load_history(path).records for path in dumps}
        merged = {path: load_profile(path) for path in profiles}
        trace = build_trace(histories, merged)
    except (FileNotFoundError, ValueError) as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    write_trace(output, trace)
    ranks = trace["otherData"]["ranks"]
    print(f"wrote {output}: {len(trace['traceEvents'])} events, ranks {', '.join(map(str, ranks))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
