"""Compressors: the wire round trip, the widths, each Q's definition, unbiasedness, per-row
independence, float64, and the config errors."""

import math
import struct

import pytest
import torch

from gossipfl.common.rng import client_keys
from gossipfl.compression import (
    COMPRESSORS,
    QSGD,
    Identity,
    RandK,
    Sign,
    TopK,
    build_compressor,
    pack_bits,
    unpack_bits,
)
from gossipfl.errors import GossipflError

ALL = [Identity(), TopK(k=3), TopK(fraction=0.3), RandK(k=3), RandK(fraction=0.5, scaled=False),
       QSGD(), QSGD(levels=1), QSGD(levels=7), Sign()]
SIZES = [1, 7, 8, 100, 1000]


def ids(c):
    return f"{c.name}-{'-'.join(f'{k}={v}' for k, v in vars(c).items())}"


def keys_for(n, seed=0):
    return client_keys(seed, range(n), "compress", 0)


def bits(t):
    """The float tensor's bit patterns (so -0.0 != 0.0 and NaN == NaN)."""
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int64)


# -- the contract ----------------------------------------------------------------------------
@pytest.mark.parametrize("comp", ALL, ids=ids)
@pytest.mark.parametrize("n", [0, 1, 4])
@pytest.mark.parametrize("numel", SIZES)
def test_decode_of_encode_is_compress_bitwise(comp, n, numel):
    gen = torch.Generator().manual_seed(numel * 10 + n)
    x = torch.randn(n, numel, generator=gen)
    x[:, ::5] = 0.0  # zeros and a negative zero exercise sign(0) and zero levels
    x[:1, -1] = -0.0
    keys = keys_for(n)
    payload = comp.encode(x, keys)
    assert payload.dtype == torch.uint8
    assert payload.shape == (n, comp.width(numel))
    q = comp.compress(x, keys)
    assert q.dtype == torch.float32 and q.shape == x.shape
    assert torch.equal(bits(comp.decode(payload, keys, numel)), bits(q))


@pytest.mark.parametrize("comp", ALL, ids=ids)
def test_zero_rows_round_trip(comp):
    x, keys = torch.zeros(2, 9), keys_for(2)
    q = comp.compress(x, keys)
    assert torch.equal(q, x)
    assert torch.equal(bits(comp.decode(comp.encode(x, keys), keys, 9)), bits(q))


@pytest.mark.parametrize("numel", SIZES)
def test_widths_by_hand(numel):
    def ceil8(b):
        return math.ceil(b / 8)

    assert Identity().width(numel) == 4 * numel
    k = min(3, numel)
    assert TopK(k=3).width(numel) == 4 * k + min(4 * k, ceil8(numel))
    assert RandK(k=3).width(numel) == 4 * k
    assert QSGD(levels=4).width(numel) == 4 + ceil8(numel * (1 + 3))
    assert QSGD(levels=1).width(numel) == 4 + ceil8(numel * 2)
    assert QSGD(levels=7).width(numel) == 4 + ceil8(numel * 4)
    assert QSGD(levels=8).width(numel) == 4 + ceil8(numel * 5)
    assert Sign().width(numel) == 4 + ceil8(numel)


def test_top_k_width_picks_the_cheaper_index_format():
    assert TopK(k=3).width(1000) == 12 + 12  # int32 indices
    assert TopK(k=300).width(1000) == 1200 + 125  # a bitmap
    assert TopK(k=32).width(1000) == 128 + 125
    assert TopK(k=31).width(1000) == 124 + 124  # a tie: same bytes either way
    assert TopK(fraction=0.01).width(1000) == 40 + 40
    assert TopK(fraction=1e-9).width(1000) == 4 + 4  # at least one coordinate
    assert TopK(fraction=0.07).k_of(100) == 7  # 0.07·100 = 7.000000000000001 in floats
    assert TopK(k=50).k_of(7) == 7


def test_wire_bytes_by_hand():
    x = torch.tensor([[-1.0, 2.0, 3.0]])
    assert Sign().encode(x, None).tolist() == [list(struct.pack("<f", 2.0)) + [0b001]]
    y = torch.zeros(1, 100)
    y[0, 70] = -5.0
    assert TopK(k=1).encode(y, None).tolist() == [list(struct.pack("<fi", -5.0, 70))]
    assert Identity().encode(x, None).tolist() == [list(struct.pack("<3f", -1.0, 2.0, 3.0))]
    # QSGD, s = 1, x = (0, -1): the norm 1, codes (ξ << 1) | negative = 0b00, 0b11, 2 bits each
    assert QSGD(levels=1).encode(torch.tensor([[0.0, -1.0]]), keys_for(1)).tolist() == [
        list(struct.pack("<f", 1.0)) + [0b1100]]


def test_pack_bits_order_and_round_trip():
    assert pack_bits(torch.tensor([[1, 0, 0, 0, 0, 0, 0, 0, 1]]), 1).tolist() == [[1, 1]]
    assert pack_bits(torch.tensor([[1, 2]]), 2).tolist() == [[1 + 8]]  # first value lowest
    assert pack_bits(torch.tensor([[5, 3, 7]]), 3).tolist() == [[0b11011101, 0b1]]
    gen = torch.Generator().manual_seed(1)
    for b in (1, 2, 3, 5, 8, 11):
        for numel in (1, 7, 8, 13):
            v = torch.randint(0, 2 ** b, (3, numel), generator=gen)
            packed = pack_bits(v, b)
            assert packed.dtype == torch.uint8
            assert packed.shape == (3, math.ceil(numel * b / 8))
            assert torch.equal(unpack_bits(packed, b, numel), v)


# -- each compressor's definition ------------------------------------------------------------
def test_identity_is_exact():
    x = torch.randn(3, 10)
    assert torch.equal(Identity().compress(x, None), x)


def test_top_k_keeps_exactly_the_k_largest_magnitudes():
    x = torch.randn(5, 50, generator=torch.Generator().manual_seed(2))
    q = TopK(k=4).compress(x, None)
    assert ((q != 0).sum(dim=1) == 4).all()
    kept = q != 0
    assert torch.equal(q[kept], x[kept])
    smallest_kept = torch.where(kept, x.abs(), torch.inf).min(dim=1).values
    largest_dropped = torch.where(kept, -torch.inf, x.abs()).max(dim=1).values
    assert (smallest_kept > largest_dropped).all()


def test_sign_scale_is_the_mean_magnitude():
    x = torch.randn(4, 33)
    x[0, 3] = 0.0
    q = Sign().compress(x, None)
    scale = x.abs().mean(dim=1, keepdim=True)
    assert torch.equal(q.abs(), scale.expand_as(q))
    assert torch.equal(q < 0, x < 0)  # sign(0) = +1
    assert q[0, 3] > 0


@pytest.mark.parametrize("s", [1, 2, 4, 9])
def test_qsgd_values_are_norm_times_levels_over_s(s):
    x = torch.randn(6, 40, dtype=torch.float64)
    q = QSGD(levels=s).compress(x, keys_for(6))
    norm = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    levels = q * s / norm
    assert torch.allclose(levels, levels.round(), atol=1e-9)
    assert levels.abs().max() <= s
    assert ((q == 0) | (torch.sign(q) == torch.sign(x))).all()
    # ξ is ⌊s|x|/‖x‖⌋ or one more
    low = (s * x.abs() / norm).floor()
    assert ((levels.abs().round() - low).abs() <= 1).all()


def test_rand_k_keeps_k_coordinates_chosen_by_the_key_alone():
    x = torch.randn(3, 20)
    keys = keys_for(3)
    q = RandK(k=5, scaled=False).compress(x, keys)
    kept = q != 0
    assert (kept.sum(dim=1) == 5).all()
    assert torch.equal(q[kept], x[kept])
    # the same coordinates for another x and for float64
    x64 = torch.randn(3, 20, dtype=torch.float64)
    q2 = RandK(k=5).compress(x64, keys)
    assert torch.equal(q2 != 0, kept)
    assert torch.equal(q2[kept], x64[kept] * (20 / 5))  # scaled by P/k
    other = RandK(k=5).compress(x, keys_for(3, seed=1)) != 0  # other keys, other coordinates
    assert (other.sum(dim=1) == 5).all() and not torch.equal(other, kept)


# -- unbiasedness ----------------------------------------------------------------------------
# The mean of N independent draws of Q(x)_j has standard deviation sqrt(Var_j / N). With
# c = 5 a correct compressor fails a coordinate with probability about 6e-7 (normal tail;
# N = 20000 makes the CLT accurate), so < 1e-5 over all coordinates, and with the fixed seed
# the draw is the same each run anyway; a bias larger than 5 standard deviations (here a few
# percent of |x_j|) fails. The keys are 20000 clients' keys of one round: rows of one batch.
N, C = 20000, 5.0


def _mean_of_draws(comp, x):
    rows = x.expand(N, -1).contiguous()
    return comp.compress(rows, client_keys(7, range(N), "compress", 3)).mean(dim=0)


@pytest.mark.slow
def test_rand_k_scaled_is_unbiased_and_unscaled_is_biased_by_k_over_p():
    x = torch.linspace(-2.0, 3.0, 10, dtype=torch.float64)
    p, k = 10, 3
    mean = _mean_of_draws(RandK(k=k), x)
    var = x ** 2 * (p / k - 1)
    assert ((mean - x).abs() <= C * (var / N).sqrt() + 1e-12).all()
    mean = _mean_of_draws(RandK(k=k, scaled=False), x)
    var = x ** 2 * (k / p) * (1 - k / p)  # Bernoulli(k/P) times x_j
    assert ((mean - k / p * x).abs() <= C * (var / N).sqrt() + 1e-12).all()
    assert ((mean - x).abs() > 0.5 * x.abs()).sum() == (x != 0).sum()
    assert RandK(k=k).unbiased and not RandK(k=k, scaled=False).unbiased


@pytest.mark.parametrize("s", [1, 4])
def test_qsgd_is_unbiased(s):
    x = torch.tensor([0.3, -1.2, 2.5, 0.0, -0.05, 0.9, 1.7, -2.2], dtype=torch.float64)
    mean = _mean_of_draws(QSGD(levels=s), x)
    norm = torch.linalg.vector_norm(x)
    r = s * x.abs() / norm
    prob = r - r.floor()
    var = (norm / s) ** 2 * prob * (1 - prob)  # the exact Bernoulli variance
    assert ((mean - x).abs() <= C * (var / N).sqrt() + 1e-12).all()


# -- rows are independent --------------------------------------------------------------------
@pytest.mark.parametrize("comp", ALL, ids=ids)
def test_a_row_depends_only_on_itself_and_its_key(comp):
    x = torch.randn(2, 37)
    keys = keys_for(2)
    alone = comp.compress(x[:1], keys[:1])
    assert torch.equal(bits(comp.compress(x, keys)[:1]), bits(alone))
    assert torch.equal(comp.encode(x, keys)[:1], comp.encode(x[:1], keys[:1]))
    swapped = comp.compress(x.flip(0), keys.flip(0))
    assert torch.equal(bits(swapped[1:]), bits(alone))


# -- float64 ---------------------------------------------------------------------------------
@pytest.mark.parametrize("comp", ALL, ids=ids)
def test_only_keyed_compressors_depend_on_the_keys(comp):
    """keyed False: the simulator passes no keys, so Q, the wire and its decoding must not
    change with them; keyed True: other keys give another Q."""
    x = torch.randn(5, 200, generator=torch.Generator().manual_seed(0))
    results = [(comp.compress(x, keys), comp.decode(comp.encode(x, keys), keys, 200))
               for keys in (keys_for(5, 0), keys_for(5, 1), None)
               if keys is not None or not comp.keyed]
    same = [torch.equal(bits(a), bits(b)) for a, b in zip(results[0], results[1], strict=True)]
    assert all(same) != comp.keyed
    if not comp.keyed:
        assert all(torch.equal(bits(a), bits(b)) for a, b in zip(results[0], results[2],
                                                                  strict=True))


@pytest.mark.parametrize("comp", ALL, ids=ids)
def test_float64_is_computed_in_float64(comp):
    x = torch.randn(3, 50, dtype=torch.float64)
    q = comp.compress(x, keys_for(3))
    assert q.dtype == torch.float64
    decoded = comp.decode(comp.encode(x, keys_for(3)), keys_for(3), 50, torch.float64)
    assert decoded.dtype == torch.float64
    assert torch.allclose(decoded, q, rtol=1e-6, atol=1e-6)  # the wire holds float32


def test_float64_values_are_not_rounded_to_float32():
    x = torch.randn(3, 50, dtype=torch.float64)
    keys = keys_for(3)
    q = TopK(k=7).compress(x, keys)
    kept = q != 0
    assert torch.equal(q[kept], x[kept])
    assert not torch.equal(x[kept], x[kept].float().double())  # the test could tell
    assert torch.equal(Sign().compress(x, None).abs(), x.abs().mean(1, keepdim=True).expand(3, 50))
    q = QSGD(levels=4).compress(x, keys)
    norm = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    levels = q * 4 / norm
    assert (levels - levels.round()).abs().max() < 1e-12  # a float32 norm would miss by ~1e-7


# -- devices ---------------------------------------------------------------------------------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("comp", ALL, ids=ids)
def test_cuda_matches_the_contract_and_the_cpu_selection(comp):
    x = torch.randn(4, 1000)
    x[:, ::5] = 0.0
    keys = keys_for(4)
    xc, kc = x.cuda(), keys.cuda()
    payload = comp.encode(xc, kc)
    assert payload.device.type == "cuda" and payload.shape == (4, comp.width(1000))
    q = comp.compress(xc, kc)
    assert q.device.type == "cuda"
    assert torch.equal(bits(comp.decode(payload, kc, 1000)), bits(q))
    assert torch.equal(q.cpu() != 0, comp.compress(x, keys) != 0)
    assert torch.allclose(q.cpu(), comp.compress(x, keys), rtol=1e-5, atol=1e-6)


# -- the config ------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, cls", [
    ({"compressor": "identity"}, Identity),
    ({"compressor": "top_k", "fraction": 0.01}, TopK),
    ({"compressor": "top_k", "k": 10}, TopK),
    ({"compressor": "rand_k", "k": 2.0, "scaled": False}, RandK),
    ({"compressor": "qsgd"}, QSGD),
    ({"compressor": "qsgd", "levels": 16}, QSGD),
    ({"compressor": "sign"}, Sign),
])
def test_build_compressor_builds_valid_specs(spec, cls):
    comp = build_compressor(spec)
    assert type(comp) is cls and COMPRESSORS[comp.name] is cls


def test_build_compressor_params():
    assert build_compressor({"compressor": "qsgd"}).levels == 4
    comp = build_compressor({"compressor": "rand_k", "k": 2.0, "scaled": False})
    assert comp.k == 2 and isinstance(comp.k, int) and not comp.scaled and not comp.unbiased


@pytest.mark.parametrize("spec, words", [
    ({"compressor": "topk", "k": 3}, ["topology.compression.compressor", "'topk'",
                                      "did you mean 'top_k'"]),
    ({"k": 3}, ["topology.compression.compressor", "missing", "top_k"]),
    ({"compressor": "top_k", "k": 3, "fraction": 0.1},
     ["topology.compression", "k=3", "fraction=0.1", "exactly one"]),
    ({"compressor": "rand_k"}, ["topology.compression", "exactly one", "neither"]),
    ({"compressor": "top_k", "fraction": 0}, ["topology.compression.fraction", "got 0."]),
    ({"compressor": "top_k", "fraction": 1.5}, ["topology.compression.fraction", "(0, 1]",
                                                "got 1.5."]),
    ({"compressor": "top_k", "fraction": True}, ["topology.compression.fraction", "True"]),
    ({"compressor": "top_k", "k": 0}, ["topology.compression.k", "integer >= 1", "got 0."]),
    ({"compressor": "top_k", "k": 2.5}, ["topology.compression.k", "got 2.5."]),
    ({"compressor": "rand_k", "k": "x"}, ["topology.compression.k", "got 'x'."]),
    ({"compressor": "rand_k", "k": 1, "scaled": "yes"}, ["topology.compression.scaled",
                                                         "'yes'"]),
    ({"compressor": "qsgd", "levels": 0}, ["topology.compression.levels", "got 0."]),
    ({"compressor": "qsgd", "level": 3}, ["topology.compression.level", "value 3",
                                          "did you mean 'levels'", "allowed: levels"]),
    ({"compressor": "sign", "k": 3}, ["topology.compression.k", "value 3", "allowed: none"]),
    ("top_k", ["topology.compression", "mapping", "'top_k'"]),
])
def test_build_compressor_errors_name_the_key_and_value(spec, words):
    with pytest.raises(GossipflError) as err:
        build_compressor(spec)
    message = str(err.value)
    for word in words:
        assert word in message, (word, message)
    assert message.endswith(".") and "\n" not in message


def test_build_compressor_uses_the_given_key():
    with pytest.raises(GossipflError, match=r"^algorithm\.compress\.k: "):
        build_compressor({"compressor": "top_k", "k": -1}, key="algorithm.compress")
