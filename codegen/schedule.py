"""Schedules as data: the options a build takes, and the record of what it chose.

A :class:`Schedule` is frozen and printable: per tensor, the strategy of
``codegen.strategies`` that lowered it and that strategy's parameters (tile
sizes, row blocks, residues, register tiles, ...), plus the program-wide
decisions (row-fusion groups, the copies the program was rewritten to read,
checkpointed recurrences). ``te.build(...).schedule`` returns it; tests assert
it instead of reading the C text.

:class:`Options` are the knobs a caller sets (``te.build(..., options=...)``):
checkpointing, register tiles, fusion, and forcing a strategy on a tensor.

>>> s = Schedule((Choice("B", "loops", (("simd", True),)),), groups=(("B", "C"),),
...              slabs=("rows",), unfused=((("D", "E"), "E"),))
>>> print(s)
B: loops (simd=True)
fused: B + C (slabs of rows)
not fused: D + E (E's strategy does not run the slab outermost)
>>> s["B"].strategy
'loops'
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Mapping, Optional, Tuple, Union


@dataclass(frozen=True)
class Options:
    """What a caller may decide about the schedule of a build.

    ``checkpoint``: recurrences whose intermediate rows need not all be kept are
    computed in rolling buffers, and ``checkpoints=k`` gradients by the revolve schedule
    (``codegen.checkpoint``; ``"segments"``: by plain segment recomputation instead,
    ``False``: the full tape);
    ``register_tiles``: row accumulators live in vector registers where they fit
    (``codegen.rowsum_registers``); ``fuse``: consecutive row-local tensors share one loop
    (``codegen.fuse``); ``copies``: dot-product sums may read transposed or
    zero-padded copies (``codegen.layout``); ``hoist``: costly sub-expressions
    evaluated under axes they do not use become tensors of their own
    (``passes.hoist``); ``share``: costly expressions several tensors (or points) recompute
    are stored once (``passes.share``); ``residues``: sums that gather with a stride split their
    reduction axes by residues and read residue-packed copies (``codegen.residues``);
    ``residue_classes``: such a sum whose taps' residues move with long output axes is
    split into one dense sum per residue class of those axes (``codegen.residue_classes``);
    ``streaming``: large outputs written once are stored around the caches
    (``codegen.streaming``); ``force``: tensor name -> strategy
    name, used for that tensor when the strategy applies (an error names the
    strategies that do otherwise).

    >>> Options(force={"Y": "loops"}).force
    (('Y', 'loops'),)
    >>> Options().key()
    'checkpoint=1 register_tiles=1 fuse=1 copies=1 hoist=1 share=1 residues=1 residue_classes=1 streaming=1 force='
    """
    checkpoint: Union[bool, str] = True
    register_tiles: bool = True
    fuse: bool = True
    copies: bool = True
    hoist: bool = True
    share: bool = True
    residues: bool = True
    residue_classes: bool = True
    streaming: bool = True
    force: Tuple[Tuple[str, str], ...] = ()

    def __post_init__(self):
        force = self.force
        if isinstance(force, Mapping):
            force = tuple(sorted(force.items()))
        object.__setattr__(self, "force", tuple((str(k), str(v)) for k, v in force))
        if self.checkpoint not in (True, False, "segments"):
            raise ValueError(f"ScheduleOptions(checkpoint=...) is True (revolve), "
                             f"\"segments\" or False (the full tape), not {self.checkpoint!r}")

    def forced(self, name: str) -> Optional[str]:
        """The strategy forced on the tensor called ``name``, if any.

        >>> Options(force={"Y": "jam"}).forced("Y"), Options().forced("Y")
        ('jam', None)
        """
        return dict(self.force).get(name)

    def key(self) -> str:
        """A stable text of the options: part of the build-cache key."""
        flags = " ".join(f"{k}={int(v) if isinstance(v, bool) else v}"
                         for k in ("checkpoint", "register_tiles", "fuse", "copies", "hoist",
                                   "share", "residues", "residue_classes", "streaming")
                         for v in [getattr(self, k)])
        return f"{flags} force=" + ",".join(f"{k}:{v}" for k, v in self.force)


#: the options of a build that sets none
DEFAULT = Options()


@dataclass(frozen=True)
class Choice:
    """The strategy that lowered one tensor, and its parameters (name, value) in the
    order the strategy decided them.

    >>> str(Choice("dW", "rows", (("tile", 256), ("row block", "i x 4"))))
    'dW: rows (tile=256, row block=i x 4)'
    """
    tensor: str
    strategy: str
    params: Tuple[Tuple[str, Any], ...] = ()

    def param(self, name: str, default=None):
        """The value of parameter ``name`` (``default`` if the strategy did not set it).

        >>> Choice("Y", "rows", (("tile", 64),)).param("tile")
        64
        """
        return dict(self.params).get(name, default)

    def __str__(self):
        ps = ", ".join(f"{k}={v}" for k, v in self.params)
        return f"{self.tensor}: {self.strategy}" + (f" ({ps})" if ps else "")


@dataclass(frozen=True)
class Schedule:
    """What a build chose: one :class:`Choice` per lowered tensor (in lowering order; a
    tensor lowered twice, as in a fast and a fallback version, appears twice), the
    row-fusion groups, the copies the program reads instead of some operands, and the
    checkpointed recurrences, the tensors hoisted out of others (``passes.hoist``) and
    the sums split by residues (``codegen.residues``) and the tensors stored around the
    caches (``codegen.streaming``).
    ``schedule["name"]`` is the first choice for a tensor."""
    choices: Tuple[Choice, ...] = ()
    groups: Tuple[Tuple[str, ...], ...] = ()
    copies: Tuple[str, ...] = ()
    checkpoint: Tuple[str, ...] = ()
    hoisted: Tuple[str, ...] = ()
    options: Options = field(default=DEFAULT)
    #: per fused group (in the order of ``groups``): its slabs, ``"rows"`` or ``"planes"``
    slabs: Tuple[str, ...] = ()
    #: groups that could share a slab loop and do not: (members, the member whose
    #: strategy does not run the slab's axes outermost)
    unfused: Tuple[Tuple[Tuple[str, ...], str], ...] = ()
    #: a line per sum split by residues of a stride (``codegen.residues``)
    residues: Tuple[str, ...] = ()
    #: a line per recurrence asking for checkpoints that keeps its full tape, and why
    #: (``codegen.checkpoint.full_tapes``)
    full_tape: Tuple[str, ...] = ()
    #: a line per tensor whose stores are non-temporal (``codegen.streaming``)
    streamed: Tuple[str, ...] = ()
    #: a line per sum split into residue classes of its output (``codegen.residue_classes``)
    classes: Tuple[str, ...] = ()
    #: a line per zero-padded copy several sums read (``codegen.padcopy_share``)
    shared: Tuple[str, ...] = ()
    #: a line per statement list run at several places: emitted once as a C function, or
    #: why in place (``codegen.step_functions``)
    functions: Tuple[str, ...] = ()

    def __getitem__(self, name: str) -> Choice:
        for c in self.choices:
            if c.tensor == name:
                return c
        raise KeyError(f"no tensor named {name!r} was lowered; lowered: "
                       f"{', '.join(dict.fromkeys(c.tensor for c in self.choices))}")

    def __contains__(self, name: str) -> bool:
        return any(c.tensor == name for c in self.choices)

    def strategies(self) -> Dict[str, str]:
        """Tensor name -> the strategy of its first choice.

        >>> Schedule((Choice("A", "loops"), Choice("B", "rows"))).strategies()
        {'A': 'loops', 'B': 'rows'}
        """
        out: Dict[str, str] = {}
        for c in self.choices:
            out.setdefault(c.tensor, c.strategy)
        return out

    def __str__(self):
        lines = [str(c) for c in self.choices]
        lines += [f"fused: {' + '.join(g)}" + (f" (slabs of {k})" if k else "")
                  for g, k in itertools.zip_longest(self.groups, self.slabs[:len(self.groups)])]
        lines += [f"not fused: {' + '.join(g)} ({m}'s strategy does not run the slab "
                  f"outermost)" for g, m in self.unfused]
        lines += [f"copy: {c}" for c in self.copies]
        lines += [f"shared copy: {c}" for c in self.shared]
        lines += [f"checkpointed: {c}" for c in self.checkpoint]
        lines += [f"full tape: {c}" for c in self.full_tape]
        lines += [f"hoisted: {c}" for c in self.hoisted]
        lines += [f"residues: {c}" for c in self.residues]
        lines += [f"residue classes: {c}" for c in self.classes]
        lines += [f"streamed: {c}" for c in self.streamed]
        lines += [f"function: {c}" for c in self.functions]
        return "\n".join(lines) or "(nothing lowered: every output is a view of an input)"


class Recorder:
    """Collects the choices of one lowering, in order; :meth:`freeze` makes the
    :class:`Schedule`. A strategy adds parameters to the choice in progress with
    :meth:`note` as it decides them.

    >>> r = Recorder(DEFAULT)
    >>> r.choose("Y", "rows"); r.note("tile", 64); r.done()
    >>> print(r.freeze())
    Y: rows (tile=64)
    """

    def __init__(self, options: Options):
        self.options = options
        self.choices: list = []
        self.groups: list = []
        self.copies: list = []
        self.checkpoint: list = []
        self.hoisted: list = []
        self.slabs: list = []
        self.unfused: list = []
        self.residues: list = []
        self.full_tape: list = []
        self.streamed: list = []
        self.classes: list = []
        self.shared: list = []
        self.functions: list = []
        self._open: list = []  # the choices in progress (a strategy lowers other tensors)
        #: while not None, every note as ``(index of its choice or -1, name, value)``:
        #: what a lowering replayed (``codegen.replay``) notes again
        self.heard: Optional[list] = None

    def choose(self, tensor: str, strategy: str, params: Tuple[Tuple[str, Any], ...] = ()):
        """Open the choice of ``strategy`` for ``tensor``: :meth:`note` adds to it until
        :meth:`done`."""
        self.choices.append(Choice(tensor, strategy, tuple(params)))
        self._open.append(len(self.choices) - 1)

    def fuse(self, members: Tuple[str, ...], slabs: str) -> None:
        """Record a row-fusion group and its slabs (``"rows"`` or ``"planes"``)."""
        self.groups.append(tuple(members))
        self.slabs.append(slabs)

    def done(self) -> None:
        """Close the innermost open choice."""
        self._open.pop()

    def note(self, name: str, value) -> None:
        """Record parameter ``name`` of the innermost open choice (nothing if none)."""
        if self.heard is not None:
            self.heard.append((self._open[-1] if self._open else -1, name, value))
        if not self._open:
            return
        k = self.choices[self._open[-1]]
        if (name, value) in k.params:
            return  # a tile lowered several times (row blocks, remainders) decides it once
        self.choices[self._open[-1]] = replace(k, params=k.params + ((name, value),))

    def lists(self) -> Tuple[int, ...]:
        """The lengths of the lists besides the choices (a lowering that adds to one is
        not replayed: ``codegen.replay``).

        >>> r = Recorder(DEFAULT); r.copies.append("A_T"); r.lists()
        (0, 1, 0, 0, 0, 0, 0, 0)
        """
        return (len(self.groups), len(self.copies), len(self.checkpoint), len(self.hoisted),
                len(self.slabs), len(self.unfused), len(self.residues), len(self.classes))

    def freeze(self) -> Schedule:
        return Schedule(tuple(self.choices), tuple(self.groups), tuple(self.copies),
                        tuple(self.checkpoint), tuple(self.hoisted), self.options,
                        tuple(self.slabs), tuple(self.unfused), tuple(self.residues),
                        tuple(self.full_tape), tuple(self.streamed), tuple(self.classes),
                        tuple(self.shared), tuple(self.functions))
