"""Data-parallel training with torch.distributed: a model holding a tensorexpr operator,
wrapped in DistributedDataParallel on two CPU processes (gloo), each training on half
of the batch, ends with the parameters of one process training on the whole batch."""
from __future__ import annotations

import gc
import socket

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import tensorexpr as te  # noqa: E402

STEPS, BATCH, LR = 5, 16, 0.1


class Model(torch.nn.Module):
    """``linear(tanh(x @ W))``: the hidden layer is a tensorexpr program (any batch size)."""

    def __init__(self):
        super().__init__()
        import tensorexpr.torch as tet
        B = te.var("B")
        X = te.placeholder((B, 5), "float64", name="X")
        W = te.placeholder((5, 3), "float64", name="W")
        k = te.reduce_axis(5, name="k")
        Y = te.compute((B, 3), lambda b, o: te.tanh(te.sum(X[b, k] * W[k, o], axis=k)),
                       name="hidden")
        self.hidden = tet.op(Y, [X, W])
        g = torch.Generator().manual_seed(0)
        self.W = torch.nn.Parameter(torch.randn(5, 3, generator=g, dtype=torch.float64))
        self.out = torch.nn.Linear(3, 1, dtype=torch.float64)
        with torch.no_grad():
            self.out.weight.copy_(torch.randn(1, 3, generator=g, dtype=torch.float64))
            self.out.bias.zero_()

    def forward(self, x):
        return self.out(self.hidden(x, self.W))


def data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, 5, generator=g, dtype=torch.float64)
    return x, torch.sin(x.sum(1, keepdim=True))


def train(model, x, y):
    """``STEPS`` of SGD on the mean squared error of ``(x, y)``."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def params(model) -> np.ndarray:
    inner = getattr(model, "module", model)
    return np.concatenate([p.detach().numpy().ravel() for p in inner.parameters()])


def worker(rank: int, world: int, port: int, path: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        model = torch.nn.parallel.DistributedDataParallel(Model())
        x, y = data()
        shard = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
        # DDP averages gradients: the mean over each shard, averaged, is the full mean
        train(model, x[shard], y[shard])
        np.save(f"{path}/rank{rank}.npy", params(model))
        # Tear down only when both ranks are done, and without DDP's pending work: a
        # rank closing its pairs while the other still talks (or gloo's threads still
        # holding tensors at interpreter exit) aborted a worker, 1 run in ~6 under load,
        # before and after tensorexpr's own changes (std::terminate in gloo)
        del model
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_processes_train_like_one_on_the_whole_batch(tmp_path):
    import torch.multiprocessing as mp
    mp.spawn(worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    one = Model()
    before = params(one)
    train(one, *data())
    want = params(one)
    assert np.abs(want - before).max() > 1e-3  # the steps moved the parameters
    for rank in range(2):
        got = np.load(tmp_path / f"rank{rank}.npy")
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
