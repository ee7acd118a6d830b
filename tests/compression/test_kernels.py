"""The row operations of compressed gossip (gossipfl.compression.kernels): the top-k
selection against a float64 NumPy re-derivation (ties to the lowest index, NaN largest), the
numba kernels bitwise against the torch definition (adversarial rows included: ties, NaNs, a
sample that misses, candidates that overflow), and the CHOCO step that uses them bitwise
against the publish-then-consensus definition."""

import numpy as np
import pytest
import torch

from gossipfl.compression import RandK, TopK, kernels
from gossipfl.compression.gossip import ChocoGossip
from gossipfl.compression.sampling import RUN, sampling
from gossipfl.engine import ParamLayout
from gossipfl.engine import threads as threads_module
from gossipfl.engine.groups import ParamGroups
from gossipfl.network.federation import Federation
from gossipfl.topology import Mixer, build_topology

numba = pytest.importorskip("numba")


def bits(t):
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int64)


def top_k_reference(d: np.ndarray, k: int):
    """Per row: sort by (−|d| with NaN as +inf, index), keep the first k, indices ascending."""
    out_idx, out_val = [], []
    for row in d.astype(np.float64):
        a = np.abs(row)
        a[np.isnan(a)] = np.inf
        order = np.lexsort((np.arange(row.size), -a))[:k]
        chosen = np.sort(order)
        out_idx.append(chosen)
        out_val.append(row[chosen])
    return np.array(out_idx).reshape(len(d), k), np.array(out_val).reshape(len(d), k)


def adversarial(n: int, p: int, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    """Rows with ties, zeros, a NaN, infinities and integer-valued stretches."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, p, generator=gen, dtype=dtype)
    if n > 1:
        x[1] = torch.randint(-3, 4, (p,), generator=gen).to(dtype)  # many ties at the k-th
    if n > 2:
        x[2, : p // 2] = 0.0
        x[2, 0] = -0.0
    if n > 3:
        x[3, p // 3] = float("nan")
        x[3, p // 5] = float("-inf")
    return x


CASES = [(4, 1, 1), (5, 7, 3), (6, 50, 50), (6, 1000, 10), (5, 20000, 200), (3, 100000, 1000)]


@pytest.fixture(params=["numba", "torch"])
def path(request, monkeypatch):
    if request.param == "torch":
        monkeypatch.setenv("GOSSIPFL_KERNELS", "torch")
    return request.param


@pytest.mark.parametrize(("n", "p", "k"), CASES)
def test_top_k_is_the_k_largest_magnitudes_ties_to_the_lowest_index(path, n, p, k):
    x, copy = adversarial(n, p, 1), adversarial(n, p, 2)
    copy[1] = 0.0  # row 1 keeps its ties in x − copy
    idx, values = kernels.top_k(x, k, copy)
    ref_idx, ref_val = top_k_reference((x - copy).numpy(), k)
    assert np.array_equal(idx.numpy(), ref_idx)
    assert np.array_equal(values.double().numpy(), ref_val, equal_nan=True)
    plain_idx, _ = kernels.top_k(x, k)
    assert np.array_equal(plain_idx.numpy(), top_k_reference(x.numpy(), k)[0])


@pytest.mark.represented
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("n", "p", "k"), CASES)
def test_fused_kernels_equal_the_torch_definition_bitwise(monkeypatch, dtype, n, p, k):
    z, copy, mixed = (adversarial(n, p, s, dtype) for s in (3, 4, 5))
    copy[1] = 0.0
    gamma = 0.123456789
    fused = (kernels.consensus(z, copy, mixed, gamma), *kernels.top_k(z, k, copy),
             *kernels.top_k(z, k))
    monkeypatch.setenv("GOSSIPFL_KERNELS", "torch")
    reference = (kernels.consensus(z, copy, mixed, gamma), *kernels.top_k(z, k, copy),
                 *kernels.top_k(z, k))
    assert torch.equal(bits(reference[0]), bits(torch.sub(mixed, copy).mul_(gamma).add_(z)))
    for got, want in zip(fused, reference, strict=True):
        assert got.dtype == want.dtype and torch.equal(bits(got) if got.is_floating_point()
                                                        else got, bits(want)
                                                        if want.is_floating_point() else want)


def test_the_sampled_threshold_falls_back_where_it_misses_or_overflows():
    p, k = 100_000, 2000
    stride, _ = sampling(p, k)
    run = RUN
    sampled = torch.arange(p) % (run * stride) < run
    assert k > int(sampled.sum())
    missing = torch.rand(2, p) * 1e-3
    missing[:, sampled] = 100.0  # the sample sees only large values: fewer than k reach it
    constant = torch.full((2, p), 0.5)  # every coordinate ties: the candidates overflow
    constant[1, 7] = 0.25
    for x in (missing, constant):
        idx, values = kernels.top_k(x, k)
        ref_idx, ref_val = top_k_reference(x.numpy(), k)
        assert np.array_equal(idx.numpy(), ref_idx)
        assert np.array_equal(values.double().numpy(), ref_val)


def test_rows_do_not_depend_on_the_other_rows_or_the_thread_split(monkeypatch):
    x = adversarial(9, 40000, 6)
    whole = kernels.top_k(x, 400)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    split = kernels.top_k(x, 400)
    alone = [kernels.top_k(x[i:i + 1], 400) for i in range(9)]
    assert torch.equal(whole[0], split[0])
    assert torch.equal(whole[0], torch.cat([a[0] for a in alone]))


def test_top_k_compressor_with_a_copy_is_top_k_of_the_difference():
    x, copy = adversarial(4, 3000, 7), adversarial(4, 3000, 8)
    comp = TopK(fraction=0.01)
    idx, values = comp.sparse(x, None, copy)
    ref_idx, ref_values = comp.sparse(x - copy, None)
    assert torch.equal(idx, ref_idx) and torch.equal(bits(values), bits(ref_values))


def federation(m: int, p: int) -> Federation:
    topology = build_topology("ring", m, mixing="metropolis_hastings", seed=0)
    groups = ParamGroups.build(ParamLayout.from_module(torch.nn.Linear(p, 1, bias=False)), [])
    return Federation(m, groups, torch.ones(m), seed=0, mixer=Mixer(topology, sparse="sparse"))


@pytest.mark.parametrize("compressor", [TopK(fraction=0.01), RandK(fraction=0.01)],
                         ids=["top_k", "rand_k"])
def test_choco_step_equals_the_consensus_computed_after_the_messages(path, compressor):
    m, p, gamma = 6, 5000, 0.3
    fed = federation(m, p)
    choco = ChocoGossip(compressor, gamma)
    gen = torch.Generator().manual_seed(0)
    hat, mixed = torch.zeros(m, p), torch.zeros(m, p)
    hat2, mixed2 = hat.clone(), mixed.clone()
    for t in range(4):
        z = torch.randn(m, p, generator=gen)
        x, hat, mixed = choco.step(fed.wire, z, hat, mixed, t, ("0", t, 0))
        fed.publish(z, t, choco.compressor, ("0", t, 0), hat2, mixed2)
        x2 = torch.sub(mixed2, hat2).mul_(gamma).add_(z)
        assert torch.equal(bits(hat), bits(hat2)) and torch.equal(bits(mixed), bits(mixed2))
        assert torch.equal(bits(x), bits(x2))


@pytest.mark.represented
@pytest.mark.filterwarnings("error")  # torch warns when given a read-only NumPy array
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("graph", ["ring", "exponential"])
def test_deliver_fused_equals_the_torch_definition_bitwise(monkeypatch, graph, dtype):
    m, p, k, gamma = 8, 3000, 30, 0.123456789
    topology = build_topology(graph, m, mixing="metropolis_hastings", seed=0)
    W = torch.tensor(topology.matrix(0), dtype=dtype)  # a copy: the topology's W is read-only
    receivers, senders = W.nonzero(as_tuple=True)
    edges = (receivers, senders, W[receivers, senders])
    gen = torch.Generator().manual_seed(3)
    copy, mixed, z = (torch.randn(m, p, generator=gen, dtype=dtype) for _ in range(3))
    idx, values = kernels.top_k(torch.randn(m, p, generator=gen, dtype=dtype), k)
    results = []
    # the compiled kernel on one thread and on three (every row alone), then the torch code
    for env, threads in (("", 1), ("", 3), ("torch", 1)):
        monkeypatch.setenv("GOSSIPFL_KERNELS", env)
        monkeypatch.setattr(torch, "get_num_threads", lambda threads=threads: threads)
        monkeypatch.setattr(threads_module, "PARALLEL_NUMEL", 1)
        c, s, c2, s2 = copy.clone(), mixed.clone(), copy.clone(), mixed.clone()
        assert kernels.deliver(idx, values, edges, c, s) is None
        x = kernels.deliver(idx, values, edges, c2, s2, (z, gamma))
        assert torch.equal(bits(c2), bits(c)) and torch.equal(bits(s2), bits(s))
        results.append((c, s, x))
    for fused_t, split_t, torch_t in zip(*results, strict=True):
        assert torch.equal(bits(fused_t), bits(torch_t))
        assert torch.equal(bits(split_t), bits(torch_t))
    c, s, x = results[0]
    dense = torch.zeros(m, p, dtype=dtype).scatter_(1, idx, values)
    assert torch.allclose(c, copy + dense)
    assert torch.allclose(s, mixed + W @ dense, atol=1e-5)
    assert torch.equal(bits(x), bits(torch.sub(s, c).mul_(gamma).add_(z)))


@pytest.mark.slow
def test_radix_selection_is_the_kth_smallest_of_non_negative_floats():
    from gossipfl.compression import _numba as compiled

    @numba.njit
    def kth(a, r):
        return compiled._kth_key(compiled._bits(a), a.shape[0], r)

    rng = np.random.default_rng(0)
    for dtype, uint in ((np.float32, np.uint32), (np.float64, np.uint64)):
        a = np.abs(rng.standard_normal(3001)).astype(dtype)
        a[::7] = a[3]  # ties
        a[5], a[6], a[8] = np.inf, 0.0, np.abs(np.array(-0.0, dtype))
        for r in (0, 1, 2, 1500, 2999, 3000):
            assert kth(a, r) == np.partition(a, r)[r:r + 1].view(uint)[0]
