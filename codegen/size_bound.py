"""The backstop on generated C size: a program's lowering may create at most so many
C temporaries per distinct IR node, else it stops with :class:`ProgramTooLargeError`.

Lowering keeps a DAG a DAG (``codegen.lower_expr``: each shared value is one local),
so the C grows with the distinct nodes of the program: the most any benchmark or
test program makes is a few temporaries per node. A lowering that duplicates
expressions (a bug, or a shape nobody foresaw) would instead take minutes and
gigabytes for a C compiler that takes longer still; this bound turns that into an
error naming the tensor, the user's line and the fix, in seconds.

>>> import tensorexpr as te
>>> from codegen.signature import Signature
>>> X = te.placeholder((4,), name="X")
>>> Y = te.compute((4,), lambda i: X[i] * 2.0 + 1.0, name="Y")
>>> b = Budget(Signature([Y], [X]))
>>> b.limit > TEMPORARIES_PER_NODE * 4, b.spend(10, Y)
(True, None)
"""
from __future__ import annotations

from tensorexpr.errors import ProgramTooLargeError, describe
from tensorexpr.ir import postorder, tensor_exprs

#: temporaries allowed per distinct IR node of the program (programs make at most ~3;
#: strategies that lower a tensor twice, and unrolled windows, stay far below)
TEMPORARIES_PER_NODE = 64
#: temporaries allowed whatever the program (a few nodes lowered as unrolled windows)
TEMPORARIES_BASE = 100_000


class Budget:
    """The temporaries the lowering of ``sig``'s program may create."""

    def __init__(self, sig):
        seen: set = set()
        for t in sig.order:
            for e in tensor_exprs(t):
                seen.update(id(x) for x in postorder(e))
        self.nodes = len(seen)
        self.limit = TEMPORARIES_BASE + TEMPORARIES_PER_NODE * self.nodes
        self.spent = 0

    def spend(self, n: int, owner) -> None:
        """Count ``n`` more temporaries made while lowering ``owner``; raise
        :class:`ProgramTooLargeError` past the limit."""
        self.spent += n
        if self.spent > self.limit:
            what = describe(owner) if owner is not None else "the program"
            raise ProgramTooLargeError(
                f"{what}: its C would need more than {self.limit:,} temporaries for "
                f"{self.nodes:,} distinct operations (the program's expressions after "
                f"differentiation): building it would take minutes. Compute a part of the "
                f"expression that is used several times as its own tensor (te.compute), "
                f"so that it is stored once; if the program is plain, please report it.")
