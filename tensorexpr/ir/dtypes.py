"""Element types of the IR: the names, the promotion order, and fresh unique ids.

>>> promote("int32", "float32")
'float32'
"""

from __future__ import annotations

import itertools

DTYPES = ("bool", "int32", "int64", "float32", "float64")
_RANK = {d: k for k, d in enumerate(DTYPES)}
INDEX_DTYPE = "int64"
DEFAULT_FLOAT = "float32"

_uid_counter = itertools.count(1)


def fresh_uid() -> int:
    """A process-unique integer; creation order of tensors and axes follows it.

    >>> a = fresh_uid()
    >>> fresh_uid() > a
    True
    """
    return next(_uid_counter)


def is_float(dtype: str) -> bool:
    """Is ``dtype`` a floating-point type?

    >>> is_float("float64"), is_float("int32")
    (True, False)
    """
    return dtype in ("float32", "float64")


def is_int(dtype: str) -> bool:
    """Is ``dtype`` an integer type (``bool`` is not)?

    >>> is_int("int32"), is_int("bool")
    (True, False)
    """
    return dtype in ("int32", "int64")


def promote(a: str, b: str) -> str:
    """The result type of a binary arithmetic operation on ``a`` and ``b``.

    >>> promote("int32", "float32"), promote("int64", "int32")
    ('float32', 'int64')
    """
    return a if _RANK[a] >= _RANK[b] else b


def check_dtype(dtype) -> str:
    """The name of ``dtype`` if it is one of ``DTYPES`` (a name, or a numpy type or dtype
    of one: ``np.float64``, ``np.dtype("int32")``), else a TypeError naming the choices.

    >>> import numpy as np
    >>> check_dtype("int64"), check_dtype(np.float64), check_dtype(np.dtype("bool"))
    ('int64', 'float64', 'bool')
    >>> check_dtype("float16")
    Traceback (most recent call last):
    TypeError: unknown dtype 'float16'; use one of bool, int32, int64, float32, float64
    """
    if not isinstance(dtype, str):
        import numpy as np
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
        # (Python's float is float64 to numpy, float32 here: refused; `is`, as a numpy
        # dtype compares equal to the Python type)
        if name in DTYPES and dtype is not None and not any(dtype is t for t in (float, int, bool)):
            return name
        raise TypeError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    if dtype not in DTYPES:
        raise TypeError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return dtype
