"""The backstop on C size: a lowering past its budget stops with a clear error."""
from __future__ import annotations

import pytest

import tensorexpr as te
from codegen import size_bound


def test_a_lowering_past_its_budget_names_the_tensor_its_line_and_the_fix(monkeypatch):
    monkeypatch.setattr(size_bound, "TEMPORARIES_BASE", 5)
    monkeypatch.setattr(size_bound, "TEMPORARIES_PER_NODE", 0)
    X = te.placeholder((8,), "float64", "X")
    C = te.placeholder((8,), "float64", "C")

    def body(i):
        e = X[i]
        for d in range(8):
            e = te.select(C[(i + d) % 8] > 0.0, te.tanh(e) * 0.5, e * C[(i + d + 1) % 8])
        return e
    Y = te.compute((8,), body, name="Ydeep")  # the user's line the error names
    with pytest.raises(te.ProgramTooLargeError) as err:
        te.build(Y)
    msg = str(err.value)
    assert "tensor 'Ydeep'" in msg and "test_size_bound.py" in msg and "Y = te.compute" in msg
    assert "te.compute" in msg and "temporaries" in msg


def test_the_budget_grows_with_the_program():
    from codegen.signature import Signature
    X = te.placeholder((4,), name="X")
    small = te.compute((4,), lambda i: X[i] + 1.0, name="S")
    big = te.compute((4,), lambda i: sum((X[i] * float(k) for k in range(50)), X[i]), name="B")
    a, b = size_bound.Budget(Signature([small], [X])), size_bound.Budget(Signature([big], [X]))
    assert b.nodes > a.nodes and b.limit - a.limit == size_bound.TEMPORARIES_PER_NODE * (
        b.nodes - a.nodes)
