"""Loop unswitching (codegen.unswitch): invariant conditions leave vector loops."""
from __future__ import annotations

import numpy as np

import tensorexpr as te
from codegen.loopast import Block, Decl, For, If, Lit, Load, Op, Store, Var
from codegen.unswitch import MAX_CONDITIONS, unswitch

I64 = "int64"


def _loop(*stmts):
    return For(Var("i", I64), Lit(0, I64), Lit(8, I64), 1, Block(tuple(stmts)), simd=True)


def _if(cond, a, b):
    return If(cond, Block((Store("b", Var("i", I64), Lit(a, "float32")),)),
              Block((Store("b", Var("i", I64), Lit(b, "float32")),)))


def _eq(x, v):
    return Op("eq", (x, Lit(v, I64)), "bool")


def test_an_invariant_condition_is_tested_outside_the_loop():
    w = Var("w", I64)
    (out,) = unswitch([_loop(_if(_eq(w, 0), 1.0, 2.0))])
    assert isinstance(out, If) and out.cond == _eq(w, 0)
    then, orelse = out.then.stmts[0], out.orelse.stmts[0]
    assert isinstance(then, For) and then.simd and isinstance(orelse, For)
    assert not any(isinstance(s, If) for s in then.body.stmts + orelse.body.stmts)


def test_conditions_on_the_loop_on_its_values_or_on_memory_stay():
    i, t = Var("i", I64), Var("t0", "float32")
    on_loop = _loop(_if(_eq(i, 0), 1.0, 2.0))
    on_value = _loop(Decl(t, Lit(1.0, "float32")),
                     _if(Op("gt", (t, Lit(0.0, "float32")), "bool"), 1.0, 2.0))
    on_memory = _loop(_if(Op("gt", (Load("c", Lit(0, I64), "float32"), Lit(0.0, "float32")),
                             "bool"), 1.0, 2.0))
    for loop in (on_loop, on_value, on_memory):
        assert unswitch([loop]) == [loop]


def test_at_most_max_conditions_per_loop():
    ws = [Var(f"w{k}", I64) for k in range(MAX_CONDITIONS + 1)]
    loop = _loop(*[_if(_eq(w, 0), float(k), -1.0) for k, w in enumerate(ws)])
    out = unswitch([loop])[0]
    depth = 0
    while isinstance(out, If):
        depth += 1
        out = out.then.stmts[0]
    assert depth == MAX_CONDITIONS
    assert sum(isinstance(s, If) for s in out.body.stmts) == 1


def test_an_lstm_state_tests_its_part_outside_the_vector_loop_and_agrees():
    # s[t, b, w, j] = select(w == 0, c, o * tanh(c)) is lowered with an if on w inside the
    # loop over j (gcc left it scalar: 3.7x the time); the if now encloses two copies
    import re
    from benchmarks import recurrence_cells as rc
    T, B, H, D = 5, 2, 16, 3
    ins, grads = rc.te_program("lstm", T, B, H, D, None)
    (s,) = [t for t in te.ir.topo_order(grads) if t.name == "s"]
    f = te.build(s, ins)
    lines = f.source.splitlines()
    outside = [k for k, line in enumerate(lines[:-1]) if re.fullmatch(r"\s*if \(i\d+ == 0\) \{", line)
               and "#pragma omp simd" in lines[k + 1]]
    assert outside
    arrays = rc.arrays("lstm", T, B, H, D)
    np.testing.assert_allclose(f(*arrays), te.build(s, ins, backend="numpy")(*arrays),
                               rtol=1e-5, atol=1e-6)
