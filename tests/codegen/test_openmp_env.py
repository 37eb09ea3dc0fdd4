"""OpenMP's idle threads sleep by default (codegen.openmp_env), the user's choice kept."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from codegen import compiler, openmp_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# builds and runs a parallel kernel, then asks the runtime what it was started with
_PROGRAM = textwrap.dedent("""
    import os, sys, numpy as np, tensorexpr as te
    from codegen import compiler
    X = te.placeholder((1 << 18,), name="X")
    f = te.build(te.compute((1 << 18,), lambda i: te.exp(X[i]) * 2.0, name="Y"))
    f(np.ones(1 << 18, np.float32))
    print("left in the environment:", os.environ.get("OMP_WAIT_POLICY"), flush=True)
    for lib in compiler.loaded():
        try:
            lib["omp_display_env"](0)
            break
        except AttributeError:
            pass
""")


def _run(tmp_path, **env):
    base = {k: v for k, v in os.environ.items() if k not in openmp_env.USER_CHOICES}
    base.update(env, PYTHONPATH=REPO, TENSOREXPR_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", _PROGRAM], env=base, capture_output=True,
                       text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def _gomp_runtime() -> bool:
    comp = compiler.find_compiler()
    return comp.openmp and "Free Software Foundation" in comp.identity


gomp_only = pytest.mark.skipif(not _gomp_runtime(), reason="needs GCC's OpenMP runtime")


@gomp_only
def test_threads_wait_passively_by_default_and_the_environment_is_left_alone(tmp_path):
    out, err = _run(tmp_path)
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in err
    assert "left in the environment: None" in out


@gomp_only
def test_the_users_wait_policy_is_kept(tmp_path):
    out, err = _run(tmp_path, OMP_WAIT_POLICY="active")
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in err
    assert "left in the environment: active" in out


def test_any_wait_setting_of_the_user_means_no_defaults():
    for k in openmp_env.USER_CHOICES:
        assert "OMP_WAIT_POLICY" not in openmp_env.effective({k: "1"}) or k == "OMP_WAIT_POLICY"
    assert openmp_env.effective({"OMP_WAIT_POLICY": ""})["OMP_WAIT_POLICY"] == "PASSIVE"
