"""``python -m benchmarks``: run the suite and print, save and plot the results.

    python -m benchmarks                       # both tiers, every installed system
    python -m benchmarks --tier 2 --quick      # tier 2 only, reduced sizes
    python -m benchmarks --case 1 --case 8 --systems te,torch
    python -m benchmarks --case 14 --load 2     # also timed while 2 processes spin

Each tier gets its own table, chart and geometric mean of tensorexpr / fastest peer.

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
    from benchmarks.cases import CASES, TIERS
    from benchmarks.systems import ORDER
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=f"tensorexpr's benchmark suite: forward and VJP of {len(CASES)} cases in "
                    f"{len(TIERS)} tiers, side by side with PyTorch, JAX and hand-written numpy "
                    "gradients.")
    parser.add_argument("--quick", action="store_true",
                        help="reduced sizes and fewer rounds (a short run of the whole suite)")
    parser.add_argument("--tier", type=int, action="append", choices=sorted(TIERS),
                        help="run the cases of tier N (1: the original 14, 2: the 19 common "
                             "kernels of issue 14); repeatable; default: every tier")
    parser.add_argument("--case", type=int, action="append", metavar="N",
                        choices=[c.id for c in CASES],
                        help=f"run case N (1-{len(CASES)}); repeatable; overrides --tier")
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
    parser.add_argument("--load", type=int, default=0, metavar="N",
                        help="also time every case while N processes spin on the CPU, and "
                             "report each system's median / fastest call under that load")
    args = parser.parse_args(argv)
    if args.load < 0:
        parser.error("--load takes a number of busy processes, 0 or more")
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in ORDER]
    if unknown or not systems:
        parser.error(f"unknown system(s) {', '.join(unknown) or '(none given)'}; "
                     f"choose among {','.join(ORDER)}")
    args.systems = [s for s in ORDER if s in systems]
    tiers = set(args.tier or TIERS)
    args.case = (sorted(set(args.case)) if args.case
                 else [c.id for c in CASES if c.tier in tiers])
    return args


def main(argv=None) -> int:
    """Run, print the table, write the JSON and the chart; the process exit code."""
    pin_threads()  # before numpy, torch or jax start their thread pools
    args = parse(argv)
    from benchmarks import load, report
    from benchmarks.runner import Options, run

    opts = Options(cases=args.case, systems=args.systems, quick=args.quick,
                   te_backend=args.te_backend, cache_dir=args.cache_dir,
                   rebuild=not args.no_rebuild, growth=not args.no_growth, load=args.load)
    results = run(opts, log=lambda s: print(s, file=sys.stderr, flush=True))
    print(report.table(results))
    loaded = load.table(results)
    if loaded:
        print("\n" + loaded)
    grown = report.growth_table(results)
    if grown:
        print("\n" + grown)
    report.write_json(results, args.json)
    print(f"\nresults: {args.json}")
    for tier, path in report.chart_paths(results, args.png).items():
        note = report.write_png(results, path, tier=tier)
        print(note or f"chart (tier {tier}): {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
