"""``python -m benchmarks``: run the suite and print, save and plot the results.

    python -m benchmarks                       # every case, every installed system
    python -m benchmarks --quick               # reduced sizes, under a minute
    python -m benchmarks --case 1 --case 8 --systems te,torch

After the main table comes the growth check (``benchmarks.growth``): tensorexpr's
forward and VJP at each case's size and at a grown size, their growth exponents,
and a flag on any gradient growing faster than its forward (``--no-growth`` skips it).
"""
from __future__ import annotations

import argparse
import os
import sys

from benchmarks import pin_threads

HERE = os.path.dirname(os.path.abspath(__file__))


def parse(argv=None) -> argparse.Namespace:
    """The command line: cases and systems validated, in the suite's order."""
    from benchmarks.cases import CASES
    from benchmarks.systems import ORDER
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="tensorexpr's benchmark suite: forward and VJP of 14 cases, side by side "
                    "with PyTorch, JAX and hand-written numpy gradients.")
    parser.add_argument("--quick", action="store_true",
                        help="reduced sizes and fewer rounds (the whole suite in under a minute)")
    parser.add_argument("--case", type=int, action="append", metavar="N",
                        choices=[c.id for c in CASES],
                        help="run case N (1-14); repeatable; default: all")
    parser.add_argument("--systems", default=",".join(ORDER),
                        help=f"comma-separated systems among {','.join(ORDER)} (default: all)")
    parser.add_argument("--json", default=os.path.join(HERE, "results", "latest.json"),
                        metavar="PATH", help="where to write the results (default: %(default)s)")
    parser.add_argument("--png", default=os.path.join(HERE, "results", "latest.png"),
                        metavar="PATH", help="where to draw the chart (default: %(default)s)")
    parser.add_argument("--te-backend", choices=("c", "numpy"), default="c",
                        help="tensorexpr backend to measure (default: c)")
    parser.add_argument("--cache-dir", metavar="DIR",
                        help="tensorexpr compile cache to use (default: a fresh temporary one, "
                             "so the first build is a cold compile)")
    parser.add_argument("--no-rebuild", action="store_true",
                        help="skip the cached rebuild of tensorexpr programs in a new process")
    parser.add_argument("--no-growth", action="store_true",
                        help="skip the growth check (tensorexpr's forward and VJP timed again "
                             "at a grown size of each case)")
    args = parser.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in ORDER]
    if unknown or not systems:
        parser.error(f"unknown system(s) {', '.join(unknown) or '(none given)'}; "
                     f"choose among {','.join(ORDER)}")
    args.systems = [s for s in ORDER if s in systems]
    args.case = sorted(set(args.case)) if args.case else [c.id for c in CASES]
    return args


def main(argv=None) -> int:
    """Run, print the table, write the JSON and the chart; the process exit code."""
    pin_threads()  # before numpy, torch or jax start their thread pools
    args = parse(argv)
    from benchmarks import report
    from benchmarks.runner import Options, run

    opts = Options(cases=args.case, systems=args.systems, quick=args.quick,
                   te_backend=args.te_backend, cache_dir=args.cache_dir,
                   rebuild=not args.no_rebuild, growth=not args.no_growth)
    results = run(opts, log=lambda s: print(s, file=sys.stderr, flush=True))
    print(report.table(results))
    grown = report.growth_table(results)
    if grown:
        print("\n" + grown)
    report.write_json(results, args.json)
    print(f"\nresults: {args.json}")
    note = report.write_png(results, args.png)
    print(note or f"chart: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
