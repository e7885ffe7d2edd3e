"""One rank of a job whose policy judges the mean over ranks, without torch.distributed: each rank is a
process of its own that logs, asks ``should_stop()`` and leaves at the step it is told to
(``python -m tests._reduce_rank --rank R ...``). Prints one JSON line.

Rank r's curve is a parabola with its minimum at ``minima[r]``, so the mean over all ranks bottoms out
elsewhere than the mean over any subset: a step judged without a rank shows in the stop step.
"""

from __future__ import annotations

import argparse
import json
import time

import plateau_tracker as plateau


def value(rank: int, step: int, minima: list[int]) -> float:
    return (step - minima[rank]) ** 2 / 1000.0 + rank


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--minima", required=True, help="comma-separated: each rank's best step")
    parser.add_argument("--patience", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--reduce-timeout", type=float, required=True)
    parser.add_argument("--slow-ms", type=float, default=0.0, help="rank 0's extra work per step")
    args = parser.parse_args()
    minima = [int(m) for m in args.minima.split(",")]
    run = plateau.init(
        project="reduce",
        experiment="mean",
        url=args.url,
        run_key=args.key,
        rank=args.rank,
        world_size=args.world,
        monitor="val",
        mode="min",
        reduce="mean",
        reduce_timeout_s=args.reduce_timeout,
        rules=[{"rule": "patience", "patience": args.patience}, {"rule": "checkpoint"}],
        decision_timeout=30.0,
    )
    exit_step = None
    for step in range(args.steps):
        run.log({"val": value(args.rank, step, minima)}, step=step)
        if args.rank == 0 and args.slow_ms:
            time.sleep(args.slow_ms / 1000)
        if run.should_stop():
            exit_step = step
            break
    run.finish()
    print(json.dumps({"rank": args.rank, "exit_step": exit_step, "run_id": run.id}), flush=True)


if __name__ == "__main__":
    main()
