"""The cached rebuild: build the tensorexpr programs of some cases in a new process.

Spawned by the runner after its own builds, with the same
``$TENSOREXPR_CACHE_DIR``, so every compile should be a cache hit. Prints one
JSON line ``{case id: {"fwd_build_s": s, "build_s": s}}`` (None where that
program cannot be built), timing the same steps as the first build (define,
differentiate, build, first call); imports are done before any timing.

    python -m benchmarks.rebuild --quick 1 2
"""
from __future__ import annotations

import argparse
import json

from benchmarks import pin_threads


def main(argv=None) -> None:
    """Build the given cases' programs and print their build times as one JSON line."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rebuild")
    parser.add_argument("cases", type=int, nargs="+")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--te-backend", default="c")
    args = parser.parse_args(argv)
    pin_threads()
    from benchmarks.cases import by_id
    from benchmarks.systems import te_sys

    out = {}
    for case_id in args.cases:
        case = by_id(case_id)
        p = case.params(args.quick)
        inputs = case.inputs(p)
        H = case.head(te_sys.define(case, p)[1].shape)
        prep = te_sys.prepare(case, p, inputs, H, backend=args.te_backend)
        out[case_id] = {"fwd_build_s": prep.fwd_build_s, "build_s": prep.build_s}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
