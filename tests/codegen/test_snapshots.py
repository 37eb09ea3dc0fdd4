"""Snapshots of the generated C: a refactor of the code generator must not change it.

Each program of ``snapshot_programs`` (every benchmark case's forward and VJP, and a
few dozen others) is generated for two fixed targets and hashed; the hashes are
recorded in ``snapshots/c_sources.json``. A change of the C that is meant to
happen is its own commit, which says why and records the new hashes with
``python -m tests.codegen.snapshot_programs --update`` (``--show NAME@TARGET``
prints one source).
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from codegen.pipeline import source_text
from codegen.signature import Signature
from tests.codegen import snapshot_programs as snap

RECORDED = snap.load()
PROGRAMS = dict(snap.programs())
UPDATE = "python -m tests.codegen.snapshot_programs --update"


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_generated_c_unchanged(name):
    got = {k: snap.digest(v) for k, v in snap.sources([name]).items()}
    for key, h in got.items():
        assert key in RECORDED, f"{key} has no recorded hash: run {UPDATE}"
        assert RECORDED[key] == h, (
            f"the C generated for {key} changed; if that is intended, say why in its own "
            f"commit and record it with {UPDATE}")


def test_every_recorded_program_exists():
    names = {k.split("@")[0] for k in RECORDED}
    assert names == set(PROGRAMS), sorted(names ^ set(PROGRAMS))


def test_the_hashed_source_is_what_build_compiles():
    """The snapshot hashes what ``te.build`` compiles, views' note included."""
    X = te.placeholder((4, 6), name="X")
    T = te.compute((6, 4), lambda i, j: X[j, i], name="T")
    E = te.compute((4, 6), lambda i, j: te.exp(X[i, j]) + T[j, i], name="E")
    f = te.build([T, E], inputs=[X])
    assert f.source == source_text(Signature([T, E], [X]))
    x = np.random.default_rng(0).random((4, 6), dtype=np.float32)
    t, e = f(x)
    assert np.array_equal(t, x.T) and np.allclose(e, np.exp(x) + x, rtol=1e-6)
