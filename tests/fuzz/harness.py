"""Checks of random programs: forward C vs numpy, VJPs and second order vs central differences.

:func:`check` takes tensors a user wrote (a reproducer pastes it); :func:`check_programs`
takes several generated :class:`~tests.fuzz.programs.Program` s and builds all of
them in *one* C build (the C compiler is the expensive part). A failure raises
``AssertionError`` whose message names the program and the check.

>>> import numpy as np, tensorexpr as te
>>> X = te.placeholder((3,), dtype="float64", name="X")
>>> Y = te.compute((3,), lambda i: te.tanh(X[i]), name="Y")
>>> check(Y, [X], [np.array([0.1, -0.2, 0.3])], backend="numpy")
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Optional

import numpy as np

import tensorexpr as te
from codegen import reference, target

from .programs import SYM, Program, build, to_source

EPS = (1e-6, 1e-4)  # two central-difference steps: where they disagree there is a kink


@dataclass
class Case:
    """One program's tensors and data, and what its checks need."""
    label: str
    Y: object
    inputs: list
    arrays: list
    second_order: bool
    seed: int
    source: str = ""
    #: a float32 program's float64 twin ``(Y, inputs)``: numpy's float32 error is measured
    #: against it where C and numpy differ (see :func:`_compare_forward`)
    exact: Optional[tuple] = None
    #: 0: the VJPs against central differences at every input element; k > 0: along k
    #: random directions per input (large inputs: :func:`directional_differences`)
    directions: int = 0
    # filled by prepare()
    float_idx: list = field(default_factory=list)
    H: object = None
    h: object = None
    L: object = None
    grads: tuple = ()
    V: list = field(default_factory=list)
    v: list = field(default_factory=list)
    L2: object = None
    grads2: tuple = ()


def _sum_all(T, W):
    """``sum(W * T)`` as a 0-d tensor."""
    axes = [te.reduce_axis((0, d)) for d in T.shape]
    if not axes:
        return te.compute((), lambda: W[()] * T[()], name="L")
    return te.compute((), lambda: te.sum(W[tuple(axes)] * T[tuple(axes)], axis=axes), name="L")


def _concrete(shape, sizes: dict):
    return tuple(sizes.get(getattr(d, "name", None), d) if not isinstance(d, int) else d
                 for d in shape)


def _sizes(inputs, arrays) -> dict:
    sizes = {}
    for t, a in zip(inputs, arrays):
        for d, s in zip(t.shape, a.shape):
            if not isinstance(d, int) and hasattr(d, "name"):
                sizes[d.name] = s
    return sizes


def prepare(case: Case) -> None:
    """Differentiate: L = sum(H * Y), its VJPs, and (on a sample) sum(dX * V)'s VJPs.

    A float32 program's VJPs (w.r.t. its float32 inputs) are compared between the
    backends only; float64 ones against central differences too.
    """
    rng = np.random.default_rng(case.seed + 1)
    sizes = _sizes(case.inputs, case.arrays)
    dtype = case.Y.dtype
    if dtype not in ("float64", "float32"):
        return
    case.float_idx = [k for k, t in enumerate(case.inputs) if t.dtype == dtype]
    if not case.float_idx:
        return
    case.H = te.placeholder(case.Y.shape, dtype=dtype, name=f"{case.label}H")
    case.h = rng.standard_normal(_concrete(case.Y.shape, sizes)).astype(dtype)
    case.L = _sum_all(case.Y, case.H)
    wrt = [case.inputs[k] for k in case.float_idx]
    case.grads = tuple(te.differentiate(case.L, wrt))
    if case.second_order and dtype == "float64":
        case.V = [te.placeholder(g.shape, dtype="float64", name=f"{case.label}V{j}")
                  for j, g in enumerate(case.grads)]
        case.v = [rng.standard_normal(_concrete(g.shape, sizes)) for g in case.grads]
        terms = [_sum_all(g, v) for g, v in zip(case.grads, case.V)]
        L2 = terms[0]
        for t in terms[1:]:
            L2 = te.compute((), lambda a=L2, b=t: a[()] + b[()], name="L2")
        case.L2 = L2
        case.grads2 = tuple(te.differentiate(L2, wrt))


def _all_inputs(case: Case):
    extra = ([case.H] if case.H is not None else []) + list(case.V)
    extra_arrays = ([case.h] if case.H is not None else []) + list(case.v)
    return list(case.inputs) + extra, list(case.arrays) + extra_arrays


def _fail(case: Case, what: str, detail: str):
    raise AssertionError(f"{what} of program {case.label}: {detail}\n--- program ---\n"
                         f"{case.source}")


def _compare_forward(case: Case, got, want, what: str = "forward", spread=None):
    """C's values against numpy's, elementwise (``what``: the check a failure names).

    ``spread()`` (if given, asked only when the values are further apart than the
    tolerance) is how far numpy's values are from the same program's in a wider type,
    elementwise (float32's from its float64 twin's, float64's from long double's:
    :func:`_rounding_error`): a program that amplifies rounding (a recurrence adding a
    quarter of its previous row's sum, 15x per two steps) has no digits of its type to
    agree on there, whatever the order its sums are added in; such elements may
    differ by :data:`SPREAD` times that much more.
    """
    if got.shape != want.shape or got.dtype != want.dtype:
        _fail(case, what, f"C gives {got.dtype}{got.shape}, numpy {want.dtype}{want.shape}")
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        _fail(case, what, f"NaN patterns differ\nC:     {got!r}\nnumpy: {want!r}")
    finite = np.isfinite(want)
    if not np.array_equal(finite, np.isfinite(got)) or not np.array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)]):
        _fail(case, what, f"infinities differ\nC:     {got!r}\nnumpy: {want!r}")
    scale = max(1.0, float(np.abs(want[finite]).max())) if finite.any() else 1.0
    tol = 1e-9 if want.dtype == np.float64 else 2e-4
    err = np.abs(got[finite] - want[finite])
    if not err.size or err.max() <= tol * scale:
        return
    extra = ""
    sp = spread() if spread is not None else None
    if sp is not None:
        sp = sp[finite]
        if not (err > tol * scale + SPREAD * sp).any():
            return
        extra = (f"; numpy's {want.dtype} values are up to {sp.max():.3g} from "
                 f"{'float64' if want.dtype == np.float32 else 'long double'}'s")
    _fail(case, what, f"C differs from numpy by {err.max():.3g} (scale {scale:.3g}){extra}"
                      f"\nC:     {got!r}\nnumpy: {want!r}")


#: how many times numpy's own rounding error (its float32 values against float64's, its
#: float64 values against long double's) C's values may be off by, beyond the tolerance
SPREAD = 4


def central_differences(fn, arrays, k):
    """Central differences of scalar ``fn`` w.r.t. ``arrays[k]`` at two steps: (fd, smooth mask).

    Where the two steps disagree the function has a kink (a select on data, a max tie,
    a floor) near the point, and the mask is False there.

    >>> fd, ok = central_differences(lambda x: (x ** 2).sum(), [np.array([1.0, 2.0])], 0)
    >>> np.allclose(fd, [2.0, 4.0]), bool(ok.all())
    (True, True)
    """
    a = arrays[k]

    def units():
        for idx in np.ndindex(a.shape):
            e = np.zeros(a.shape)
            e[idx] = 1.0
            yield idx, e
    return _differences(fn, arrays, k, a.shape, units)


def directional_differences(fn, arrays, k, directions):
    """Central differences of scalar ``fn`` along each of ``directions`` (arrays shaped as
    ``arrays[k]``), at two steps: (one derivative per direction, smooth mask), as
    :func:`central_differences` (which is this along every unit vector). A large input
    takes a few directions instead of one per element: ``<grad, v>`` is compared with
    the derivative along ``v``.

    >>> x = np.array([1.0, 2.0])
    >>> fd, ok = directional_differences(lambda x: (x ** 2).sum(), [x], 0, [np.array([1.0, -1.0])])
    >>> np.allclose(fd, [2.0 - 4.0]), bool(ok.all())
    (True, True)
    """
    return _differences(fn, arrays, k, (len(directions),),
                        lambda: (((j,), v) for j, v in enumerate(directions)))


def _differences(fn, arrays, k, shape, directions):
    """(derivatives along ``directions()``, pairs (index into ``shape``, direction);
    where the two steps of :data:`EPS` agree)."""
    a = arrays[k]
    fds = []
    for eps in EPS:
        out = np.zeros(shape)
        for idx, v in directions():
            plus = list(arrays)
            minus = list(arrays)
            plus[k] = a + eps * v
            minus[k] = a - eps * v
            out[idx] = (float(fn(*plus)) - float(fn(*minus))) / (2 * eps)
        fds.append(out)
    fd, fd2 = fds
    scale = max(1.0, float(np.abs(fd).max())) if fd.size and np.isfinite(fd).all() else 1.0
    ok = np.isfinite(fd) & np.isfinite(fd2) & (np.abs(fd - fd2) <= 1e-5 * scale + 1e-5 * np.abs(fd))
    return fd, ok


def _compare_grads(case: Case, what: str, got_c, got_np, fd_fn, fd_arrays, spread=None):
    """The gradients against central differences, and C's against numpy's (``spread(j)``:
    numpy's rounding error in gradient j, as :func:`_compare_forward` takes it)."""
    rng = np.random.default_rng(case.seed + 2)
    for j, k in enumerate(case.float_idx):
        name = case.inputs[k].name
        gc, gn = np.asarray(got_c[j]), np.asarray(got_np[j])
        want = fd_arrays[k].shape
        if case.directions:
            vs = [rng.standard_normal(want) for _ in range(case.directions)]
            fd, ok = directional_differences(fd_fn, fd_arrays, k, vs)
            along = " along random directions"

            def project(g):
                return np.array([np.sum(g * v) for v in vs])
        else:
            fd, ok = central_differences(fd_fn, fd_arrays, k)
            along = ""

            def project(g):
                return g
        scale = max(1.0, float(np.abs(fd[ok]).max())) if ok.any() else 1.0
        tol = 1e-5 * scale
        for backend, g in (("C", gc), ("numpy", gn)):
            if g.shape != want:
                _fail(case, what, f"{backend} gradient of {name} has shape {g.shape}, "
                                  f"not {want}")
            dg = project(g)
            bad = ok & ~(np.abs(dg - fd) <= tol + 1e-5 * np.abs(fd))
            if bad.any():
                _fail(case, what, f"{backend} gradient of {name} differs from central "
                                  f"differences{along} at {np.argwhere(bad)[0].tolist()}\n"
                                  f"{backend}: {dg!r}\nfd: {fd!r}\nsmooth: {ok!r}")
        err = np.abs(gc - gn)
        tol = 1e-7 * max(1.0, float(np.abs(gn[np.isfinite(gn)]).max()
                                    if np.isfinite(gn).any() else 1.0))
        bad = ~(err <= tol) & ~(np.isnan(gc) & np.isnan(gn))
        if bad.any() and spread is not None and spread(1 + j) is not None:
            bad &= ~(err <= tol + SPREAD * spread(1 + j))
        if bad.any():
            _fail(case, what, f"C and numpy gradients of {name} differ at "
                              f"{np.argwhere(bad)[0].tolist()}\nC: {gc!r}\nnumpy: {gn!r}")


STAGES = ("build", "forward", "vjp", "second")

#: a target whose thresholds the fuzzer's arrays (a few hundred bytes to 32 KiB) cross: a
#: last-level cache of 2 KiB, outputs of 512 bytes (a row of 64 float64) streamed
#: (``codegen.streaming``; the real ones, 32 MiB and 4 MiB, need arrays the checks cannot
#: afford, and 64 KiB / 4 KiB were crossed by no program: 0 streamed in 3 minutes)
SMALL_CACHES = dict(llc_bytes=2 << 10, stream_bytes=512)


def small_caches():
    """Lower for this machine with :data:`SMALL_CACHES` inside the block (the target is
    in the build key: no kernel of the real target is reused).

    >>> with small_caches():
    ...     target.current().stream_bytes
    512
    """
    return target.use(replace(target.current(), **SMALL_CACHES))


def _staged(stage: str, fn, *args):
    """Run ``fn``; an exception leaving it records the stage it came from (``fuzz_stage``)."""
    try:
        return fn(*args)
    except Exception as exc:
        if not hasattr(exc, "fuzz_stage"):
            exc.fuzz_stage = stage
        raise


def _compare_full_tape(cases, where, f_c, res_c, outputs, inputs, arrays) -> None:
    """Where the C build checkpointed a recurrence (``checkpoints=k``), every output is
    its full tape's (``ScheduleOptions(checkpoint=False)``) bit for bit."""
    if not any("checkpoints" in c for c in f_c.schedule.checkpoint):
        return
    full = te.build(outputs, inputs, "c", options=te.ScheduleOptions(checkpoint=False))
    res_full = full(*arrays)
    if len(outputs) == 1:
        res_full = (res_full,)
    for j, (got, want) in enumerate(zip(res_c, res_full)):
        if not np.array_equal(got, want, equal_nan=True):
            case = cases[max(k for k, start in enumerate(where) if start <= j)]
            _fail(case, "checkpointed gradient", f"output {outputs[j].name} differs from the "
                  f"full tape's ({'; '.join(f_c.schedule.checkpoint)})\nC: {got!r}\n"
                  f"full tape: {want!r}")


def _rounding_error(case: Case, got_np):
    """``spread(j)``: how far numpy's value of output j (Y, then its VJPs) is from the
    same program's in a wider type, elementwise: a float32 program's float64 twin, a
    float64 program evaluated in long double (``codegen.reference.widened``); computed
    once, when first asked; None for other programs."""
    done = []

    def spread(j):
        if case.exact is None and case.Y.dtype != "float64":
            return None
        if not done and case.exact is None:
            ins, arrs = _all_inputs(case)
            wide = reference.widened(te.build([case.Y, *case.grads], ins, backend="numpy"))
            want = wide(*arrs)
            done.extend(np.abs(np.asarray(g, np.longdouble) - w).astype(np.float64)
                        for g, w in zip(got_np, want))
        if not done:
            Y, inputs = case.exact
            twin = Case(case.label, Y, list(inputs),
                        [a.astype(np.float64) if a.dtype.kind == "f" else a for a in case.arrays],
                        False, case.seed)
            prepare(twin)
            ins, arrs = _all_inputs(twin)
            if twin.H is not None:  # the same head
                arrs[next(k for k, t in enumerate(ins) if t is twin.H)] = case.h.astype(np.float64)
            want = te.build([twin.Y, *twin.grads], ins, backend="numpy")(*arrs)
            want = want if isinstance(want, tuple) else (want,)
            done.extend(np.abs(np.asarray(g, np.float64) - w) for g, w in zip(got_np, want))
        return done[j]
    return spread


def run_cases(cases, backend: str = "c", upto: str = "second", observe=None) -> None:
    """Build every case's outputs and gradients in one build per backend, and check them.

    ``upto`` stops after a stage of :data:`STAGES` (shrinking a build failure needs no
    central differences); ``observe`` (if given) is called with the C build (to count
    its schedule decisions: ``tests.fuzz.coverage``).
    """
    last = STAGES.index(upto)
    outputs, inputs, arrays, where = [], [], [], []
    for case in cases:
        _staged("build", prepare, case)
        ins, arrs = _all_inputs(case)
        for t, a in zip(ins, arrs):
            if not any(t is u for u in inputs):
                inputs.append(t)
                arrays.append(a)
        start = len(outputs)
        outputs += [case.Y, *case.grads, *case.grads2]
        where.append(start)
    # checkpointed gradients (recurrences with checkpoints=k) in either mode, by the
    # first program's seed; half the builds (independently) for a machine of small
    # caches: the target changes which outputs stream, and nothing else
    mode = "segments" if cases[0].seed % 2 else True
    with small_caches() if cases[0].seed // 2 % 2 == 0 else contextlib.nullcontext():
        f_c = _staged("build", partial(te.build, options=te.ScheduleOptions(checkpoint=mode)),
                      outputs, inputs, backend)
    f_np = _staged("build", te.build, outputs, inputs, "numpy")
    if observe is not None and backend == "c":
        observe(f_c)
    if last < 1:
        return
    res_c, res_np = _staged("forward", f_c, *arrays), _staged("forward", f_np, *arrays)
    if len(outputs) == 1:
        res_c, res_np = (res_c,), (res_np,)
    if last >= 2 and backend == "c":
        _staged("vjp", _compare_full_tape, cases, where, f_c, res_c, outputs, inputs, arrays)
    for case, start in zip(cases, where):
        ng = len(case.grads)
        y_c, y_np = res_c[start], res_np[start]
        spread = _rounding_error(case, res_np[start:start + 1 + ng])
        _staged("forward", _compare_forward, case, y_c, y_np, "forward", partial(spread, 0))
        if last < 2 or not ng or not np.isfinite(y_np).all():
            continue
        if case.Y.dtype != "float64":  # float32: the backends against each other
            for j in range(ng):
                _staged("vjp", _compare_forward, case, res_c[start + 1 + j],
                        res_np[start + 1 + j], f"VJP of {case.inputs[case.float_idx[j]].name}",
                        partial(spread, 1 + j))
            continue
        ins, arrs = _all_inputs(case)
        fl = te.build(case.L, inputs=ins, backend="numpy")
        _staged("vjp", _compare_grads, case, "VJP", res_c[start + 1:start + 1 + ng],
                res_np[start + 1:start + 1 + ng], fl, arrs, spread)
        if last < 3 or case.L2 is None:
            continue
        g1 = res_np[start + 1:start + 1 + ng]
        if not all(np.isfinite(g).all() for g in g1):
            continue
        fl2 = te.build(case.L2, inputs=ins, backend="numpy")
        _staged("second", _compare_grads, case, "second order",
                res_c[start + 1 + ng:start + 1 + 2 * ng],
                res_np[start + 1 + ng:start + 1 + 2 * ng], fl2, arrs)


def check(Y, inputs, arrays, second_order=False, seed=0, backend="c", directions=0,
          exact=None) -> None:
    """Check one program a user wrote: forward C vs numpy; VJPs (float64) vs central differences.

    ``second_order=True`` also differentiates ``sum(dX * V)`` again; ``directions=k``
    checks the VJPs along k random directions per input instead of at every element;
    ``exact=(Y64, inputs64)``, a float32 program's float64 twin, measures numpy's float32
    rounding error where C and numpy differ (:func:`_compare_forward`).
    """
    arrays = [np.asarray(a) for a in arrays]
    run_cases([Case("Y", Y, list(inputs), arrays, second_order, seed, directions=directions,
                    exact=exact)], backend=backend)


def make_arrays(prog: Program, rng=None):
    """Random input arrays of a program: floats in [-1.5, 1.5], indices in [0, vmax).

    >>> from .programs import Input
    >>> p = Program("float32", 3, (Input("X0", (2, "n"), "float", 0),
    ...                            Input("I0", (4,), "index", 2)), ())
    >>> [(a.shape, a.dtype.name) for a in make_arrays(p)]
    [((2, 3), 'float32'), ((4,), 'int32')]
    """
    rng = rng or np.random.default_rng(prog.seed)
    arrays = []
    for inp in prog.inputs:
        shape = tuple(prog.n if d == SYM else d for d in inp.shape)
        if inp.kind == "float":
            arrays.append(rng.uniform(-1.5, 1.5, shape).astype(prog.dtype))
        else:
            arrays.append(rng.integers(0, inp.vmax, shape).astype(np.int32))
    return arrays


#: random directions per input of a big-profile program's VJP check (too many elements
#: for central differences at each)
DIRECTIONS = 3
#: a small-profile program with an input of more points than this (a generated
#: convolution, matrix product or wide map) is checked along :data:`DIRECTIONS` too
FD_POINTS = 64


def directional(prog: Program) -> bool:
    """Is ``prog`` checked along random directions (and its reproducer's arrays drawn)?

    >>> from .programs import Input
    >>> directional(Program("float64", None, (Input("Xw", (2, 64), "float", 0),), ()))
    True
    """
    if prog.sizes == "big":
        return True
    return any(_points(i.shape, prog.n) > FD_POINTS for i in prog.inputs)


def _points(shape, n) -> int:
    out = 1
    for d in shape:
        out *= n if d == SYM else d
    return out


def twin(prog: Program) -> Program:
    """A float32 program in float64 (its values without float32's rounding).

    >>> from .programs import Input
    >>> twin(Program("float32", None, (Input("X0", (2,), "float", 0),), ())).dtype
    'float64'
    """
    return replace(prog, dtype="float64")


def reproducer(prog: Program) -> str:
    """A pytest function reproducing ``prog``'s checks, to paste into tests/fuzz/test_corpus.py.

    A :func:`directional` program's arrays are drawn as :func:`make_arrays` draws them
    (thousands of elements are no literal to paste); a float32 program's float64 :func:`twin` is
    defined too (names prefixed ``e_``)."""
    body = "\n    ".join(to_source(prog).splitlines())
    names = ", ".join(i.name for i in prog.inputs)
    exact = ""
    if prog.dtype == "float32":
        body += "\n    " + "\n    ".join(to_source(twin(prog), "e_").splitlines())
        exact = (f", exact=(e_{prog.output.name}, "
                 f"[{', '.join('e_' + i.name for i in prog.inputs)}])")
    if directional(prog):
        lines = [f"rng = np.random.default_rng({prog.seed})"]
        for inp in prog.inputs:
            shape = tuple(prog.n if d == SYM else d for d in inp.shape)
            lines.append(f"{inp.name}_ = rng.uniform(-1.5, 1.5, {shape!r}).astype({prog.dtype!r})"
                         if inp.kind == "float" else
                         f"{inp.name}_ = rng.integers(0, {inp.vmax}, {shape!r}).astype(np.int32)")
        data = "\n    ".join(lines)
        arrs = ", ".join(f"{i.name}_" for i in prog.inputs)
        return (f"def test_fuzz_{prog.seed}():\n    {body}\n    {data}\n"
                f"    check({prog.output.name}, [{names}], [{arrs}],\n"
                f"          second_order={prog.second_order}, seed={prog.seed}, "
                f"directions={DIRECTIONS}{exact})\n")
    arrays = make_arrays(prog)
    lits = ",\n        ".join(f"np.array({a.tolist()!r}, dtype={str(a.dtype)!r})" for a in arrays)
    return (f"def test_fuzz_{prog.seed}():\n    {body}\n"
            f"    check({prog.output.name}, [{names}], [\n        {lits}],\n"
            f"          second_order={prog.second_order}, seed={prog.seed}{exact})\n")


def check_programs(progs, upto: str = "second", observe=None) -> None:
    """Check several generated programs with one C build (names prefixed p0_, p1_, ...);
    big-profile ones and those of large inputs (:func:`directional`) along
    :data:`DIRECTIONS` random directions (``observe``: see
    :func:`run_cases`)."""
    cases = []
    for j, prog in enumerate(progs):
        prefix = f"p{j}_" if len(progs) > 1 else ""
        ns = build(prog, prefix)
        inputs = [ns[prefix + i.name] for i in prog.inputs]
        exact = None
        if prog.dtype == "float32":
            e = build(twin(prog), prefix + "e_")
            exact = (e[prefix + "e_" + prog.output.name],
                     [e[prefix + "e_" + i.name] for i in prog.inputs])
        cases.append(Case(prefix, ns[prefix + prog.output.name], inputs, make_arrays(prog),
                          prog.second_order, prog.seed, source=reproducer(prog),
                          directions=DIRECTIONS if directional(prog) else 0, exact=exact))
    try:
        run_cases(cases, upto=upto, observe=observe)
    except AssertionError:
        raise
    except Exception as exc:  # a te error: keep its type (hypothesis tells bugs apart by it)
        exc.add_note("--- programs ---\n" + "\n".join(c.source for c in cases))
        raise
