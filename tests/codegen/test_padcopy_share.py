"""One zero-padded copy per operand (``codegen.padcopy_share``), one finiteness scan per
input (``codegen.finite_flags``) and the versioned nests in one parallel region
(``codegen.regions``): strided convolution gradients and transposed convolutions on
the C backend against the numpy backend (hypothesis: strides 2-3, paddings,
dilations, finite and non-finite weights), and what the schedule and the C say."""
from __future__ import annotations

import re
from unittest import mock

import numpy as np
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from codegen import padcopy, padcopy_share, residue_classes

from .test_residue_classes import check
from .test_residues import conv_transpose
from .util import agree, rand, without_comments


def regions(source: str) -> int:
    return len(re.findall(r"#pragma omp parallel\b", without_comments(source)))


def scans(source: str, name: str) -> int:
    return source.count(f"are the values of {name} finite?")


@settings(max_examples=15, deadline=None)
@given(ncw=st.booleans(), s=st.integers(2, 3), k=st.integers(2, 5), pad=st.integers(0, 2),
       dil=st.integers(1, 2), h=st.integers(11, 20), w=st.integers(11, 20),
       spoil=st.booleans(), dtype=st.sampled_from(["float32", "float64"]))
def test_strided_gradients_over_shared_copies_on_random_shapes(ncw, s, k, pad, dil, h, w,
                                                                spoil, dtype):
    # every class split taken; channels enough for the classes to read padded copies
    with mock.patch.object(residue_classes, "pays", lambda sp: bool(sp.classes)):
        f = check("ncw" if ncw else "nchw", s, k, pad, dil, h, w, dtype, c=8, f=16,
                  spoil=spoil)
    if f is None:
        return
    # one scratch buffer per copy the schedule lists, each shared one listed once
    copies = [c for c in f.schedule.copies if c.endswith("_padded")]
    assert f.source.count("_padded (scratch") == len(copies)
    readers = sum(len(line.split(" read by ")[1].split(", ")) for line in f.schedule.shared)
    sums = sum(c.strategy == "padded-copy" for c in f.schedule.choices)
    assert len(copies) >= sums - readers + len(f.schedule.shared), f.schedule
    # W scanned for finiteness at most once
    assert scans(f.source, "W") <= 1, f.schedule


def test_the_classes_of_a_stride_two_gradient_share_one_copy_and_one_region():
    # case 3 (smaller batch): four classes, one copy of H with the most rows of them
    f = check("nchw", 2, 3, 0, 1, 33, 33, c=16, f=32)
    assert f.schedule.shared == ("H_padded[19, 17] read by dX_r00, dX_r01, dX_r10, dX_r11",)
    assert f.schedule.copies == ("H_padded",)
    assert sum(c.tensor == "H_padded" for c in f.schedule.choices) == 1   # made once
    assert f.source.count("H_padded (scratch") == 1
    # W scanned once, first; every class's versions, dX and dW in one region
    assert scans(f.source, "W") == 1
    assert regions(f.source) == 1, f.source
    # one test per class: the fallbacks' own tests of W are decided inside them
    assert len(re.findall(r"if \(fin\d+ == fin\d+\)", f.source)) == 4


def test_non_finite_weights_take_the_exact_path_in_every_class():
    f = check("nchw", 2, 3, 0, 1, 17, 17, c=8, f=16, spoil=True)
    assert f.schedule.shared and regions(f.source) == 1


def test_a_transposed_convolution_shares_the_union_of_its_classes_copies():
    # the classes need 1 or 0 zeros before along each axis: one copy with 1 of each
    X, W = te.placeholder((2, 16, 16, 16), name="X"), te.placeholder((16, 8, 4, 4), name="W")
    Y = conv_transpose(X, W, s=2, pad=1)
    x, w = rand(X.shape), rand(W.shape, seed=1)
    f, _ = agree([Y], [X, W], x, w, rtol=1e-4)
    assert f.schedule.shared == ("X_padded[18, 18] read by Y_r00, Y_r01, Y_r10, Y_r11",)
    assert f.source.count("X_padded (scratch") == 1 and regions(f.source) == 1
    w[0, 0, 0, 0] = np.inf
    agree([Y], [X, W], x, w, rtol=1e-4)


def two_gathers(W1, W2, H, n1=14, n2=13):
    """Input gradients of two 1-D convolutions of ``H`` (``n1`` and ``n2`` outputs)."""
    def gather(W, n, name):
        f, k = te.reduce_axis(H.shape[1]), te.reduce_axis(W.shape[2])
        return te.compute((H.shape[0], W.shape[0], n), lambda b, c, x: te.sum(
            H[b, f, x - k] * W[c, f, k], axis=[f, k],
            where=(x - k >= 0) & (x - k < H.shape[2])), name=name)
    return gather(W1, n1, "dA"), gather(W2, n2, "dB")


def test_sums_of_other_weights_keep_their_own_copies():
    # the copy is made in the version for finite weights of the first sum: a sum checking
    # other weights may take the other version, so it never shares it
    H = te.placeholder((2, 4, 40), name="H")
    W1, W2 = te.placeholder((3, 4, 3), name="W1"), te.placeholder((3, 4, 3), name="W2")
    a, b = two_gathers(W1, W2, H)
    h, w1, w2 = rand(H.shape), rand(W1.shape, seed=1), rand(W2.shape, seed=2)
    w1[0, 0, 0] = np.inf   # the first sum takes its exact version, the second its copy
    f, _ = agree([a, b], [H, W1, W2], h, w1, w2)
    assert f.schedule.shared == () and f.schedule.copies == ("H_padded", "H_padded")
    a, b = two_gathers(W1, W1, H)
    f, _ = agree([a, b], [H, W1], h, w1)
    assert f.schedule.shared == ("H_padded[42] read by dA, dB",)
    f, _ = agree([a, b], [H, W1], h, rand(W1.shape, seed=3))
    assert f.source.count("H_padded (scratch") == 1 and scans(f.source, "W1") == 1


def test_a_sum_that_cannot_read_the_union_keeps_its_copy():
    H = te.placeholder((2, 4, 40), name="H")
    W = te.placeholder((3, 4, 3), name="W")
    a, b = two_gathers(W, W, H)
    plans = {t.uid: padcopy.plan(t, t.body) for t in (a, b)}
    with mock.patch.object(padcopy, "MAX_GROWTH", 0):   # no copy is small enough
        scratch = [(p.fill, p.note()) for p in plans.values()]
        got, new, lines = padcopy_share.share(scratch, plans)
    assert lines == [] and new == plans and got == scratch
