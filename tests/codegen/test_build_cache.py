"""The build cache: structural fingerprints, hits that skip lowering, damaged entries."""
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
from codegen import c_backend, cemit, lower, program, runtime
from codegen.fingerprint import Unfingerprintable, fingerprint
from codegen.signature import Signature

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache directory of this test alone (the session's is shared by every test)."""
    d = tmp_path / "cache"
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(d))
    return d


def _entries(d):
    return sorted(glob.glob(os.path.join(str(d), "build_*.json")))


# {{{ fingerprints


def _fp(outputs, inputs):
    return fingerprint(Signature(outputs, inputs))


def _gemm(c=1.0, dtype="float32", where=None, lo=0, shift=0, op=te.sum, names=("A", "B")):
    A = te.placeholder((4, 6), dtype=dtype, name=names[0])
    B = te.placeholder((6, 5), dtype=dtype, name=names[1])
    k = te.reduce_axis((lo, 6), name="k")
    cond = None if where is None else where(k)
    C = te.compute((4, 5), lambda i, j: op(A[i, k] * B[(k + shift) % 6, j] * c, axis=k,
                                           where=cond), name="C")
    return [C], [A, B]


def test_the_same_program_built_twice_has_one_fingerprint_whatever_its_names():
    assert _fp(*_gemm()) == _fp(*_gemm())
    assert _fp(*_gemm()) == _fp(*_gemm(names=("X", "Y")))


@pytest.mark.parametrize("other", [
    dict(c=2.0), dict(c=1.0 + 2.0 ** -23), dict(dtype="float64"), dict(shift=1), dict(lo=1),
    dict(where=lambda k: k != 1), dict(where=lambda k: k != 2), dict(op=te.max)],
    ids=["constant", "constant-last-bit", "dtype", "index", "axis-range", "where", "where-value",
         "reduction"])
def test_programs_that_differ_in_one_detail_have_different_fingerprints(other):
    assert _fp(*_gemm()) != _fp(*_gemm(**other))


def test_fingerprints_tell_apart_structure_that_names_would_hide():
    A = te.placeholder((3,), name="A")
    B = te.placeholder((3,), name="B")
    twice = te.compute((3,), lambda i: A[i] + A[i], name="C")
    both = te.compute((3,), lambda i: A[i] + B[i], name="C")
    assert _fp([twice], [A, B]) != _fp([both], [A, B])
    # input order and output order are part of the calling convention
    assert _fp([both], [A, B]) != _fp([both], [B, A])
    D = te.compute((3,), lambda i: A[i] * 2.0, name="D")
    assert _fp([both, D], [A, B]) != _fp([D, both], [A, B])
    # an unused extra input still takes an argument
    assert _fp([D], [A]) != _fp([D], [A, B])
    # select branches, -0.0 and 0.0, a size variable's name
    s1 = te.compute((3,), lambda i: te.select(A[i] > 0, A[i], 0.0), name="S")
    s2 = te.compute((3,), lambda i: te.select(A[i] > 0, 0.0, A[i]), name="S")
    s3 = te.compute((3,), lambda i: te.select(A[i] > 0, A[i], -0.0), name="S")
    assert len({_fp([s], [A]) for s in (s1, s2, s3)}) == 3
    n, m = te.var("n"), te.var("m")
    Pn, Pm = te.placeholder((n,), name="P"), te.placeholder((m,), name="P")
    assert (_fp([te.compute((n,), lambda i: Pn[i] + 1.0)], [Pn]) !=
            _fp([te.compute((m,), lambda i: Pm[i] + 1.0)], [Pm]))


def test_axes_are_numbered_by_position_not_by_uid():
    # Two reductions over distinct axes vs one axis reused: different programs.
    A = te.placeholder((4, 4), name="A")
    k1, k2 = te.reduce_axis(4), te.reduce_axis(4)
    two = te.compute((), lambda: te.sum(te.sum(A[k1, k2], axis=k2), axis=k1))
    k3, k4 = te.reduce_axis(4), te.reduce_axis(4)
    swapped = te.compute((), lambda: te.sum(te.sum(A[k4, k3], axis=k4), axis=k3))
    k5, k6 = te.reduce_axis(4), te.reduce_axis(4)
    again = te.compute((), lambda: te.sum(te.sum(A[k5, k6], axis=k6), axis=k5))
    assert _fp([two], [A]) == _fp([again], [A])
    assert _fp([two], [A]) != _fp([swapped], [A])


def test_fingerprinting_refuses_values_it_cannot_encode():
    from codegen.fingerprint import Encoder
    with pytest.raises(Unfingerprintable):
        Encoder([]).value(object())


# }}}

# {{{ hits in this process


def test_a_hit_skips_lowering_and_gives_the_same_results_and_source(cache, monkeypatch):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 6), np.float32), rng.standard_normal((6, 5), np.float32)
    f = te.build(*_gemm())
    first = f(a, b)
    assert len(_entries(cache)) == 1

    def no_lowering(*args, **kwargs):
        raise AssertionError("a cached build must not lower")
    monkeypatch.setattr(lower.Lowerer, "program", no_lowering)
    hits = c_backend.stats["build_hits"]
    g = te.build(*_gemm(names=("P", "Q")))
    assert c_backend.stats["build_hits"] == hits + 1
    assert g.source == f.source and "te_kernel" in g.source
    np.testing.assert_array_equal(g(a, b), first)
    np.testing.assert_array_equal(g(P=a, Q=b), first)
    # another program is not a hit
    with pytest.raises(AssertionError, match="must not lower"):
        te.build(*_gemm(c=3.0))


def test_distinct_programs_get_distinct_entries_and_their_own_results(cache):
    x = np.arange(24, dtype=np.float32).reshape(4, 6) / 7
    y = np.arange(30, dtype=np.float32).reshape(6, 5) / 5
    variants = [dict(), dict(c=2.0), dict(shift=1), dict(lo=1), dict(where=lambda k: k != 1),
                dict(op=te.max)]
    for kw in variants:
        want = te.build(*_gemm(**kw), backend="numpy")(x, y)
        np.testing.assert_allclose(te.build(*_gemm(**kw))(x, y), want, rtol=1e-5)
    assert len(_entries(cache)) == len(variants)
    for kw in variants:  # now all hits, each still its own program
        want = te.build(*_gemm(**kw), backend="numpy")(x, y)
        np.testing.assert_allclose(te.build(*_gemm(**kw))(x, y), want, rtol=1e-5)
    assert len(_entries(cache)) == len(variants)


def _gather(names=("E", "idx")):
    E = te.placeholder((5, 3), name=names[0])
    idx = te.placeholder((4,), dtype="int32", name=names[1])
    Y = te.compute((4, 3), lambda i, d: E[idx[i], d] * 2.0, name="Y")
    return [Y], [E, idx]


def test_errors_of_a_hit_name_the_callers_tensors_and_lines(cache):
    e = np.ones((5, 3), np.float32)
    te.build(*_gather())
    hits = c_backend.stats["build_hits"]
    outs, ins = _gather(names=("table", "rows"))
    f = te.build(outs, ins)
    assert c_backend.stats["build_hits"] == hits + 1
    np.testing.assert_array_equal(f(e, np.array([0, 4, 1, 2], np.int32)), 2.0)
    with pytest.raises(IndexError) as info:
        f(e, np.array([0, 7, 1, 2], np.int32))
    msg = str(info.value)
    assert "reads 'table' at index 7 in dimension 0" in msg
    assert "(in table[" in msg and "rows[i]" in msg
    assert "check the index tensor" in msg and "test_build_cache.py" in msg


def test_symbolic_sizes_and_a_recurrence_with_a_ring_buffer_survive_the_cache(cache):
    def program():
        n = te.var("n")
        d = te.placeholder((2, n), name="d")
        e = te.recurrence((n, 2), lambda e, t, r: te.select(
            t == 0, d[r, 0], 0.5 * d[r, t] + 0.5 * e[t - 1, r]), name="e")
        last = te.compute((2,), lambda r: e[n - 1, r], name="last")
        return [last], [d]
    data = np.random.default_rng(1).standard_normal((2, 40), np.float32)
    want = te.build(*program(), backend="numpy")(data)
    np.testing.assert_allclose(te.build(*program())(data), want, rtol=1e-5)
    hits = c_backend.stats["build_hits"]
    f = te.build(*program())
    assert c_backend.stats["build_hits"] == hits + 1
    np.testing.assert_allclose(f(data), want, rtol=1e-5)
    np.testing.assert_allclose(f(data[:, :7]), te.build(*program(), backend="numpy")(data[:, :7]),
                               rtol=1e-5)


def test_an_unfingerprintable_program_is_built_without_the_cache(cache, monkeypatch):
    import codegen.fingerprint as fpmod

    def refuse(sig):
        raise Unfingerprintable("test")
    monkeypatch.setattr(fpmod, "fingerprint", refuse)
    f = te.build(*_gemm())
    np.testing.assert_allclose(f(np.ones((4, 6), np.float32), np.ones((6, 5), np.float32)), 6.0)
    assert _entries(cache) == []


def test_the_runtime_agrees_with_lowering_and_emission_on_the_calling_convention():
    assert runtime.ENTRY == cemit.ENTRY
    assert (runtime.READ_OUT_OF_RANGE, runtime.SCATTER_OUT_OF_RANGE) == \
        (program.READ_OUT_OF_RANGE, program.SCATTER_OUT_OF_RANGE)


# }}}

# {{{ damaged entries


@pytest.mark.parametrize("damage", ["garbage", "truncated", "no-library", "bad-layout",
                                    "bad-library"])
def test_a_damaged_entry_is_ignored_and_rebuilt(cache, damage):
    a, b = np.ones((4, 6), np.float32), np.full((6, 5), 2.0, np.float32)
    te.build(*_gemm())
    (entry,) = _entries(cache)
    text = open(entry).read()
    lib = os.path.join(str(cache), json.loads(text)["library"])
    if damage == "garbage":
        open(entry, "w").write("\x00not json")
    elif damage == "truncated":
        open(entry, "w").write(text[: len(text) // 2])
    elif damage == "no-library":
        os.unlink(lib)
    elif damage == "bad-layout":
        data = json.loads(text)
        data["layout"]["buffers"][0][1] = [["Read", 1]]
        open(entry, "w").write(json.dumps(data))
    else:  # a library that cannot be loaded (not one this process loaded already)
        data = json.loads(text)
        data["library"] = "te_damaged.so"
        open(os.path.join(str(cache), "te_damaged.so"), "wb").write(b"not a shared library")
        open(entry, "w").write(json.dumps(data))
    lowered = c_backend.stats["lowered"]
    f = te.build(*_gemm())
    assert c_backend.stats["lowered"] == lowered + 1
    np.testing.assert_allclose(f(a, b), 12.0)
    # and the rewritten entry is a good one again
    hits = c_backend.stats["build_hits"]
    np.testing.assert_allclose(te.build(*_gemm())(a, b), 12.0)
    assert c_backend.stats["build_hits"] == hits + 1


# }}}

# {{{ another process

_PROGRAM = textwrap.dedent("""
    import json, sys
    import numpy as np
    if sys.argv[1] == "hit":
        sys.modules["codegen.lower"] = None  # importing the lowering (or emission) fails
        sys.modules["codegen.cemit"] = None
    import tensorexpr as te
    from codegen import c_backend
    n = te.var("n")
    A = te.placeholder((n, 3), name="A")
    idx = te.placeholder((2,), dtype="int64", name="idx")
    k = te.reduce_axis(3, name="k")
    S = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k, where=k != 1), name="S")
    G = te.compute((2,), lambda j: S[idx[j]] + 1.0, name="G")
    f = te.build([S, G])
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    s, g = f(a, np.array([3, 0]))
    try:
        f(a, np.array([3, 4]))
        err = None
    except IndexError as exc:
        err = str(exc)
    print(json.dumps({"builds": c_backend.stats, "s": s.tolist(), "g": g.tolist(),
                      "source": f.source, "err": err}))
""")


def test_a_new_process_builds_from_the_cache_without_lowering(cache, tmp_path):
    script = tmp_path / "program.py"
    script.write_text(_PROGRAM)
    env = dict(os.environ, PYTHONPATH=REPO, TENSOREXPR_CACHE_DIR=str(cache))

    def run(mode):
        r = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True,
                           text=True, cwd=REPO, timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])
    first, second = run("miss"), run("hit")
    for key in ("lower_s", "emit_s"):  # timed when lowering, not on a hit
        assert first["builds"].pop(key) > 0 and second["builds"].pop(key) == 0
    assert first["builds"] == {"build_hits": 0, "lowered": 1}
    assert second["builds"] == {"build_hits": 1, "lowered": 0}
    assert first["s"] == second["s"] == [4.0 + 0.0, 9.0 + 25.0, 36.0 + 64.0, 81.0 + 121.0]
    assert first["g"] == second["g"] == [203.0, 5.0]
    assert first["source"] == second["source"]
    assert first["err"] == second["err"] and "reads 'S' at index 4" in second["err"]


# }}}


@pytest.mark.parametrize("name", ["codegen.fingerprint", "codegen.runtime", "codegen.c_backend",
                                  "codegen.compiler"])
def test_docstring_examples(name):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_the_code_version_covers_every_module_that_decides_the_c():
    # a cached build made by other code must not be loaded: the program rewrites in
    # passes/ and the subpackages of tensorexpr/ decide the C too (a stale cache served
    # programs built before passes.hoist existed)
    from codegen.c_backend import code_files
    root = os.path.dirname(os.path.dirname(os.path.abspath(c_backend.__file__)))
    names = {os.path.relpath(p, root) for p in code_files()}
    assert {"passes/hoist.py", "tensorexpr/ir/nodes.py", "tensorexpr/polyhedral/loops.py",
            "codegen/lower.py", "tensorexpr/api.py"} <= names
