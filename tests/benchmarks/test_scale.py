"""The scale-out benchmark end to end at a tiny size (its figures are not checked)."""
from __future__ import annotations

import pytest

pytest.importorskip("dask.array")

import benchmarks.scale as bench  # noqa: E402


def test_tiny_run_agrees_with_the_whole_build(capsys):
    rows = bench.main(["--size", "48", "--chunk", "16", "--repeat", "1"])
    assert "GB/s" in capsys.readouterr().out
    assert {(r["program"], r["engine"]) for r in rows} == {
        (p, e) for p in ("blur", "conv", "conv grad")
        for e in ("te whole", "te dask w1", "te dask w2", "numpy dask w1", "numpy dask w2")}
    for r in rows:
        assert r["seconds"] > 0 and r["peak"] >= 0
        assert r["diff"] < 1e-3, r  # float32; split sums change the order of additions
        if r["engine"].startswith("te dask") and r["program"] != "conv grad":
            assert r["diff"] == 0.0, r  # no split reduction: bit for bit
    halos = {r["engine"]: r["halo"] for r in rows if r["program"] == "blur"}
    assert 0 < halos["te dask w1"] < halos["numpy dask w1"]  # clamped borders: no halo
