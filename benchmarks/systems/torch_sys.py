"""The benchmark cases in PyTorch eager mode; gradients by autograd.

The forward is timed under ``torch.no_grad()``; the VJP is
``torch.autograd.grad(Y, wrt, H, retain_graph=True)`` on a graph recorded once,
i.e. the backward pass alone with the forward's saved tensors given.

>>> len(FORWARD), FORWARD["conv2d"].__name__  # one function per case key
(30, '_conv2d')
"""
from __future__ import annotations

from benchmarks import THREADS
from benchmarks.systems import Prepared, first_line, forward_table, missing_module, timed

LABEL = "PyTorch eager autograd"
VJP_INCLUDES = ("torch.autograd.grad alone on a graph recorded once (the forward's saved "
                "tensors given)")


def missing():
    """None if torch imports, else why not and how to install it."""
    return missing_module("torch")


# {{{ the cases (imports inside: this module must import without torch)


def _matmul(p, A, B):
    return A @ B


def _conv2d(p, X, W):
    import torch.nn.functional as F
    return F.conv2d(X, W, stride=p["stride"], padding=p["pad"], dilation=p["dil"])


def _maxpool(p, X):
    import torch.nn.functional as F
    return F.max_pool2d(X, p["k"], stride=p["k"])


def _avgpool(p, X):
    import torch.nn.functional as F
    return F.avg_pool2d(X, p["k"], stride=1)


def _flatten(p, X):
    # materialised like every other system's output (a view would cost nothing)
    return X.reshape(X.shape[0], -1).clone()


def _softmax(p, X):
    import torch
    return torch.softmax(X, dim=-1)


def _layernorm(p, X, gamma, beta):
    import torch.nn.functional as F
    return F.layer_norm(X, (p["D"],), gamma, beta, eps=p["eps"])


def _bias_transpose(p, X, b):
    return (X + b).t().contiguous()


def _ewma(p, d):
    e = d[:, 0]
    for t in range(1, p["T"]):
        e = 0.5 * d[:, t] + 0.5 * e
    return e


def _mlp(p, X, W1, b1, W2, b2):
    import torch
    return torch.tanh(X @ W1 + b1) @ W2 + b2


def _embedding(p, E, idx):
    import torch.nn.functional as F
    return F.embedding(idx, E)


def _blur(p, X):
    import torch
    Xp = torch.cat([X[:1], X, X[-1:]])  # clamped boundary
    return (Xp[:-2] + Xp[1:-1] + Xp[2:]) / 3


# {{{ tier 2


def _bmm(p, A, Bm):
    import torch
    return torch.bmm(A, Bm)


def _attention(p, Q, K, V):
    import torch.nn.functional as F
    return F.scaled_dot_product_attention(Q, K, V)


def _depthwise(p, X, W):
    import torch.nn.functional as F
    return F.conv2d(X, W, padding=1, groups=X.shape[1])


def _conv1x1(p, X, W):
    import torch.nn.functional as F
    return F.conv2d(X, W)


def _conv1d(p, X, W):
    import torch.nn.functional as F
    return F.conv1d(X, W, padding=p["pad"])


def _conv_transpose(p, X, W):
    import torch.nn.functional as F
    return F.conv_transpose2d(X, W, stride=p["stride"], padding=p["pad"])


def _groupnorm(p, X, gamma, beta):
    import torch.nn.functional as F
    return F.group_norm(X, p["G"], gamma, beta, eps=p["eps"])


def _batchnorm(p, X, gamma, beta):
    import torch.nn.functional as F
    return F.batch_norm(X, None, None, gamma, beta, training=True, eps=p["eps"])


def _xent(p, logits, labels):
    import torch.nn.functional as F
    return F.cross_entropy(logits, labels)


def _lstm(p, x, h, c, Wx, Wh, b):
    import torch
    i, f, g, o = (x @ Wx + h @ Wh + b).chunk(4, dim=1)
    c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c2)


def _gru(p, x, Wx, Wh, b):
    import torch
    hd = p["Hd"]
    xp = x @ Wx + b  # every step's input projections at once
    h = x.new_zeros(x.shape[1], hd)
    out = []
    for t in range(x.shape[0]):
        hr, hz, hn = (h @ Wh).split(hd, dim=1)
        xr, xz, xn = xp[t].split(hd, dim=1)
        r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
        h = (1 - z) * torch.tanh(xn + r * hn) + z * h
        out.append(h)
    return torch.stack(out)


def _rnn(p, x, Wx, Wh, b):
    import torch
    xp = x @ Wx + b
    h = x.new_zeros(x.shape[1], Wh.shape[0])
    out = []
    for t in range(x.shape[0]):
        h = torch.tanh(xp[t] + h @ Wh)
        out.append(h)
    return torch.stack(out)


def _cumsum(p, X):
    return X.cumsum(dim=-1)


def _upsample(p, X):
    import torch.nn.functional as F
    return F.interpolate(X, scale_factor=2, mode="bilinear", align_corners=False)


def _pdist(p, A, Bm):
    return ((A[:, None, :] - Bm[None, :, :]) ** 2).sum(-1)


def _seqmax(p, X):
    return X.amax(dim=-1)


def _gelu(p, X):
    import torch.nn.functional as F
    return F.gelu(X, approximate="tanh")


def _l2norm(p, X):
    import torch.nn.functional as F
    return F.normalize(X, dim=1, eps=p["eps"])

# }}}


FORWARD = forward_table(globals())

# }}}


def prepare(case, p, inputs, H) -> Prepared:
    """Compile or record the case, time its first calls; failures become statuses.

    >>> from benchmarks.cases import CASES
    >>> p = CASES[0].params(quick=True)
    >>> H = CASES[0].head((64, 64))
    >>> prep = prepare(CASES[0], p, CASES[0].inputs(p), H)  # doctest: +SKIP
    >>> [g.shape for g in prep.gradients()]  # doctest: +SKIP
    [(64, 128), (128, 64)]
    """
    import torch
    torch.set_num_threads(THREADS)
    f = FORWARD[case.key]
    plain = {k: torch.from_numpy(v) for k, v in inputs.items()}
    tracked = {k: (v.clone().requires_grad_(True) if k in case.wrt else v)
               for k, v in plain.items()}
    wrt = [tracked[n] for n in case.wrt]
    head = torch.from_numpy(H)

    def forward():
        with torch.no_grad():
            return f(p, **plain)

    prep = Prepared(fwd=forward, vjp=None, to_numpy=lambda t: t.detach().numpy())
    _, prep.fwd_build_s = timed(forward)  # eager: nothing to build, first call only
    try:
        def record_and_grad():
            Y = f(p, **tracked)
            return Y, torch.autograd.grad(Y, wrt, head, retain_graph=True)
        (Y, _), prep.build_s = timed(record_and_grad)
        prep.vjp = lambda: torch.autograd.grad(Y, wrt, head, retain_graph=True)
    except Exception as exc:
        prep.vjp_status = f"unsupported ({first_line(exc)})"
    return prep
