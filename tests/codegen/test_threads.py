"""The measured work threshold of parallel loops (codegen.threads)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import tensorexpr as te
from codegen import compiler, openmp_env, threads


@pytest.fixture
def fresh_threshold(monkeypatch):
    monkeypatch.setattr(threads, "_value", None)
    yield monkeypatch
    threads._value = None


def test_environment_overrides_the_measurement(fresh_threshold):
    fresh_threshold.setenv("TENSOREXPR_PARALLEL_WORK", "12345")
    assert threads.min_work() == 12345


def test_a_bad_environment_value_is_named(fresh_threshold):
    fresh_threshold.setenv("TENSOREXPR_PARALLEL_WORK", "lots")
    with pytest.raises(ValueError, match="TENSOREXPR_PARALLEL_WORK"):
        threads.min_work()


def test_the_measurement_is_within_its_bounds(fresh_threshold):
    fresh_threshold.delenv("TENSOREXPR_PARALLEL_WORK", raising=False)
    assert threads.LOWEST <= threads.min_work() <= threads.HIGHEST


@pytest.mark.parametrize("threshold", [1, threads.HIGHEST])
def test_loaded_kernels_get_the_threshold_and_agree_either_way(fresh_threshold, threshold):
    fresh_threshold.setenv("TENSOREXPR_PARALLEL_WORK", str(threshold))
    n = te.var("n")
    X = te.placeholder((n, 64), name="X")
    k = te.reduce_axis((0, 64), name="k")
    # a distinct program per threshold, so the library is loaded after the setting
    Y = te.compute((n,), lambda i: te.sum(X[i, k] * float(threshold), axis=k), name="Y")
    f = te.build(Y)
    assert f"if(parallel: 64 * n0 >= {threads.SYMBOL})" in f.source
    x = np.random.default_rng(0).random((3000, 64), dtype=np.float32)
    np.testing.assert_allclose(f(x), (x * threshold).sum(axis=1), rtol=1e-5)
    loaded = [ctypes.c_int64.in_dll(lib, threads.SYMBOL).value
              for lib in compiler.loaded() if _has(lib)]
    assert threshold in loaded


def _has(lib) -> bool:
    try:
        ctypes.c_int64.in_dll(lib, threads.SYMBOL)
        return True
    except ValueError:
        return False


def test_the_measurement_is_kept_on_disk_for_the_next_process(fresh_threshold, tmp_path):
    fresh_threshold.delenv("TENSOREXPR_PARALLEL_WORK", raising=False)
    fresh_threshold.setenv("TENSOREXPR_CACHE_DIR", str(tmp_path))
    measured = []
    real = threads._measure
    fresh_threshold.setattr(threads, "_measure", lambda: measured.append(1) or real())
    first = threads.min_work()
    (kept,) = tmp_path.glob("threads-*.txt")
    assert int(kept.read_text()) == first and measured == [1]
    threads._value = None  # as in a new process: read, not measured again
    assert threads.min_work() == first and measured == [1]
    # the environment changed after the runtime started does not reach it: same key
    threads._value = None
    fresh_threshold.setenv("OMP_NUM_THREADS", "1")
    assert threads.min_work() == first and measured == [1]
    # a runtime started with other settings is another key: measured for them
    threads._value = None
    started = openmp_env.settings()
    fresh_threshold.setattr(openmp_env, "settings", lambda: {**started, "GOMP_SPINCOUNT": "7"})
    threads.min_work()
    assert measured == [1, 1] and len(list(tmp_path.glob("threads-*.txt"))) == 2


def test_a_damaged_record_is_measured_again(fresh_threshold, tmp_path):
    fresh_threshold.delenv("TENSOREXPR_PARALLEL_WORK", raising=False)
    fresh_threshold.setenv("TENSOREXPR_CACHE_DIR", str(tmp_path))
    threads.min_work()
    (kept,) = tmp_path.glob("threads-*.txt")
    kept.write_text("garbage")
    threads._value = None
    assert threads.LOWEST <= threads.min_work() <= threads.HIGHEST
    assert threads.LOWEST <= int(kept.read_text()) <= threads.HIGHEST
