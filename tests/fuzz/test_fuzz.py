"""The gradient fuzzer, bounded for CI, and tests of the fuzzer itself.

``python -m tests.fuzz --minutes N`` runs it for as long as asked (see __main__.py).
"""
from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, seed as hseed, settings

import tensorexpr as te
from codegen import reference

from . import harness, programs as progmod, runner
from .coverage import Coverage, decisions
from .harness import Case, central_differences, check, check_programs, make_arrays, reproducer
from .programs import SYM, build, programs, to_source

_CI = dict(deadline=None, derandomize=True, database=None,
           suppress_health_check=list(HealthCheck))


@settings(max_examples=8, **_CI)
@given(runner.batches(3))
def test_random_programs(progs):
    """A bounded, reproducible run: forward C vs numpy, VJPs and second order vs fd."""
    check_programs(progs)


def test_random_big_programs():
    """The big size profile, bounded for CI (a fixed seed: the first examples of a
    derandomized run are the simplest programs, of a few points): forward C vs numpy,
    VJPs along random directions, float32 VJPs C vs numpy; its C builds take the
    strategies of long axes."""
    cov = Coverage()

    @hseed(4)
    @settings(max_examples=3, phases=[Phase.generate], **{**_CI, "derandomize": False})
    @given(runner.batches(2, sizes="big"))
    def run(progs):
        check_programs(progs, observe=cov.observe)
    run()
    assert cov.builds == 3 and {"rows", "jam", "taps", "split", "blocks"} & set(cov.counts)


def _boxes(e, box=1):
    """The points of every reduction nest of an expression tree (a box: the reduce axes
    bound around it, times ``box``)."""
    if not isinstance(e, tuple):
        return []
    if e and e[0] == "reduce":
        inner = box * _prod(_AXES[a] for a in e[2])
        return [inner] + _boxes(e[3], inner) + _boxes(e[4], inner)
    return [b for x in e for b in _boxes(x, box)]


_AXES = {}


def _prod(xs):
    out = 1
    for x in xs:
        out *= x
    return out


def test_the_big_profile_crosses_the_thresholds_within_its_budgets():
    """Big programs have sizes at and around vector widths and long axes, and stay
    within their budgets: a tensor of at most POINTS points, a reduction nest of at most
    WORK (a program runs in milliseconds)."""
    sample = _sample(150, "big")
    sizes = set()
    for p in sample:
        n = p.n or 0
        # a checkpointed recurrence's carry is made 3 steps longer (as is the output
        # added to read it)
        longer = {d.shape for d in p.defs if d.checkpoints}
        for t in list(p.inputs) + list(p.defs):
            shape = [n if d == SYM else d for d in t.shape]
            sizes.update(shape)
            slack = 3 * _prod(shape) if t.shape in longer else 0
            assert _prod(shape) <= progmod.POINTS + slack, (t, p)
        for d in p.defs:
            points = _prod(n if x == SYM else x for x in d.shape)
            _AXES.clear()
            _AXES.update({a: (n if hi == SYM else hi) - lo for a, lo, hi in d.raxes})
            for box in _boxes(d.body, points):
                # a recurrence's sum over its previous step's other axis is that axis long
                assert box <= progmod.WORK or d.carry is not None, (box, to_source(p))
    assert {8, 9, 15, 16, 17, 33, 64, 65} <= sizes and max(sizes) >= 60, sorted(sizes)
    assert any("te.sum((" in to_source(p) and ") * (" in to_source(p) for p in sample)


def test_directions_catch_a_wrong_gradient():
    """Along random directions (large inputs), a gradient off in one element is caught."""
    X = te.placeholder((40, 17), dtype="float64", name="X")
    Y = te.compute((40, 17), lambda i, j: te.tanh(X[i, j]) * X[i, j], name="Y")
    x = np.random.default_rng(1).uniform(-1.5, 1.5, (40, 17))
    case = Case("", Y, [X], [x], False, 0, source="Y", directions=3)
    harness.prepare(case)
    fl = te.build(case.L, inputs=[X, case.H], backend="numpy")
    good = te.build(case.grads[0], inputs=[X, case.H], backend="numpy")(x, case.h)
    harness._compare_grads(case, "VJP", [good], [good], fl, [x, case.h])
    bad = good.copy()
    bad[7, 3] += 1e-2
    with pytest.raises(AssertionError, match="along random directions"):
        harness._compare_grads(case, "VJP", [bad], [good], fl, [x, case.h])


def test_a_big_reproducer_draws_its_arrays():
    """A big program's reproducer draws its arrays as make_arrays does (no literals of
    thousands of numbers) and checks along random directions."""
    P = progmod
    prog = P.Program("float64", None, (P.Input("X0", (33, 17), "float", 0),), (
        P.Def("T0", (33,), ("i0",), (("k0", 0, 17),), (
            "reduce", "sum", ("k0",), None,
            ("read", "X0", (("ax", "i0"), ("ax", "k0")), ())), None),), False, 5, "big")
    src = reproducer(prog)
    assert "default_rng(5)" in src and "directions=3" in src and len(src) < 1000
    ns = {"np": np, "te": te, "check": check}
    exec(src, ns)
    ns["test_fuzz_5"]()


@settings(max_examples=100, **_CI)
@given(programs())
def test_generated_programs_are_valid(prog):
    """Every program builds (no BoundsError: reads are in range by construction), runs on
    the numpy backend without a run-time IndexError, and prints as source that builds."""
    ns = build(prog)
    Y = ns[prog.output.name]
    assert Y.dtype == prog.dtype
    want = tuple(prog.n if d == SYM else d for d in prog.output.shape)
    f = te.build(Y, inputs=[ns[i.name] for i in prog.inputs], backend="numpy")
    out = f(*make_arrays(prog))
    assert out.shape == want and out.dtype == np.dtype(prog.dtype)
    assert f"def test_fuzz_{prog.seed}():" in reproducer(prog)


@settings(max_examples=25, **_CI)
@given(runner.batches(4, dtype="float64", max_defs=2, max_depth=2))
def test_batched_names_do_not_collide(progs):
    """Programs of one batch get prefixed names: their tensors are all distinct."""
    names = []
    for j, prog in enumerate(progs):
        ns = build(prog, f"p{j}_")
        names += [ns[f"p{j}_{d.name}"].name for d in prog.defs]
    assert len(names) == len(set(names))


def test_the_generator_covers_the_language():
    """Over a fixed sample the generator emits every construct the fuzzer promises."""
    seen = " ".join(to_source(p) for p in _sample(400))
    for construct in ["te.recurrence", "te.sum(", "te.max(", "te.min(", "where=", "te.select(",
                      "te.maximum(", "te.minimum(", " // ", " % ", 'te.var("n")', "I0[",
                      "S[i0 - (1)", "S[i0 - (2)", "S[i0 - (3)", "reduce_axis((1,",
                      "reduce_axis((0, n)", "~(", ") | (", ") & (", "te.exp(", "te.log(",
                      "te.sqrt(", "te.tanh(", "te.sigmoid(", "te.sin(", "te.cos(", "te.abs(",
                      "te.floor(", "te.ceil(", "** 2", "** te.minimum(", "float32", "float64", "2 * i", "- (i0)",
                      "checkpoints="]:
        assert construct in seen, construct
    # the carry of a recurrence is not always its first dimension
    assert any(d.carry not in (None, 0) for p in _sample(300) for d in p.defs)


def _sample(n, sizes="small", _cache={}):
    """``n`` programs hypothesis generates with the CI settings (kept: drawing takes time)."""
    if (n, sizes) not in _cache:
        out = []

        @settings(max_examples=n, **_CI)
        @given(programs(sizes=sizes))
        def collect(p):
            out.append(p)
        collect()
        _cache[n, sizes] = out
    return _cache[n, sizes]


def test_central_differences_mark_kinks():
    """Where two step sizes disagree (a floor's jump) the point is skipped, not failed."""
    x = np.array([0.5, 1.0 + 1e-5, 2.3])
    fd, ok = central_differences(lambda a: np.floor(a).sum() + (a ** 2).sum(), [x], 0)
    assert ok.tolist() == [True, False, True]
    assert np.allclose(fd[ok], 2 * x[ok])


def test_a_wrong_gradient_is_caught():
    """The gradient comparison fails on a gradient that is off by a factor."""
    X = te.placeholder((3,), dtype="float64", name="X")
    Y = te.compute((3,), lambda i: X[i] * X[i], name="Y")
    x = np.array([0.3, -0.7, 1.1])
    case = Case("", Y, [X], [x], False, 0, source="Y = X * X")
    harness.prepare(case)
    fl = te.build(case.L, inputs=[X, case.H], backend="numpy")
    good = te.build(case.grads[0], inputs=[X, case.H], backend="numpy")(x, case.h)
    harness._compare_grads(case, "VJP", [good], [good], fl, [x, case.h])
    with pytest.raises(AssertionError, match="differs from central differences"):
        harness._compare_grads(case, "VJP", [1.01 * good], [good], fl, [x, case.h])


def test_a_wrong_forward_value_is_caught():
    X = te.placeholder((2,), dtype="float64", name="X")
    Y = te.compute((2,), lambda i: te.exp(X[i]), name="Y")
    case = Case("", Y, [X], [np.zeros(2)], False, 0)
    with pytest.raises(AssertionError, match="C differs from numpy"):
        harness._compare_forward(case, np.array([1.0, 1.0 + 1e-6]), np.array([1.0, 1.0]))
    with pytest.raises(AssertionError, match="NaN patterns differ"):
        harness._compare_forward(case, np.array([1.0, np.nan]), np.array([1.0, 1.0]))


def _amplifying(dtype, steps=16):
    """A recurrence adding a quarter of its previous-but-one row's sum (62 terms): about
    15x per two steps, so float32 rounding reaches the first digit by step 14 (float64's
    reaches 1e-4 by step 24)."""
    X = te.placeholder((54,), dtype=dtype, name="X")
    k, m = te.reduce_axis((0, 54), name="k"), te.reduce_axis((0, 62), name="m")
    R = te.recurrence((steps, 62), lambda S, t, r: te.sin(
        te.sum(X[k] * X[k], axis=k) - 1.5 + 0.5 * te.select(t >= 1, S[t - 1, r], 0.0)
        + 0.25 * te.sum(te.select(t >= 2, S[t - 2, m], 0.0), axis=m)), name="R", dtype=dtype)
    return R, X


def test_an_amplifying_float32_program_agrees_within_numpys_own_rounding_error():
    """Found by the big profile: such a float32 program's C and numpy values differ by
    up to 0.3 in its last rows (its sums added in another order), less than numpy's
    float32 differs from float64 there (1.3): C agrees within (SPREAD times) numpy's
    own float32 error, measured against the float64 twin, and is checked at the usual
    tolerance where that error is small."""
    R, X = _amplifying("float32")
    R64, X64 = _amplifying("float64")
    x = np.random.default_rng(582).uniform(-1.5, 1.5, 54).astype(np.float32)
    got, want = te.build(R, [X])(x), te.build(R, [X], backend="numpy")(x)
    exact = te.build(R64, [X64], backend="numpy")(x.astype(np.float64))
    err = np.abs(want - exact)
    assert err[0].max() < 1e-6 and err[-1].max() > 0.1 and np.abs(got - want).max() > 2e-4 * 17
    case = Case("", R, [X], [x], False, 0)
    with pytest.raises(AssertionError, match="C differs from numpy"):  # without the twin
        harness._compare_forward(case, got, want)
    harness._compare_forward(case, got, want, spread=lambda: err)
    bad = got.copy()
    bad[1, 5] += 0.01  # where float32 is still accurate
    with pytest.raises(AssertionError, match="from float64's"):
        harness._compare_forward(case, bad, want, spread=lambda: err)
    check(R, [X], [x], exact=(R64, [X64]))


def test_an_amplifying_float64_program_agrees_within_numpys_own_rounding_error():
    """The same recurrence in float64 over 24 steps: C and numpy differ by about 1e-4 in
    its last rows, within (SPREAD times) numpy's float64 error measured against the same
    program evaluated in long double (``codegen.reference.widened``), and at the usual
    tolerance where that error is small."""
    R, X = _amplifying("float64", 24)
    x = np.random.default_rng(582).uniform(-1.5, 1.5, 54)
    got, want = te.build(R, [X])(x), te.build(R, [X], backend="numpy")(x)
    (wide,) = reference.widened(te.build(R, [X], backend="numpy"))(x)
    err = np.abs(want - wide).astype(np.float64)
    if np.finfo(np.longdouble).nmant <= 52:
        pytest.skip("long double is double here: no wider twin")
    assert err[0].max() < 1e-14 and err[-1].max() > 1e-5 and np.abs(got - want).max() > 1e-6
    case = Case("", R, [X], [x], False, 0)
    with pytest.raises(AssertionError, match="C differs from numpy"):  # without the twin
        harness._compare_forward(case, got, want)
    harness._compare_forward(case, got, want, spread=lambda: err)
    bad = got.copy()
    bad[1, 5] += 1e-6  # where float64 is still accurate
    with pytest.raises(AssertionError, match="from long double's"):
        harness._compare_forward(case, bad, want, spread=lambda: err)
    check(R, [X], [x])


def test_a_checkpointed_gradient_is_compared_with_its_full_tape():
    """A recurrence with ``checkpoints=k`` whose gradient reads it at every step (dW sums
    over its steps; the output is its last step: an output reading every step keeps the
    full tape): the checkpointed C build passes the checks, and is compared bit for bit
    with its full tape (a last-bit difference is caught)."""
    X, W = te.placeholder((6, 2), "float64", "X"), te.placeholder((2,), "float64", "W")
    R = te.recurrence((6, 2), lambda S, t, r: te.tanh(X[t, r] + W[r] * te.select(
        t >= 1, S[t - 1, r], 0.0)), name="R", dtype="float64", checkpoints=2)
    Y = te.compute((2,), lambda r: 0.5 * R[5, r], name="Y")
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(-1, 1, (6, 2)), rng.uniform(-1, 1, 2)]
    check(Y, [X, W], arrays)
    case = Case("", Y, [X, W], arrays, False, 0)
    harness.prepare(case)
    outputs, (ins, arrs) = [Y, *case.grads], harness._all_inputs(case)
    f = te.build(outputs, ins)
    assert any("checkpoints" in c for c in f.schedule.checkpoint)
    res = list(f(*arrs))
    harness._compare_full_tape([case], [0], f, res, outputs, ins, arrs)
    res[2] = np.nextafter(res[2], np.inf)
    with pytest.raises(AssertionError, match="differs from the full tape"):
        harness._compare_full_tape([case], [0], f, res, outputs, ins, arrs)


def test_check_on_a_user_program():
    """:func:`check` is what a reproducer calls: a recurrence with a shifted read, second order."""
    X = te.placeholder((2, 4), dtype="float64", name="X")
    R = te.recurrence((4, 2), lambda S, t, r: te.tanh(X[r, t] + te.select(
        t >= 1, 0.5 * S[t - 1, r], 0.0)), name="R", dtype="float64")
    check(R, [X], [np.random.default_rng(0).uniform(-1, 1, (2, 4))], second_order=True)


def test_reproducer_is_runnable_source():
    """The printed reproducer of a program is a test function that runs as pasted."""
    prog = progmod.Program("float64", 2, (progmod.Input("X0", (SYM, 3), "float", 0),), (
        progmod.Def("T0", (SYM,), ("i0",), (("k0", 1, 3),), (
            "reduce", "sum", ("k0",), None,
            ("read", "X0", (("ax", "i0"), ("ax", "k0")), ())), None),), True, 7)
    src = reproducer(prog)
    ns = {"np": np, "te": te, "check": check}
    exec(src, ns)
    ns["test_fuzz_7"]()


def test_a_chain_definition_prints_as_a_loop():
    """A long chain of computes (deep graphs) is one definition, printed as a loop."""
    P = progmod
    prev = ("read", "@P", (("ax", "i0"),), ())
    prog = P.Program("float64", None, (P.Input("X0", (3,), "float", 0),), (
        P.Def("T0", (3,), ("i0",), (), ("read", "X0", (("ax", "i0"),), ()), None),
        P.Def("T1", (3,), ("i0",), (), ("un", "tanh", prev), None, chain=5)), False, 3)
    src = to_source(prog)
    assert "for _ in range(5):" in src and "(lambda P: te.compute(" in src
    ns = build(prog)
    check(ns["T1"], [ns["X0"]], make_arrays(prog), backend="numpy")
    ns = build(prog, "p0_")
    x = make_arrays(prog)[0]
    got = te.build(ns["p0_T1"], inputs=[ns["p0_X0"]], backend="numpy")(x)
    want = x
    for _ in range(5):
        want = np.tanh(want)
    np.testing.assert_allclose(got, want)


def test_signature_ignores_names_and_numbers():
    a = IndexError("tensor 'dp1_X0' (defined at <fuzz program>:2) reads 'p1_X0' at index -2")
    b = IndexError("tensor 'dX0' (defined at <fuzz program>:5) reads 'X0' at index 3")
    assert runner.signature(a) == runner.signature(b)


def test_cli_runs_and_reports_throughput(capsys, tmp_path, monkeypatch):
    from .__main__ import main
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(tmp_path))
    rc = main(["--programs", "2", "--batch", "2", "--minutes", "1", "--seed", "5",
               "--shrink-seconds", "0"])
    out = capsys.readouterr().out
    assert "2 programs (" in out and "/min)" in out
    assert ("0 distinct failure classes" in out) == (rc == 0)


@pytest.mark.parametrize("name", ["tests.fuzz.programs", "tests.fuzz.harness",
                                  "tests.fuzz.runner", "tests.fuzz.coverage"])
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("head, decision", [("conv", "copy/padded"),
                                            ("matmul", "copy/transposed"),
                                            ("wide", "streamed")])
def test_program_heads_take_the_rewrites_they_are_drawn_for(head, decision):
    """Programs starting with a convolution, a matrix product or a wide map (without
    recurrences, lowered for the harness's target of small caches) take zero-padded
    copies, transposed copies and streaming stores in most draws: in 3-minute fuzz runs
    each was taken 0 times before such heads (dead code, rows too short, 1..4 axes)."""
    from codegen import pipeline
    from codegen.signature import Signature
    taken = []

    @settings(max_examples=8, **_CI)
    @given(programs(head=head, recurrences=False))
    def run(prog):
        ns = build(prog)
        case = Case("", ns[prog.output.name], [ns[i.name] for i in prog.inputs],
                    make_arrays(prog), prog.second_order, prog.seed)
        harness.prepare(case)
        ins, _ = harness._all_inputs(case)
        with harness.small_caches():
            _, schedule = pipeline.lower(Signature([case.Y, *case.grads, *case.grads2], ins))
        taken.append(decision in decisions(schedule))
    run()
    assert sum(taken) >= len(taken) // 2, taken
