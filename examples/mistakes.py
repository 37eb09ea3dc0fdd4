"""Mistakes, and what tensorexpr says about them. Each is an exception naming the
tensor, the line that defined it and the fix; none is a C compiler error, a crash,
a hang or a silently wrong value. Run it:

    python examples/mistakes.py
"""
from __future__ import annotations

import numpy as np

import tensorexpr as te


def mistakes():
    """``[(what, callable that makes the mistake)]``."""
    X = te.placeholder((6,), name="X")
    n = te.var("n")
    V = te.placeholder((n,), name="V")
    big = te.placeholder((300, 300), name="big")
    twice = te.compute((300, 300), lambda i, j: big[i, j] * 2.0, name="twice")
    last = te.compute((), lambda: V[n - 1], name="last")
    i = te.reduce_axis(6, name="i")
    lin = te.compute((), lambda: te.sum(3.0 * X[i], axis=i), name="lin")
    (dlin,) = te.differentiate(lin, [X])
    return [
        ("a read past the end", lambda: te.compute((6,), lambda i: X[i + 1] - X[i],
                                                    name="diff")),
        ("a recurrence reading its own step", lambda: te.recurrence(
            (4,), lambda r, t: X[t] + r[t], name="bad_rec")),
        ("an if on an expression", lambda: te.compute(
            (6,), lambda i: X[i] if X[i] > 0 else 0.0, name="relu")),
        ("a forgotten head (a 32 GiB Jacobian)", lambda: te.differentiate(twice, [big])),
        ("the gradient of an integer", lambda: te.differentiate(
            te.compute((), lambda: te.cast(X[0], "int32"), name="k"), [X])),
        ("the wrong dtype", lambda: te.build(lin, backend="numpy")(np.ones(6))),
        ("the wrong shape", lambda: te.build(lin, backend="numpy")(np.ones(5, np.float32))),
        ("an input the gradient does not read", lambda: te.build(dlin, backend="numpy")(
            np.ones(6, np.float32))),
        ("an empty input read at its end", lambda: te.build(last, backend="numpy")(
            np.ones(0, np.float32))),
    ]


def main():
    """Returns ``{what: (exception type name, message)}``."""
    said = {}
    for what, make in mistakes():
        try:
            make()
        except Exception as err:  # noqa: BLE001 - every error is shown, whatever its type
            said[what] = (type(err).__name__, str(err))
            print(f"{what}:\n  {type(err).__name__}: {err}\n")
        else:
            raise AssertionError(f"{what}: no error")
    return said


if __name__ == "__main__":
    main()
