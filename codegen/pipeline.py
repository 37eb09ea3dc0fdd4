"""The C backend's pipeline, top to bottom: from a program to a loaded kernel.

Read :func:`build` first: it lists every step in order. :func:`lower` is the
part that decides and lowers (steps 3-7), :func:`generate` adds the C text.

1. **views**: outputs that are inputs, or reshapes of them, are returned as
   views of the caller's arrays, never computed (``codegen.views``);
2. **cache**: a program built before, by this code generator with the same
   options, compiler and target, is loaded from disk (``codegen.c_backend``);
3. **analysis**: reduction-invariant factors leave the sums of their terms
   (``passes.factor_sums``), then costly sub-expressions evaluated under axes they do not use
   become tensors of their own (``passes.hoist``; ``Options.hoist``); checkpointed
   recurrences along another axis than their first are stored with it first
   (``codegen.checkpoint_axes``); the cheap
   elementwise intermediates are computed where they are read instead of stored
   (``codegen.lower.inlinable``);
4. **recurrences**: by steps where a step holds sums over earlier steps
   (``codegen.recurrence_steps``); rings of rows and checkpointed segments, with
   buffers of their own (``codegen.checkpoint``; ``Options.checkpoint``);
5. **program rewrites**: sums that gather with a stride split their reduction axes
   by residues and read residue-packed copies (``codegen.residues``;
   ``Options.residues``); dot-product sums read transposed or zero-padded copies
   of their operands, placed in the program as tensors of their own
   (``codegen.layout``; ``Options.copies``), one padded copy of an operand for all
   the sums that can read it (``codegen.padcopy_share``);
6. **schedule and lowering**: row-fusion groups (``codegen.fuse``), then each
   tensor by the first strategy of ``codegen.strategies`` that applies (or the
   one ``Options.force`` names), lowered to the loop AST (``codegen.loopast``);
   every choice is recorded in a :class:`~codegen.schedule.Schedule`;
7. **loop-AST passes**: consecutive parallel nests share one parallel region
   (``codegen.regions``; nests under an ``if`` on a flag set before them too, such as
   an input's finiteness, scanned once per kernel: ``codegen.finite_flags``); large outputs written once get non-temporal stores
   (``codegen.streaming``; ``Options.streaming``);
8. **emission**: the loop AST as C (``codegen.cemit``);
9. **compile and load**: the system compiler, the on-disk cache, the ctypes
   call (``codegen.compiler``, ``codegen.runtime``); with ``te.build(...,
   wait=False)`` the compiler runs on a thread and the program loads at its first
   call (``codegen.background``), so a caller building several programs lowers the
   next while the last one compiles.
"""
from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Callable, Dict, List, Optional, Tuple

from tensorexpr.collector import paused
from tensorexpr.ir import Placeholder

from . import background, c_backend, compiler, runtime, views
from .schedule import DEFAULT, Options, Schedule
from .signature import Signature


#: builds whose library is still compiling, by cache entry (codegen.background)
_building: Dict[str, Tuple] = {}
_building_lock = threading.Lock()


def build(sig, options: Options = DEFAULT, name: Optional[str] = None, wait: bool = True
          ) -> Tuple[Callable[..., List], str, Callable[[], Schedule]]:
    """Steps 1-9: ``(impl, source, schedule)``; ``impl(arrays, sizes)`` runs the compiled
    program, ``schedule()`` gives its :class:`Schedule` (on a cache hit, by lowering
    the program again: nothing is compiled). ``wait=False``: the compiler runs on a
    thread, joined by ``impl``'s first call (``codegen.background.PendingKernel``).

    >>> import numpy as np, tensorexpr as te
    >>> A = te.placeholder((3,), name="A")
    >>> B = te.compute((3,), lambda i: A[i] * 2.0, name="B")
    >>> impl, src, schedule = build(Signature([B], [A]))
    >>> impl([np.arange(3, dtype=np.float32)], {})[0], str(schedule())
    (array([0., 2., 4.], dtype=float32), 'B: loops')
    """
    # (tensorexpr.collector: a build's objects live to its end, no garbage to look for
    # among them; not while waiting for the compiler: the caller's other threads run)
    with paused():
        impl, source, schedule = _started(sig, options, name, wait)
    if wait:
        impl = resolved(impl)
    return impl, source, schedule


def _started(sig, options: Options, name: Optional[str], wait: bool
              ) -> Tuple[Callable[..., List], str, Callable[[], Schedule]]:
    """:func:`build` but for waiting: the compiler may be running on a thread, or
    (``wait``) run by the first call's thread (:func:`resolved`'s)."""
    found = views.find(sig.outputs, sig.inputs)                      # 1. views
    if found:
        rest = [t for k, t in enumerate(sig.outputs) if k not in found]
        note = views.describe(sig.outputs, sig.inputs, found)
        if not rest:
            return (views.WithViews(len(sig.outputs), found, None), note,
                    lambda: Schedule(options=options))
        impl, source, schedule = _started(Signature(rest, sig.inputs), options, name, wait)
        return views.WithViews(len(sig.outputs), found, impl), note + source, schedule
    comp = compiler.find_compiler()
    entry = c_backend.entry_path(sig, comp, options)                  # 2. cache
    with _building_lock:
        building = _building.get(entry) if entry is not None else None
        if building is not None and building[0].failed():
            del _building[entry]  # its error was the first call's: this build tries again
            building = None
    if building is not None:  # the same program, still compiling: shares that compile
        c_backend.stats["build_hits"] += 1
        job, layout, source, schedule = building
        return _pending(job, layout, sig, source, comp), source, lambda: schedule
    if entry is not None:
        hit = c_backend.load_entry(entry, sig)
        if hit is not None:
            c_backend.stats["build_hits"] += 1
            return hit + (lambda: generate(sig, options, name)[2],)
    program, source, schedule = generate(sig, options, name)          # 3-8.
    # 9. compile (on a thread: the caller may lower its next program meanwhile), load at
    # the first call
    layout = runtime.Layout.of(program, sig, source)
    job = background.start(source, comp, wait)
    if entry is not None:
        # the same program built again before its entry is on disk shares this compile
        with _building_lock:
            _building[entry] = (job, layout, source, schedule)

        def recorded() -> None:
            c_backend.store_entry(entry, job.path, source, layout)
            with _building_lock:
                _building.pop(entry, None)
        job.then(recorded)
    return _pending(job, layout, sig, source, comp), source, lambda: schedule


def _pending(job, layout, sig, source: str, comp):
    """The kernel function of ``job``'s library, loaded at the first call (compiled once
    more if the library does not load)."""
    return background.PendingKernel(job, layout, sig,
                                    lambda: compiler.compile_shared(source, comp))


def resolved(impl):
    """``impl`` (what :func:`build` makes) with its kernel compiled and loaded now: a
    compiler error is raised here, not at the first call.

    >>> import tensorexpr as te
    >>> A = te.placeholder((3,), name="A")
    >>> B = te.compute((3,), lambda i: A[i] * 2.0, name="B")
    >>> impl, _, _ = build(Signature([B], [A]), wait=False)
    >>> type(resolved(impl)).__name__
    'KernelFunction'
    """
    if isinstance(impl, background.PendingKernel):
        return impl.resolve()
    if isinstance(impl, views.WithViews) and impl.rest is not None:
        return impl.with_rest(resolved(impl.rest))
    return impl


def source_text(sig, options: Options = DEFAULT, name: Optional[str] = None) -> str:
    """The source :func:`build` would compile for ``sig`` (the note on outputs returned
    as views included), generated without compiling or reading the cache: what the
    snapshot tests hash.

    >>> import tensorexpr as te
    >>> A = te.placeholder((3,), name="A")
    >>> B = te.compute((3,), lambda i: A[i] * 2.0, name="B")
    >>> "b1[i0] = b0[i0] * 2.0f;" in source_text(Signature([B], [A]))
    True
    """
    found = views.find(sig.outputs, sig.inputs)
    note = ""
    if found:
        note = views.describe(sig.outputs, sig.inputs, found)
        rest = [t for k, t in enumerate(sig.outputs) if k not in found]
        if not rest:
            return note
        sig = Signature(rest, sig.inputs)
    return note + generate(sig, options, name)[1]


def lower(sig, options: Options = DEFAULT, title: str = ""):
    """Steps 3-7: ``(program, schedule)``: the loop-AST program of ``sig``
    (``codegen.lower.Program``) and the schedule that made it.

    >>> import tensorexpr as te
    >>> from codegen.signature import Signature
    >>> A = te.placeholder((64, 64), name="A")
    >>> B = te.compute((64, 64), lambda i, j: A[j, i] * 2.0, name="B")
    >>> print(lower(Signature([B], [A]))[1])
    B: blocks (axis=0)
    """
    # imported here, not above: a cache hit (step 2) never loads the lowering, nor isl
    from . import (adjoint_sums, checkpoint, copies, layout, padcopy, padcopy_share,
                   recurrence_steps, regions, residues)
    from .lower import Lowerer
    from .patterns import inlinable
    from .streaming import rewrite as stream
    from .unswitch import unswitch
    from .loopast import Block

    sig, hoisted = hoist(sig, options.hoist, options.share)         # 3. analysis
    # checkpointed recurrences along another axis than their first (their adjoints, the
    # tensors hoisted between two of them) stored with it first, in every build: what
    # codegen.checkpoint's rows need
    sig = carry_first(sig)
    # inputs a recurrence reads across its vector lanes: transposed copies, in every build
    sig, transposed = recurrence_inputs(sig) if options.copies else (sig, [])
    inline = inlinable(sig)
    computed = [t for t in sig.order if not isinstance(t, Placeholder)]
    # 4. recurrences: by steps where a step holds sums over earlier ones; rings of rows
    # and checkpointed segments where they need not all be kept
    step_sums, steps = recurrence_steps.rewrite(computed, options)
    # sums over an adjoint's steps (weight gradients): a step at a time, last first, in
    # every build, so that a checkpointed gradient adds them as the full tape does
    terms, sums = adjoint_sums.rewrite(computed, options)
    # tensors holding sums along such a gradient's steps: a step at a time, likewise
    row_sums, rows = recurrence_steps.rewrite_rows(computed, options, sums)
    steps.update(rows)
    step_sums += row_sums
    made: list = []
    if options.copies:  # transposed inputs for sums computed at every step, made first
        steps, step_sums, made = layout.step_copies(steps, step_sums)
        computed = made + computed
    mode = "segments" if options.checkpoint == "segments" else "revolve"
    rings = checkpoint.rings(sig, mode, sums, steps) if options.checkpoint else None
    if rings is not None and rings.rings:
        lw = Lowerer(sig, title, options, computed if made else None,
                     scratch=step_sums + terms, steps=steps, adjoint_sums=sums)
        lw.record.copies.extend(t.name for t in transposed + made)
        program = checkpoint.RingProgram(lw, rings).program()
    else:
        scratch, padded, split, classes, shared = [], {}, [], [], []
        # 5. program rewrites (not where sums are added a step at a time, nor where
        # tensors run by steps: their plans hold the tensors as written, the order a
        # checkpointed build follows)
        if options.residues and not sums:
            computed, split, classes = residues.plan(sig, computed, inline, options)
        if options.copies and not rows:
            computed = layout.plan(computed, inline)
            scratch, padded = padcopy.rewrite(sig, computed, inline, options)
            # one copy per operand for the sums that can share it
            scratch, padded, shared = padcopy_share.share(scratch, padded, sig.size_names)
        lw = Lowerer(sig, title, options, computed, scratch + step_sums + terms, padded, steps,
                     sums)
        lw.record.copies.extend([t.name for t in computed if copies.is_copy(t)] +
                                [t.name for t, _ in scratch])
        lw.record.residues.extend(split)
        lw.record.classes.extend(classes)
        lw.record.shared.extend(shared)
        program = lw.program()                                       # 6. schedule, lowering
    lw.record.hoisted.extend(hoisted)
    lw.record.full_tape.extend(checkpoint.full_tapes(sig, rings, options))
    body = unswitch(regions.merge(list(program.kernel.body)))
    # (a function's statements are the kernel's, run elsewhere: the same passes)
    functions = tuple(replace(f, body=Block(tuple(unswitch(regions.merge(list(f.body.stmts))))))
                      for f in program.kernel.functions)
    kernel = replace(program.kernel, body=tuple(body), functions=functions)
    if options.streaming:
        kernel, streamed = stream(kernel, program.tensors)
        lw.record.streamed.extend(streamed)
    return replace(program, kernel=kernel), lw.record.freeze()       # 7. loop-AST passes


def carry_first(sig) -> Signature:
    """``sig`` with its checkpointed recurrences and their adjoints stored with their
    carried axis first (``codegen.checkpoint_axes``); ``sig`` itself if none moves.

    >>> import tensorexpr as te
    >>> x = te.placeholder((2, 5), name="x")
    >>> h = te.recurrence((2, 5), lambda h, b, t: x[b, t] + te.select(
    ...     t > 0, h[b, t - 1], 0.0), name="h", checkpoints=2)
    >>> y = te.compute((2,), lambda b: h[b, 4], name="y")
    >>> [t.shape for t in carry_first(Signature([y], [x])).order if t.name == "h"]
    [(5, 2)]
    """
    from .checkpoint_axes import carry_first as move
    done, moved = move(sig.outputs)
    if not moved:
        return sig
    return Signature([done[t.uid] for t in sig.outputs], sig.inputs, sig.inferred)


def recurrence_inputs(sig) -> Tuple[Signature, list]:
    """``sig`` with its recurrences reading transposed copies of the inputs they read
    across their vector lanes (``codegen.recurrence_copies``), and the copies.

    >>> import tensorexpr as te
    >>> X = te.placeholder((256, 512), name="X")
    >>> Y = te.recurrence((512, 256), lambda h, t, r: te.select(t > 0, h[t - 1, r]
    ...     + X[r, t], X[r, t]), name="Y")
    >>> [t.name for t in recurrence_inputs(Signature([Y], [X]))[0].order]
    ['X', 'X_T', 'Y']
    """
    from .recurrence_copies import rewrite
    done, made = rewrite(sig.outputs)
    if not made:
        return sig, []
    return Signature([done[t.uid] for t in sig.outputs], sig.inputs, sig.inferred), made


def hoist(sig, invariants: bool = True, shared: bool = True) -> Tuple[Signature, List[str]]:
    """``sig`` with sums over unit innermost axes computed over the other axes
    (``passes.squeeze``), the reduction-invariant factors of its sums' terms out of
    them (``passes.factor_sums``), the invariant parts of its tensors hoisted (``passes.hoist``)
    and then the costly expressions several tensors recompute stored once
    (``passes.share``), and a line per tensor made; ``sig`` itself if there is none.

    >>> import tensorexpr as te
    >>> X = te.placeholder((16, 8), name="X"); W = te.placeholder((8, 8), name="W")
    >>> k = te.reduce_axis(8, name="k")
    >>> Y = te.compute((16, 8), lambda i, j: te.sum(te.exp(X[i, k]) * W[k, j], axis=k), name="Y")
    >>> hoist(Signature([Y], [X, W]))[1]
    ['Y_h0[i, k] from Y']
    """
    from passes.factor_sums import factor_all
    from passes.hoist import hoist_invariants
    from passes.share import share
    from passes.squeeze import squeeze
    # sums whose innermost axis has one point, over their other axes (tileable)
    done, made = squeeze(sig.outputs)
    lines = [f"{g.name}[{', '.join(a.name for a in g.axes)}] from {t.name} (unit axes)"
             for g, t in made]
    outputs = [done[t.uid] for t in sig.outputs]
    if invariants:
        # reduction-invariant factors out of sums, so that hoisting stores the smaller
        # sums once (a pairwise distance's gradient: a row sum and a contraction)
        done, changed = factor_all(outputs)
        lines += [f"{t.name}: invariant factors out of its sums" for t in changed]
        outputs = [done[t.uid] for t in outputs]
    done, made = hoist_invariants(outputs) if invariants else ({}, [])
    lines += [f"{g.name}[{', '.join(a.name for a in g.axes)}] from {t.name}" for g, t in made]
    outputs = [done.get(t.uid, t) for t in outputs]
    # then costly expressions several tensors recompute (a gradient's activations)
    done, stored = share(outputs) if shared else ({t.uid: t for t in outputs}, [])
    lines += [f"{g.name}[{', '.join(a.name for a in g.axes)}] shared by "
              f"{', '.join(t.name for t in users)}" for g, users in stored]
    if not lines:
        return sig, []
    return Signature([done[t.uid] for t in outputs], sig.inputs, sig.inferred), lines


def generate(sig, options: Options = DEFAULT, name: Optional[str] = None):
    """Steps 3-8: ``(program, C source, schedule)``; nothing is compiled.

    >>> import tensorexpr as te
    >>> from codegen.signature import Signature
    >>> A = te.placeholder((4,), name="A")
    >>> B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    >>> _, src, schedule = generate(Signature([B], [A]))
    >>> "b1[i0] = b0[i0] + 1.0f;" in src, str(schedule)
    (True, 'B: loops')
    """
    from .cemit import emit
    stats = c_backend.stats
    stats["lowered"] += 1
    title = name if name is not None else ", ".join(t.name for t in sig.outputs)
    t0 = time.perf_counter()
    # (tensorexpr.collector: the objects of a lowering live to its end, no garbage to
    # look for among them)
    with paused():
        program, schedule = lower(sig, options, title)
        t1 = time.perf_counter()
        source = emit(program.kernel)                               # 8. emission
    stats["lower_s"] += t1 - t0
    stats["emit_s"] += time.perf_counter() - t1
    return program, source, schedule
