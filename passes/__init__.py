"""Passes from IR to IR behind ``te.differentiate``: normalize (one reduction per
tensor, at the top), partials (local derivatives of an expression), simplify
(algebraic clean-up) and differentiate (vector-Jacobian products as gathers).

>>> import tensorexpr as te
>>> from passes.differentiate import differentiate
>>> X = te.placeholder((3,), name="X")
>>> Y = te.compute((3,), lambda i: X[i] * X[i], name="Y")
>>> print(differentiate(Y, [X], head=te.placeholder((3,), name="H"))[0])
dX[i0] = H[i0] * (X[i0] * 2.0)    for i0 in [0, 3)    float32
"""
