"""Bad input to the examples (``examples/swiglu.py``, ``moe.py``, ``attention.py``, ``decoder.py``).

Each misuse gives a one-line error naming the function or config field, the parameter and the
offending value (an anchored regex): never a traceback from deep inside numpy, never a result
resized, truncated, wrapped or dropped. A few cases check that valid uses (numpy integers, an
iterator of blocks, ``tile_n=None`` under dynamic tiling) still work.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from examples import attention, decoder, moe, swiglu, traces

SW = swiglu.SwiGLUConfig
SMALL_MOE = moe.SMALL  # 4 experts, top-2
DEC = decoder.SMALL  # 4 experts, top-2, 2 KV heads
KV8 = np.array([3, 5, 7, 2, 9, 1, 4, 6])
CHOICES8 = traces.synthetic_routing(8, 4, 2, seed=1)
DTYPES = (
    "int8, int16, int32, int64, uint8, uint32, uint64, float16, bfloat16, float32, float64, bool"
)


def expect(exc: type[BaseException], message: str):
    return pytest.raises(exc, match="^" + re.escape(message) + "$")


def _case(call, exc, message, id_):
    return pytest.param(call, exc, message, id=id_)


# -- swiglu ----------------------------------------------------------------------------------------

SWIGLU = [
    _case(lambda: SW(batch=0), ValueError, "SwiGLUConfig.batch must be a positive integer, not 0", "cfg-batch0"),
    _case(lambda: SW(batch=-1), ValueError, "SwiGLUConfig.batch must be a positive integer, not -1", "cfg-batch-1"),
    _case(lambda: SW(batch=True), ValueError, "SwiGLUConfig.batch must be a positive integer, not True", "cfg-batch-bool"),
    _case(lambda: SW(hidden=2.0), ValueError, "SwiGLUConfig.hidden must be a positive integer, not 2.0", "cfg-hidden-float"),
    _case(lambda: SW(intermediate="512"), ValueError, "SwiGLUConfig.intermediate must be a positive integer, not '512'", "cfg-inter-str"),
    _case(lambda: SW(batch=np.int64(0)), ValueError, "SwiGLUConfig.batch must be a positive integer, not 0", "cfg-batch-np0"),
    _case(lambda: SW(dtype="float33"), ValueError, f"SwiGLUConfig.dtype must be one of {DTYPES}, not 'float33'", "cfg-dtype"),
    _case(lambda: SW(dtype=3), ValueError, f"SwiGLUConfig.dtype must be one of {DTYPES}, not 3", "cfg-dtype-int"),
    _case(lambda: swiglu.build(SW(), 0, 16), ValueError, "swiglu.build: tile_b must be a positive integer, not 0", "tile_b0"),
    _case(lambda: swiglu.build(SW(), -16, 16), ValueError, "swiglu.build: tile_b must be a positive integer, not -16", "tile_b-16"),
    _case(lambda: swiglu.build(SW(), 16.0, 16), ValueError, "swiglu.build: tile_b must be a positive integer, not 16.0", "tile_b-float"),
    _case(lambda: swiglu.build(SW(), "16", 16), ValueError, "swiglu.build: tile_b must be a positive integer, not '16'", "tile_b-str"),
    _case(lambda: swiglu.build(SW(), 16, 0), ValueError, "swiglu.build: tile_i must be a positive integer, not 0", "tile_i0"),
    _case(lambda: swiglu.build(SW(), 16, None), ValueError, "swiglu.build: tile_i must be a positive integer, not None", "tile_i-none"),
    _case(lambda: swiglu.build(SW(), 128, 16), ValueError, "tiles must divide the layer: batch 64 by tile_b 128, intermediate 512 by tile_i 16", "tile_b-too-big"),
    _case(lambda: swiglu.build("small"), TypeError, "swiglu.build: config must be a SwiGLUConfig, not 'small'", "build-config"),
    _case(lambda: swiglu.inputs(moe.SMALL), TypeError, f"swiglu.inputs: config must be a SwiGLUConfig, not {moe.SMALL!r}", "inputs-config"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "exc", "message"), SWIGLU)
def test_swiglu(call, exc, message):
    with expect(exc, message):
        call()


# -- moe -------------------------------------------------------------------------------------------

MC, MS = moe.MoEConfig, moe.MoESchedule

MOE_CONFIGS = [
    _case(lambda: MC("x", 0, 64, 4, 2), ValueError, "MoEConfig.hidden must be a positive integer, not 0", "hidden0"),
    _case(lambda: MC("x", 16, -64, 4, 2), ValueError, "MoEConfig.intermediate must be a positive integer, not -64", "inter-neg"),
    _case(lambda: MC("x", 16, 64, 4.0, 2), ValueError, "MoEConfig.experts must be a positive integer, not 4.0", "experts-float"),
    _case(lambda: MC("x", 16, 64, 4, "2"), ValueError, "MoEConfig.top_k must be a positive integer, not '2'", "top_k-str"),
    _case(lambda: MC("x", 16, 64, 4, 5), ValueError, "MoEConfig.top_k 5 must not exceed the 4 experts", "top_k>experts"),
    _case(lambda: MC("", 16, 64, 4, 2), ValueError, "MoEConfig.name must be a non-empty string, not ''", "name-empty"),
    _case(lambda: MC(None, 16, 64, 4, 2), ValueError, "MoEConfig.name must be a non-empty string, not None", "name-none"),
    _case(lambda: MC("x", 16, 64, 4, 2, "f32"), ValueError, f"MoEConfig.dtype must be one of {DTYPES}, not 'f32'", "dtype"),
    _case(lambda: MS(tile_f=0), ValueError, "MoESchedule.tile_f must be a positive integer, not 0", "tile_f0"),
    _case(lambda: MS(tile_f=-4), ValueError, "MoESchedule.tile_f must be a positive integer, not -4", "tile_f-neg"),
    _case(lambda: MS(tile_n=0), ValueError, "MoESchedule.tile_n must be a positive integer, not 0", "tile_n0"),
    _case(lambda: MS(tile_n="4"), ValueError, "MoESchedule.tile_n must be a positive integer, not '4'", "tile_n-str"),
    _case(lambda: MS("dynamic", tile_n=0), ValueError, "MoESchedule.tile_n must be a positive integer or None, not 0", "dyn-tile_n0"),
    _case(lambda: MS(regions="2"), ValueError, "MoESchedule.regions must be a positive integer or None, not '2'", "regions-str"),
    _case(lambda: MS(regions=2.0), ValueError, "MoESchedule.regions must be a positive integer or None, not 2.0", "regions-float"),
    _case(lambda: MS(regions=0), ValueError, "MoESchedule.regions must be a positive integer or None, not 0", "regions0"),
    _case(lambda: MS(regions=-2), ValueError, "MoESchedule.regions must be a positive integer or None, not -2", "regions-neg"),
    _case(lambda: MS("adaptive"), ValueError, "tiling must be 'static' or 'dynamic', not 'adaptive'", "tiling"),
    _case(lambda: moe.build(SMALL_MOE, MS(tile_f=48), 8), ValueError, "tile_f 48 must divide the intermediate size 64", "tile_f-divides"),
    _case(lambda: moe.build(SMALL_MOE, MS(regions=3), 8), ValueError, "regions 3 must divide the 4 experts", "regions-divide"),
    _case(lambda: moe.build(SMALL_MOE, MS(), 0), ValueError, "moe.build: batch must be a positive integer, not 0", "batch0"),
    _case(lambda: moe.build(SMALL_MOE, MS(), 8.0), ValueError, "moe.build: batch must be a positive integer, not 8.0", "batch-float"),
    _case(lambda: moe.build(SMALL_MOE, "static", 8), TypeError, "moe.build: schedule must be a MoESchedule, not 'static'", "schedule-str"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "exc", "message"), MOE_CONFIGS)
def test_moe_config_and_schedule(call, exc, message):
    with expect(exc, message):
        call()


# Routing choices that every entry point refuses: (choices, exception, message after the prefix).
BAD_CHOICES = [
    pytest.param(np.array([[0, -1]]), ValueError, ": token 0 selects expert -1, outside [0, 4)", id="negative"),
    pytest.param(np.array([[0, 1], [3, 4]]), ValueError, ": token 1 selects expert 4, outside [0, 4)", id="too-big"),
    pytest.param(np.array([[0, 1], [2, 2]]), ValueError, ": token 1 selects expert(s) twice: [2, 2]", id="duplicate"),
    pytest.param(np.array([[0.0, 1.0]]), ValueError, ": expected an integer [B, top_k] array, got float64 (1, 2)", id="float"),
    pytest.param(np.array([[True, False]]), ValueError, ": expected an integer [B, top_k] array, got bool (1, 2)", id="bool"),
    pytest.param(np.array([0, 1]), ValueError, ": expected an integer [B, top_k] array, got int64 (2,)", id="1-d"),
    pytest.param(np.zeros((0, 2), np.int64), ValueError, ": empty (0 tokens x 2)", id="empty"),
    pytest.param([[0, 1]], TypeError, " must be a numpy integer array [B, top_k], not list", id="list"),
]  # fmt: skip

ROUTING_CALLS = {
    "moe.inputs": lambda c: moe.inputs(SMALL_MOE, c),
    "moe.routing_tensors": lambda c: moe.routing_tensors(SMALL_MOE, c),
    "moe.dim_values": lambda c: moe.dim_values(c, 4),
    "decoder.dim_values": lambda c: decoder.dim_values(DEC, c),
}


@pytest.mark.parametrize("where", ROUTING_CALLS)
@pytest.mark.parametrize(("choices", "exc", "message"), BAD_CHOICES)
def test_bad_routing_choices(where, choices, exc, message):
    with expect(exc, f"{where}: choices{message}"):
        ROUTING_CALLS[where](choices)


@pytest.mark.parametrize("where", ["moe.inputs", "moe.routing_tensors", "decoder.dim_values"])
def test_choices_must_have_top_k_columns(where):
    with expect(ValueError, f"{where}: choices: 3 experts per token, top_k is 2"):
        ROUTING_CALLS[where](np.array([[0, 1, 2]]))


@pytest.mark.parametrize(
    ("data", "suffix"),
    [
        (np.array([[0, 1], [2, -1]]), "token 1 selects expert -1, outside [0, 4)"),
        (np.array([[0, 4]]), "token 0 selects expert 4, outside [0, 4)"),
        (np.array([[3, 3]]), "token 0 selects expert(s) twice: [3, 3]"),
        (np.zeros((0, 2), np.int64), "empty (0 tokens x 2)"),
    ],
)
def test_routing_rule_is_the_trace_loaders(tmp_path, data, suffix):
    """A trace file and the choices ``moe.inputs`` takes break the one rule
    (``traces.check_routing``) alike."""
    path = tmp_path / "r.npz"
    np.savez(path, data=data)
    with expect(traces.TraceError, f"routing trace {path}: {suffix}"):
        traces.load_routing(path, 4)
    config = dataclasses.replace(moe.SMALL, experts=4, top_k=2)
    with expect(ValueError, f"moe.inputs: choices: {suffix}"):
        moe.inputs(config, data)


def test_moe_dim_values_checks_num_experts():
    with expect(ValueError, "moe.dim_values: num_experts must be a positive integer, not 0"):
        moe.dim_values(CHOICES8, 0)


# -- attention -------------------------------------------------------------------------------------

CACHE = []
for _name, _call in (
    ("attention.cache_rows_needed", lambda kv, tile=4: attention.cache_rows_needed(tile, kv)),
    ("attention.fit_cache", lambda kv: attention.fit_cache(attention.SMALL, kv)),
):
    CACHE += [
        _case(lambda c=_call: c([]), ValueError, f"{_name}: kv_lengths must be a non-empty 1-D integer array, got float64 (0,)", f"{_name}-empty"),
        _case(lambda c=_call: c([-5]), ValueError, f"{_name}: KV length -5 is negative", f"{_name}-negative"),
        _case(lambda c=_call: c([3.7]), ValueError, f"{_name}: kv_lengths must be a non-empty 1-D integer array, got float64 (1,)", f"{_name}-float"),
        _case(lambda c=_call: c(np.array([[3, 4]])), ValueError, f"{_name}: kv_lengths must be a non-empty 1-D integer array, got int64 (1, 2)", f"{_name}-2d"),
        _case(lambda c=_call: c([[1, 2], [3]]), ValueError, f"{_name}: kv_lengths must be a non-empty 1-D integer array, got a list that is not one", f"{_name}-ragged"),
    ]  # fmt: skip
CACHE += [
    _case(lambda: attention.cache_rows_needed(0, [3]), ValueError, "attention.cache_rows_needed: kv_tile must be a positive integer, not 0", "kv_tile0"),
    _case(lambda: attention.cache_rows_needed("4", [3]), ValueError, "attention.cache_rows_needed: kv_tile must be a positive integer, not '4'", "kv_tile-str"),
    _case(lambda: attention.fit_cache({"kv_tile": 4, "max_len": 8}, [3]), TypeError, "attention.fit_cache: config must be a dataclass with kv_tile and max_len (AttentionConfig, decoder.DecoderConfig), not {'kv_tile': 4, 'max_len': 8}", "fit_cache-dict"),
    _case(lambda: attention.AttentionConfig(4, 4, 16, dtype="float33"), ValueError, "AttentionConfig.dtype must be a float type, not 'float33'", "config-dtype"),
    _case(lambda: attention.build(attention.SMALL, "coarse", 4, 2, blocks="22"), ValueError, "blocks must be 2 positive sizes summing to batch 4 (coarse only), not '22'", "blocks-str"),
    _case(lambda: attention.build(attention.SMALL, "coarse", 4, 2, blocks=5), ValueError, "blocks must be 2 positive sizes summing to batch 4 (coarse only), not 5", "blocks-int"),
    _case(lambda: attention.build(attention.SMALL, "coarse", 4, 2, blocks=(2.0, 2)), ValueError, "blocks must be 2 positive sizes summing to batch 4 (coarse only), not (2.0, 2)", "blocks-float"),
    _case(lambda: attention.build(attention.SMALL, "coarse", 4, 2, blocks=iter([3, 3])), ValueError, "blocks must be 2 positive sizes summing to batch 4 (coarse only), not (3, 3)", "blocks-iter-sum"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "exc", "message"), CACHE)
def test_attention(call, exc, message):
    with expect(exc, message):
        call()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--regions", "0"], "--regions must be a positive integer, not 0"),
        (["--batch", "0"], "--batch must be a positive integer, not 0"),
        (
            ["--batch", "16", "--regions", "3"],
            "coarse schedule: regions (3) must divide batch (16)",
        ),
        (
            ["--batch", "2", "--regions", "4"],
            "regions (4) must not exceed batch (2): a region would never get a request",
        ),
    ],
)
def test_attention_main_reports_bad_arguments_as_usage_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        attention.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"python -m examples.attention: error: {message}"
    assert not any("Traceback" in line for line in err)


# -- decoder ---------------------------------------------------------------------------------------

DS = decoder.DecoderSchedule

DECODER = [
    _case(lambda: decoder.inputs(DEC, KV8, CHOICES8, regions=3), ValueError, "decoder.inputs: regions 3 must divide batch 8", "inputs-regions3"),
    _case(lambda: decoder.inputs(DEC, KV8, CHOICES8, regions=0), ValueError, "decoder.inputs: regions must be a positive integer, not 0", "inputs-regions0"),
    _case(lambda: decoder.inputs(DEC, KV8, CHOICES8[:4]), ValueError, "decoder.inputs: choices have 4 tokens, kv_lengths 8", "inputs-tokens"),
    _case(lambda: decoder.control_inputs(DEC, KV8, CHOICES8, regions=3), ValueError, "decoder.control_inputs: regions 3 must divide batch 8", "control-regions3"),
    _case(lambda: decoder.control_inputs(DEC, KV8, CHOICES8, regions=0), ValueError, "decoder.control_inputs: regions must be a positive integer, not 0", "control-regions0"),
    _case(lambda: decoder.control_inputs(DEC, KV8, CHOICES8, regions=2.0), ValueError, "decoder.control_inputs: regions must be a positive integer, not 2.0", "control-regions-float"),
    _case(lambda: decoder.control_inputs(DEC, KV8, CHOICES8[:4]), ValueError, "decoder.control_inputs: choices have 4 tokens, kv_lengths 8", "control-tokens"),
    _case(lambda: decoder.control_inputs(DEC, KV8, CHOICES8 - 1), ValueError, f"decoder.control_inputs: choices: token {int(np.argwhere(CHOICES8 == 0)[0][0])} selects expert -1, outside [0, 4)", "control-expert"),
    _case(lambda: decoder.control_inputs(DEC, [], CHOICES8), ValueError, "decoder.control_inputs: kv_lengths must be a non-empty 1-D integer array, got float64 (0,)", "control-kv-empty"),
    _case(lambda: decoder.inputs(DEC, KV8 + 30, CHOICES8), ValueError, "decoder.inputs: KV length 33 outside [0, 31] (max_len 32, room for the new token)", "inputs-kv-long"),
    _case(lambda: decoder.inputs(moe.SMALL, KV8, CHOICES8), TypeError, f"decoder.inputs: config must be a DecoderConfig, not {moe.SMALL!r}", "inputs-config"),
    _case(lambda: decoder.dim_values(DEC, CHOICES8, 3), ValueError, "decoder.dim_values: moe_regions 3 must divide the 4 experts", "dims-moe_regions3"),
    _case(lambda: decoder.dim_values(DEC, CHOICES8, 5), ValueError, "decoder.dim_values: moe_regions 5 must divide the 4 experts", "dims-moe_regions5"),
    _case(lambda: decoder.dim_values(DEC, CHOICES8, 0), ValueError, "decoder.dim_values: moe_regions must be a positive integer or None, not 0", "dims-moe_regions0"),
    _case(lambda: decoder.dim_values(DEC, CHOICES8, -2), ValueError, "decoder.dim_values: moe_regions must be a positive integer or None, not -2", "dims-moe_regions-neg"),
    _case(lambda: DS(tiling="adaptive"), ValueError, "DecoderSchedule.tiling must be 'static' or 'dynamic', not 'adaptive'", "sched-tiling"),
    _case(lambda: DS(tile_n=0), ValueError, "DecoderSchedule.tile_n must be a positive integer, not 0", "sched-tile_n0"),
    _case(lambda: DS(tile_f="64"), ValueError, "DecoderSchedule.tile_f must be a positive integer, not '64'", "sched-tile_f-str"),
    _case(lambda: DS(moe_regions=0), ValueError, "DecoderSchedule.moe_regions must be a positive integer or None, not 0", "sched-moe_regions0"),
    _case(lambda: DS(moe_regions=2.0), ValueError, "DecoderSchedule.moe_regions must be a positive integer or None, not 2.0", "sched-moe_regions-float"),
    _case(lambda: DS(regions=0), ValueError, "DecoderSchedule.regions must be a positive integer, not 0", "sched-regions0"),
    _case(lambda: DS(distributor="central"), ValueError, "DecoderSchedule.distributor must be 'own' or 'shared', not 'central'", "sched-distributor"),
    _case(lambda: DS(distributor="shared"), ValueError, "DecoderSchedule.distributor 'shared' needs attention 'interleaved', not 'dynamic'", "sched-shared-dynamic"),
    _case(lambda: decoder.build(DEC, DS(), 0), ValueError, "decoder.build: batch must be a positive integer, not 0", "build-batch0"),
    _case(lambda: decoder.build(DEC, DS(moe_regions=3), 8), ValueError, "decoder.build: moe_regions 3 must divide the 4 experts", "build-moe_regions3"),
    _case(lambda: decoder.build(DEC, "dynamic", 8), TypeError, "decoder.build: schedule must be a DecoderSchedule, not 'dynamic'", "build-schedule"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "exc", "message"), DECODER)
def test_decoder(call, exc, message):
    with expect(exc, message):
        call()


# -- valid uses still work -------------------------------------------------------------------------


def test_numpy_integers_are_accepted_as_sizes():
    c = SW(batch=np.int64(16), hidden=np.int32(32), intermediate=np.int64(64))
    assert c == SW(batch=16, hidden=32, intermediate=64) and type(c.batch) is int
    assert swiglu.build(c, np.int64(4), np.int32(8)).name == "swiglu_b4_i8"
    s = MS("static", tile_n=np.int64(2), tile_f=np.int64(16), regions=np.int64(2))
    assert s == MS("static", 2, 16, regions=2) and type(s.regions) is int
    assert moe.build(SMALL_MOE, s, np.int64(8)).name == "moe_small_static2_tm2"
    assert DS(regions=np.int64(2), moe_regions=np.int64(2)) == DS(regions=2, moe_regions=2)
    assert attention.cache_rows_needed(np.int64(4), np.array([3, 8], np.int32)) == 12
    g = attention.build(attention.SMALL, "interleaved", np.int64(4), np.int64(2))
    assert g.name == "attention_interleaved"


def test_dynamic_tiling_takes_no_token_tile():
    """``bench/validate.py`` passes ``tile_n=None`` with dynamic tiling, which ignores it."""
    assert (
        moe.build(SMALL_MOE, MS("dynamic", tile_n=None, tile_f=16), 8).name == "moe_small_dynamic"
    )


def test_valid_routing_passes_unchanged():
    choices = CHOICES8.astype(np.int32)
    tensors = moe.routing_tensors(SMALL_MOE, choices)
    assert tensors["token_sel"].sum(axis=1).tolist() == [2] * 8
    assert (tensors["slot_sel"].argmax(axis=1) == CHOICES8.reshape(-1)).all()
    counts = np.bincount(CHOICES8.reshape(-1), minlength=4)
    dims = moe.dim_values(choices, 4)
    assert [dims[f"route_n{e:03d}"] for e in range(4)] == counts.tolist()
    merged = decoder.dim_values(DEC, choices, 2)
    assert merged["moe_merge0_rows"] == counts[:2].max()
    assert merged["moe_merge1_rows"] == counts[2:].max()


@pytest.mark.parametrize("regions", [1, 2, 4, 8])
def test_decoder_inputs_address_every_token(regions):
    """Every token's QKV rows are stored, whatever regions divides the batch."""
    mem = decoder.control_inputs(DEC, KV8, CHOICES8, regions=regions)
    k_rows = sorted(int(a) // DEC.kv_heads for a in mem["qkv_addr_k"].reshape(-1))
    assert k_rows == sorted(list(range(8)) * DEC.kv_heads)


def test_blocks_may_be_an_iterator():
    by_tuple = attention.build(attention.SMALL, "coarse", 8, 2, blocks=(5, 3))
    by_iter = attention.build(attention.SMALL, "coarse", 8, 2, blocks=iter([5, 3]))
    assert [(k, n.kind) for k, n in by_iter.nodes.items()] == [
        (k, n.kind) for k, n in by_tuple.nodes.items()
    ]
    assert by_iter.nodes["queue0"].outputs[0].shape == by_tuple.nodes["queue0"].outputs[0].shape


def test_fit_cache_pads_to_the_longest_request():
    assert attention.fit_cache(attention.SMALL, [3, 40]).max_len == 44
    assert attention.fit_cache(attention.SMALL, [3]).max_len == attention.SMALL.max_len
    assert attention.fit_cache(DEC, np.array([100])).max_len == 104
