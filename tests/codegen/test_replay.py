"""Replayed lowerings (``codegen.replay``): a checkpointed gradient's rows and steps,
lowered once and replayed at their other places, give the C and the schedule that
lowering each place again gives, and a lowering that records what a replay cannot
repeat is lowered again."""
from __future__ import annotations

import pytest

import tensorexpr as te
from benchmarks.recurrence_cells import te_program
from codegen import replay
from codegen.loopast import Block, Comment, For, Lit, Store, Var
from codegen.lower import Lowerer
from codegen.pipeline import generate
from codegen.program import Site
from codegen.schedule import Options
from codegen.signature import Signature

from .util import both_ways

CELLS = [("lstm", 13, 3), ("gru", 13, 3), ("rnn", 9, 2), ("lstm", 6, 8), ("gru", 64, 8)]


@pytest.mark.parametrize("mode", [True, "segments"])
@pytest.mark.parametrize("cell,T,k", CELLS)
def test_replayed_cells_are_lowered_again_exactly(cell, T, k, mode, monkeypatch):
    ins, grads = te_program(cell, T, 2, 8, 4, k)
    (a, sa), (b, sb) = both_ways(Signature(grads, ins), Options(checkpoint=mode), monkeypatch,
                                     replay)
    assert sa == sb
    assert a == b


def test_replays_happen():
    """(The test above compares nothing if nothing is replayed.)"""
    ins, grads = te_program("lstm", 13, 2, 8, 4, 3)
    counts = {"lowered": 0}
    real = replay.Replays.get

    def get(self, key, lower, **holes):
        def counted(**h):
            counts["lowered"] += 1
            return lower(**h)
        counts.setdefault("asked", 0)
        counts["asked"] += 1
        return real(self, key, counted, **holes)
    replay.Replays.get = get
    try:
        generate(Signature(grads, ins), Options())
    finally:
        replay.Replays.get = real
    assert counts["lowered"] < counts["asked"]


def _doubling():
    """``(lowerer, its replays, B)`` of ``B = 2 A``."""
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    lw = Lowerer(Signature([B], [A]))
    return lw, replay.Replays(lw), B


def test_a_lowering_recording_a_site_is_lowered_again():
    lw, r, B = _doubling()
    calls = []

    def nest(lo):
        calls.append(lo)
        lw.sites.append(Site(B, None))
        v = lw.fresh("i", "int64")
        return [For(v, lo, Lit(4, "int64"), 1, Block((Store("b1", v, Lit(0.0, "float32")),)))]
    first = r.get("B", nest, lo=Lit(0, "int64"))
    second = r.get("B", nest, lo=Var("k", "int64"))
    assert len(calls) == 2 and len(lw.sites) == 2
    assert (first[0].var.name, second[0].var.name) == ("i0", "i1")
    assert first[0].lo == Lit(0, "int64") and second[0].lo == Var("k", "int64")


def test_a_lowering_keyed_modulo_its_tensors_naming_one_in_its_prose_is_lowered_again():
    # (codegen.alike) a replay keeps the template's comments: one naming a tensor would
    # name the template's tensor, not the caller's
    lw, r, _ = _doubling()
    calls = []

    def nest():
        calls.append(1)
        return [Block((Comment("are the values of A finite?"),))]
    r.get("k", nest, slots=("b0",))
    r.get("k", nest, slots=("b0",))
    assert len(calls) == 2
    r.get("same", lambda: [Comment("no name in it")], slots=("b0",))
    assert r.kept[("same",)] is not None  # (the one above is refused for its prose only)


def test_replay_renames_every_allocated_name_and_repeats_the_choices():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    lw = Lowerer(Signature([B], [A]))
    r = replay.Replays(lw)

    def nest(hi):
        lw.record.choose("B", "loops")
        lw.record.note("tile", 4)
        lw.record.done()
        lw.record.note("outer", True)  # (to the choice open around the lowering)
        v, w = lw.fresh("i", "int64"), lw.fresh("t", "float32")
        return [For(v, Lit(0, "int64"), hi, 1, Block((Store("b1", v, w),)))]
    lw.record.choose("X", "steps")
    r.get("B", nest, hi=Lit(4, "int64"))
    lw.record.done()
    lw.record.choose("Y", "steps")
    (again,) = r.get("B", nest, hi=Var("n", "int64"))
    lw.record.done()
    assert again.var.name == "i1" and again.body.stmts[0].value.name == "t1"
    assert again.hi == Var("n", "int64")
    assert str(lw.record.freeze()).splitlines() == [
        "X: steps (outer=True)", "B: loops (tile=4)", "Y: steps (outer=True)", "B: loops (tile=4)"]


def test_a_renamed_variable_keeps_its_type():
    # a replay makes each renamed variable once (by name): never with another's type
    a, b = Var("k0", "int64"), Var("k0", "int32")
    got = replay._rename((a, b, a), {"k0": "k5"}, {}, {})
    assert got == (Var("k5", "int64"), Var("k5", "int32"), Var("k5", "int64"))


def test_a_replay_by_plan_rebuilds_what_renaming_gives():
    # (codegen.replay._compile and _rebuild: the template walked once, then its steps)
    from codegen.loopast import Accumulate, Decl, If, Load, Op
    i, t = Var("i0", "int64"), Var("t3", "float32")
    shared = Op("add", (i, Lit(1, "int64")), "int64")
    body = Block((Decl(t, Load("b2", shared, "float32")),
                  Accumulate(t, "sum", Load("b2", shared, "float32")),
                  If(Op("lt", (Var("\0hi", "int64"), i), "bool"),
                     Block((Store("b1", shared, t),)), None)))
    loop = For(i, Lit(0, "int64"), Var("\0hi", "int64"), 1, body, note="i0 stays prose",
               reduction=(("sum", t),))
    stmts = [loop, Store("b1", Lit(0, "int64"), Var("i0", "int32"))]
    names = {"i0": "i7", "t3": "t9", "b2": "b5"}
    fill = {"\0hi": Var("n0", "int64")}
    got = replay._rebuild(replay._compile(stmts), names, fill)
    want = [replay._rename(s, names, fill, {}) for s in stmts]
    assert got == want
    assert got[0].note == "i0 stays prose" and got[0].reduction == (("sum", Var("t9", "float32")),)
    assert got[1].value == Var("i7", "int32")  # renamed with its own type
    # a node shared in the template is one node in the replay too
    inner = got[0].body.stmts
    assert inner[0].init.offset is inner[1].value.offset


def test_a_first_use_fills_what_renaming_gives_sharing_the_nodes_without_a_marker():
    # (codegen.replay._filled: a template's first use, most templates' only one)
    from codegen.loopast import Op
    i = Var("i0", "int64")
    shared = Op("add", (i, Lit(1, "int64")), "int64")
    inner = Block((Store("b1", shared, Lit(1.0, "float32")),
                   Store("b2", shared, Var("\0lo", "int64"))))
    loop = For(i, Var("\0lo", "int64"), Var("\0hi", "int64"), 1,
               Block((For(Var("j0", "int64"), Lit(0, "int64"), Lit(4, "int64"), 1,
                          Block((Store("b3", i, Lit(2.0, "float32")),))),
                      inner)))
    fill = {"\0lo": Var("k2", "int64"), "\0hi": Op("add", (Var("k2", "int64"),
                                                            Lit(1, "int64")), "int64")}
    got = replay._filled(loop, fill, {})
    assert got == replay._rename(loop, {}, fill, {})
    assert got.lo == fill["\0lo"] and got.hi is fill["\0hi"]
    assert got.body.stmts[0] is loop.body.stmts[0]  # no marker below: the template's own
    assert got.body.stmts[1].stmts[0] is inner.stmts[0]
    assert got.body.stmts[1].stmts[1].value == Var("k2", "int64")
    assert replay._filled(inner.stmts[0], fill, {}) is inner.stmts[0]


def test_a_lowering_with_holes_is_a_template_from_its_second_use(monkeypatch):
    # most are used once (a checkpointed step's function): lowered as themselves, with
    # the caller's bounds, no markers to fill; the second use makes the template, the
    # third on replay it
    lw, r, _ = _doubling()
    calls = []

    def nest(lo):
        calls.append(lo)
        v = lw.fresh("i", "int64")
        return [For(v, lo, Lit(4, "int64"), 1, Block((Store("b1", v, Lit(0.0, "float32")),)))]
    filled = []
    real = replay._filled
    monkeypatch.setattr(replay, "_filled", lambda *a: filled.append(1) or real(*a))
    (first,) = r.get("B", nest, lo=Lit(0, "int64"))
    assert calls == [Lit(0, "int64")] and not filled  # the caller's bound itself
    (second,) = r.get("B", nest, lo=Var("k", "int64"))
    assert len(calls) == 2 and calls[1].name == "\0lo" and filled
    (third,) = r.get("B", nest, lo=Var("m", "int64"))
    assert len(calls) == 2
    assert [(s.var.name, s.lo) for s in (first, second, third)] == [
        ("i0", Lit(0, "int64")), ("i1", Var("k", "int64")), ("i2", Var("m", "int64"))]


def test_a_template_keyed_modulo_its_tensors_is_checked_at_its_first_replay(monkeypatch):
    # (walking it for the names it holds is the check's cost: a template used once,
    # most of an LSTM's, never pays it)
    lw, r, _ = _doubling()
    checked = []
    real = replay.Replays._abstracted
    monkeypatch.setattr(replay.Replays, "_abstracted",
                        lambda self, *a: checked.append(1) or real(self, *a))
    nest = lambda: [Store("b1", Lit(0, "int64"), Lit(1.0, "float32"))]  # noqa: E731
    r.get("k", nest, slots=("b1",))
    assert not checked
    r.get("k", nest, slots=("b1",))
    r.get("k", nest, slots=("b1",))
    assert len(checked) == 1
