"""The on-disk cache of te.differentiate: hits equal recomputations, in this process or a
new one; edits, other requests and damaged entries miss; hits read the caller's tensors."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorexpr as te
from benchmarks.cases import CASES
from benchmarks.systems import te_sys
from codegen import source_digest
from codegen.fingerprint import Encoder
from tensorexpr import differentiate_cache as dc
from tensorexpr.ir import Axis, fresh_uid, topo_order, walk, tensor_exprs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache directory of this test alone, the differentiation cache on."""
    d = tmp_path / "cache"
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(d))
    monkeypatch.delenv("TENSOREXPR_DIFF_CACHE", raising=False)
    return d


def _entries(d):
    return sorted(glob.glob(os.path.join(str(d), "diff_*.pickle")))


def canonical(grads, forward=()):
    """Everything about a gradient program but uids: each tensor's definition (by
    position), name and source line, the axes' names, which tensors are the gradients
    and which of ``forward`` (the caller's tensors) are read as themselves."""
    order = list(forward) + [t for t in topo_order(list(grads))
                             if t.uid not in {f.uid for f in forward}]
    enc = Encoder(order)
    defs = tuple(enc.tensor(t) for t in order)
    pos = {t.uid: k for k, t in enumerate(order)}
    return (defs, list(enc.records), [t.name for t in order], [t.origin for t in order],
            [a.name for a in enc.axis_objects], [pos[g.uid] for g in grads])


def _program(scale=2.0, name="Y"):
    X = te.placeholder((4, 6), name="X")
    W = te.placeholder((6, 5), name="W")
    k = te.reduce_axis(6, name="k")
    Y = te.compute((4, 5), lambda i, j: te.tanh(te.sum(X[i, k] * W[k, j], axis=k)) * scale,
                   name=name)
    H = te.placeholder((4, 5), name="H")
    return X, W, Y, H


def _grads(output, **kw):
    # one line for every call: the source line a zero gradient records is the caller's
    return te.differentiate(output, **kw)


def _fresh(output, **kw):
    from passes.differentiate import differentiate
    return differentiate(output, **kw)


def test_a_second_request_is_a_hit_equal_to_a_recomputation_reading_the_callers_tensors(cache):
    X, W, Y, H = _program()
    h0, m0 = dc.stats["hits"], dc.stats["misses"]
    first = _grads(Y, inputs=[X, W], head=H)
    assert (dc.stats["hits"] - h0, dc.stats["misses"] - m0) == (0, 1) and len(_entries(cache)) == 1
    before = fresh_uid()
    again = _grads(Y, inputs=[X, W], head=H)
    assert dc.stats["hits"] - h0 == 1
    assert all(a is not b for a, b in zip(first, again))  # loaded, not remembered
    assert canonical(again, [X, W, Y, H]) == canonical(first, [X, W, Y, H])
    # the loaded program reads the caller's objects, and all else has uids made now
    loaded = [t for t in topo_order(list(again)) if t.uid not in {X.uid, W.uid, Y.uid, H.uid}]
    assert loaded and all(before < t.uid < fresh_uid() for t in loaded)
    assert {t.uid for t in topo_order(list(again))} >= {X.uid, W.uid, H.uid}
    ids = {id(t) for t in topo_order(list(again))}
    assert id(X) in ids and id(H) in ids
    axes = [x for t in loaded for e in tensor_exprs(t) for x in walk(e) if isinstance(x, Axis)]
    assert axes and all(before < a.uid for a in axes if a.uid not in _forward_axis_uids(Y))
    assert set(again.adjoints) == set(first.adjoints)
    x, w, h = (np.random.default_rng(0).standard_normal(s).astype(np.float32)
               for s in ((4, 6), (6, 5), (4, 5)))
    want = te.build(list(first), inputs=[X, W, H], backend="numpy")(x, w, h)
    got = te.build(list(again), inputs=[X, W, H])(x, w, h)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


def _forward_axis_uids(Y):
    return {x.uid for t in topo_order([Y]) for e in tensor_exprs(t) for x in walk(e)
            if isinstance(x, Axis)}


def test_the_cache_can_be_turned_off(cache, monkeypatch):
    monkeypatch.setenv("TENSOREXPR_DIFF_CACHE", "0")
    X, W, Y, H = _program()
    _grads(Y, inputs=[X, W], head=H)
    assert _entries(cache) == []


def _request(change):
    """The base request (``change=None``) or one differing from it in one respect."""
    X, W, Y, H = _program(scale=3.0 if change == "scale" else 2.0,
                          name="Z" if change == "name" else "Y")
    kw = dict(output=Y, inputs=[X, W], head=H)
    if change == "head":
        kw["head"] = te.placeholder((2, 4, 5), name="H")  # another prefix
    elif change == "inputs":
        kw["inputs"] = [W, X]
    elif change == "stop":
        kw["override"] = {Y: None}
    elif change == "jacobian":
        kw.update(head=None, jacobian=True)
    elif change == "several":
        kw.update(output=[Y], head=[H])
    return kw


@pytest.mark.parametrize("change", ["head", "inputs", "stop", "scale", "name", "jacobian",
                                    "several"])
def test_a_different_request_misses(cache, change):
    _grads(**_request(None))
    kw = _request(change)
    h0, m0 = dc.stats["hits"], dc.stats["misses"]
    got = _grads(**kw)
    assert (dc.stats["hits"] - h0, dc.stats["misses"] - m0) == (0, 1)
    assert len(_entries(cache)) == 2
    again = _grads(**kw)
    assert dc.stats["hits"] - h0 == 1
    assert canonical(again) == canonical(got)
    assert canonical(again)[:3] == canonical(_fresh(**kw))[:3]


def test_an_edit_of_the_code_that_differentiates_misses(cache, monkeypatch):
    X, W, Y, H = _program()
    _grads(Y, inputs=[X, W], head=H)
    monkeypatch.setitem(source_digest._digests, "passes", "0" * 64)
    m0 = dc.stats["misses"]
    _grads(Y, inputs=[X, W], head=H)
    assert dc.stats["misses"] - m0 == 1 and len(_entries(cache)) == 2


@pytest.mark.parametrize("damage", ["truncated", "garbage", "flipped", "empty", "foreign"])
def test_a_damaged_entry_is_recomputed_and_rewritten(cache, damage):
    import pickle
    X, W, Y, H = _program()
    first = _grads(Y, inputs=[X, W], head=H)
    (path,) = _entries(cache)
    data = open(path, "rb").read()
    bad = {"truncated": data[:len(data) // 2], "garbage": os.urandom(len(data)),
           "flipped": data[:-40] + bytes([data[-40] ^ 1]) + data[-39:], "empty": b"",
           "foreign": pickle.dumps(({"format": dc.DIFF_FORMAT}, os.system))}[damage]
    with open(path, "wb") as f:
        f.write(bad)
    h0, m0 = dc.stats["hits"], dc.stats["misses"]
    got = _grads(Y, inputs=[X, W], head=H)
    assert (dc.stats["hits"] - h0, dc.stats["misses"] - m0) == (0, 1)
    assert canonical(got) == canonical(first)
    assert open(path, "rb").read() != bad
    _grads(Y, inputs=[X, W], head=H)
    assert dc.stats["hits"] - h0 == 1


def test_an_unwritable_cache_only_costs_recomputing(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.delenv("TENSOREXPR_DIFF_CACHE", raising=False)
    X, W, Y, H = _program()
    first = _grads(Y, inputs=[X, W], head=H)
    assert canonical(_grads(Y, inputs=[X, W], head=H)) == canonical(first)


def test_a_function_override_is_computed_every_time(cache):
    X, W, Y, H = _program()
    u0 = dc.stats["uncacheable"]
    _grads(Y, inputs=[X, W], head=H, override={Y: lambda y, x, h: None})
    assert dc.stats["uncacheable"] - u0 == 1 and _entries(cache) == []


def test_second_order_through_a_cached_first_order(cache):
    X = te.placeholder((5,), name="X")
    V = te.placeholder((5,), name="V")
    i = te.reduce_axis(5, name="i")
    L = te.compute((), lambda: te.sum(X[i] * X[i] * X[i], axis=i), name="L")
    _grads(L, inputs=[X])
    h0 = dc.stats["hits"]
    (dX,) = _grads(L, inputs=[X])
    assert dc.stats["hits"] - h0 == 1
    j = te.reduce_axis(5, name="j")
    M = te.compute((), lambda: te.sum(dX[j] * V[j], axis=j), name="M")
    (hv,) = _grads(M, inputs=[X])
    x = np.linspace(-1, 1, 5)
    v = np.arange(5.0)
    got = te.build(hv, inputs=[X, V])(x.astype(np.float32), v.astype(np.float32))
    np.testing.assert_allclose(got, 6 * x * v, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.id}-{c.key}")
def test_every_benchmark_case_loads_as_it_computes(cache, case):
    p = case.params(quick=True)
    ph, Y, override = te_sys.define_with_override(case, p)
    H = te.placeholder(Y.shape, dtype=Y.dtype, name="H")
    forward = ph + [H]
    first = te_sys.gradients(case, ph, Y, H, override)
    h0 = dc.stats["hits"]
    again = te_sys.gradients(case, ph, Y, H, override)
    assert dc.stats["hits"] - h0 == 1
    fresh = _fresh(Y, inputs=[{t.name: t for t in ph}[n] for n in case.wrt], head=H,
                   override=override)
    assert canonical(again, forward)[:3] == canonical(fresh, forward)[:3]
    assert canonical(again, forward) == canonical(first, forward)


_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import tensorexpr as te
    from benchmarks.cases import by_id
    from benchmarks.systems import te_sys
    from tensorexpr import differentiate_cache as dc
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from canon import canonical


    def both(fn):
        # the cached result, then the one computed again, from one call site
        h0 = dc.stats["hits"]
        grads = fn()
        hit = dc.stats["hits"] - h0
        os.environ["TENSOREXPR_DIFF_CACHE"] = "0"
        fresh = fn()
        del os.environ["TENSOREXPR_DIFF_CACHE"]
        return list(grads), list(fresh), hit


    def mine():
        X = te.placeholder((6,), name="X")
        U = te.placeholder((6,), name="U")  # not read: a zero gradient, made at the call
        S = te.recurrence((6,), lambda s, t: te.select(t > 0, s[t - 1] * 0.5, 0.0) + X[t],
                          name="S")
        i = te.reduce_axis(6, name="i")
        L = te.compute((), lambda: te.sum(te.tanh(S[i]), axis=i), name="L")
        return [X, U], lambda: te.differentiate(L, [X, U])


    out = {}
    for cid in (5, 8, 13, 26, "mine"):
        if cid == "mine":
            ph, fn = mine()
        else:
            case = by_id(cid)
            p = case.params(quick=True)
            ph, Y, override = te_sys.define_with_override(case, p)
            ph = ph + [te.placeholder(Y.shape, dtype=Y.dtype, name="H")]
            fn = lambda: te_sys.gradients(case, ph[:-1], Y, ph[-1], override)
        grads, fresh, hit = both(fn)
        same = canonical(grads, ph) == canonical(fresh, ph)
        lines = sorted({t.origin.split(":")[1] for t in grads if "run" in t.origin})
        rng = np.random.default_rng(0)
        args = [rng.standard_normal(t.shape).astype(t.dtype) if t.dtype.startswith("float")
                else rng.integers(0, 2, t.shape).astype(t.dtype) for t in ph]
        a = te.build(grads, inputs=ph)(*args)
        b = te.build(fresh, inputs=ph)(*args)
        a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
        out[cid] = [hit, same, all(np.array_equal(x, y) for x, y in zip(a, b)), lines]
    print(json.dumps(out))
""")


def test_a_hit_in_a_new_process_is_the_recomputation_bit_for_bit(cache, tmp_path):
    # the second process's script has its lines further down: the loaded gradients
    # must name its lines, not the first process's
    with open(os.path.abspath(__file__)) as f:
        src = f.read()
    canon = src[src.index("def canonical("):src.index("\n\n\ndef _program")]
    (tmp_path / "canon.py").write_text(
        "from codegen.fingerprint import Encoder\nfrom tensorexpr.ir import topo_order\n\n\n"
        + canon + "\n")
    env = dict(os.environ, PYTHONPATH=REPO, TENSOREXPR_CACHE_DIR=str(cache))
    env.pop("TENSOREXPR_DIFF_CACHE", None)
    results = []
    for k, prefix in enumerate(("", "\n\n# moved down\n")):
        script = tmp_path / f"run{k}.py"
        script.write_text(prefix + _SCRIPT)
        r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                           text=True, cwd=REPO, timeout=600)
        assert r.returncode == 0, r.stderr
        results.append(json.loads(r.stdout.strip().splitlines()[-1]))
    first, second = results
    assert all(v[:3] == [0, True, True] for v in first.values()), first
    assert all(v[:3] == [1, True, True] for v in second.values()), second
    # "mine"'s gradients name the script's lines: the zero gradient of U the call's,
    # dX the forward's; three lines further down in the second script
    assert len(first["mine"][3]) == 2
    assert [int(n) - 3 for n in second["mine"][3]] == [int(n) for n in first["mine"][3]]


def test_docstring_examples():
    import doctest
    result = doctest.testmod(dc, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
