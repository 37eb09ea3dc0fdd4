"""``python -m tests.fuzz --minutes N [--programs N] [--seed S] [--sizes big]``: the gradient fuzzer.

Runs until the time (or program count) is used up, prints programs/minute, the schedule
decisions its C builds took (counts per strategy) and every distinct failure with its
shrunk reproducer (Python source), and exits 1 if anything failed. ``--sizes big`` draws
axes across the code generator's thresholds (tiles, vector widths, thread thresholds);
with ``$TENSOREXPR_PARALLEL_WORK`` low, small loops run on the thread team too.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    ap.add_argument("--minutes", type=float, default=1.0, help="how long to run (default 1)")
    ap.add_argument("--programs", type=int, default=0, help="stop after this many programs")
    ap.add_argument("--seed", type=int, default=0, help="seed of the first round")
    ap.add_argument("--batch", type=int, default=4, help="programs per C build (default 4)")
    ap.add_argument("--shrink-seconds", type=float, default=90.0,
                    help="time to shrink one failure (default 90; 0: report unshrunk)")
    ap.add_argument("--sizes", default="small", choices=("small", "big"),
                    help="size profile of the programs (default small: axes of 1..4)")
    args = ap.parse_args(argv)
    # kernels of random programs never go to the user's cache
    os.environ.setdefault("TENSOREXPR_CACHE_DIR", tempfile.mkdtemp(prefix="te-fuzz-"))
    from .runner import run
    stats = run(args.minutes, args.programs, args.seed, args.batch,
                shrink_seconds=args.shrink_seconds, sizes=args.sizes)
    print("\n" + stats.coverage.report())
    print(f"\n{stats.programs} programs checked ({stats.shrink_programs} more while shrinking); "
          f"{len(stats.failures)} distinct failure classes")
    for sig in stats.failures:
        print(f"  - {sig}")
    return 1 if stats.failures else 0


if __name__ == "__main__":
    sys.exit(main())
