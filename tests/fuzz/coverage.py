"""Which schedule decisions a fuzz run reached: counts per strategy, parameter and
program-wide rewrite, from each C build's schedule and source.

A size profile is only worth its time if its programs take the code generator's
strategies (tiles, register tiles, vector loops, residue splits, parallel loops);
:func:`decisions` names what one build took, :class:`Coverage` sums them over a run.

>>> from codegen.schedule import Choice, Schedule
>>> s = Schedule((Choice("C", "rows", (("tile", 32), ("register tile", "8 x float32"))),),
...              residues=("dW: k by 2",), copies=("B_T",))
>>> decisions(s, "#pragma omp parallel for if(parallel: 64 >= te_min_work)\\n")
['rows', 'rows/register tile', 'rows/tile', 'copy', 'residues', 'copy/transposed', 'C: omp parallel for']
"""
from __future__ import annotations

from collections import Counter

#: parameters whose value (not only their presence) is a decision worth counting
VALUED = ("partial sums", "lanes", "registers", "order")
#: program-wide lists of a Schedule, by the name they are counted under
WIDE = (("groups", "fused"), ("copies", "copy"), ("checkpoint", "checkpointed"),
        ("full_tape", "full tape"), ("hoisted", "hoisted"), ("residues", "residues"),
        ("classes", "residue classes"), ("streamed", "streamed"))
#: the copies a schedule lists, by the suffix of their names (``codegen.copies``,
#: ``codegen.padcopy``): each kind is a decision of its own
COPY_KINDS = (("_T", "copy/transposed"), ("_pad", "copy/row-padded"),
              ("_padded", "copy/padded"), ("_planes", "copy/planes"))
#: generated-C constructs: what the schedule does not record
C_MARKS = (("#pragma omp parallel for", "C: omp parallel for"),
           ("#pragma omp parallel\n", "C: omp parallel region"),
           ("#pragma omp simd", "C: omp simd"),
           ("__attribute__((vector_size(", "C: vector types"))


def decisions(schedule, source: str = "") -> list:
    """The decisions one build took, one name per strategy choice, per parameter it set
    (``strategy/param``, with the value for :data:`VALUED` ones), per program-wide
    rewrite and per C construct present (each counted once per build)."""
    out = []
    for c in schedule.choices:
        out.append(c.strategy)
        names = sorted({k if k not in VALUED else f"{k}={v}" for k, v in c.params})
        out += [f"{c.strategy}/{n}" for n in names]
    for attr, name in WIDE:
        if getattr(schedule, attr):
            out.append(name)
    out += sorted({name for c in schedule.copies for suffix, name in COPY_KINDS
                   if c.endswith(suffix)})
    out += [name for mark, name in C_MARKS if mark in source]
    return out


class Coverage:
    """Counts of :func:`decisions` over builds (``observe`` is given each C build).

    >>> import tensorexpr as te
    >>> X = te.placeholder((40,), name="X")
    >>> cov = Coverage()
    >>> cov.observe(te.build(te.compute((40,), lambda i: X[i] * 2.0, name="Y")))
    >>> cov.builds, cov.counts["loops"]
    (1, 1)
    """

    def __init__(self):
        self.counts: Counter = Counter()
        self.builds = 0

    def observe(self, function) -> None:
        self.builds += 1
        self.counts.update(decisions(function.schedule, function.source))

    def report(self) -> str:
        """One line per decision, most frequent first."""
        lines = [f"schedule decisions over {self.builds} C builds:"]
        lines += [f"  {n:6d}  {name}" for name, n in self.counts.most_common()]
        return "\n".join(lines)
