"""Memory races (step_lang.races): off-chip accesses that no stream orders are refused by the
interpreter and the simulator alike, and accesses that streams order never are."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sim import PaperProfile, simulate
from sim.profiles import RtlProfile
from step_hw.config import HwConfig
from step_lang import (
    Accum,
    Expand,
    Flatten,
    Graph,
    LinearOffChipLoad,
    LinearOffChipStore,
    Map,
    Promote,
    RandomOffChipLoad,
    RandomOffChipStore,
    RepeatStatic,
    Sink,
    Source,
    StepRaceError,
    StreamType,
    Tile,
    interpret,
    numerics,
    regular,
)
from step_lang.races import RaceCheck, memory_accessors
from step_lang.tokens import DONE

HW = numerics.functions(HwConfig())  # hardware arithmetic: the rtl profile times the graphs
N_TILES = 4  # tensor x: N_TILES tiles of 4x4, stacked


def ADDR(n: str) -> StreamType:
    """``n`` addresses (a dynamic-regular dimension)."""
    return StreamType(Tile("int32", 1, 1), (regular(n),))


def TILES(n: str) -> StreamType:
    """``n`` 4x4 float tiles."""
    return StreamType(Tile("int16", 4, 4), (regular(n),))


RUNNERS = {
    "interpreter": lambda g, m, i: interpret(g, m, inputs=i),
    "paper profile": lambda g, m, i: simulate(g, m, profile=PaperProfile(), inputs=i),
    "rtl profile": lambda g, m, i: simulate(g, m, profile=RtlProfile(), inputs=i),
}


def _addresses(values: list[int]) -> list:
    return [np.array([[v]], dtype=np.int32) for v in values] + [DONE]


def _tiles(n: int, value: float) -> list:
    return [np.full((4, 4), value, np.int16) for _ in range(n)] + [DONE]


def _memory(**addresses: list[int]) -> dict[str, np.ndarray]:
    """``x`` numbered by tile, and one address tensor per keyword (``[n, 1]`` int64)."""
    mem = {"x": np.repeat(np.arange(N_TILES, dtype=np.int16), 16).reshape(-1, 4)}
    for name, values in addresses.items():
        mem[name] = np.array(values, np.int32).reshape(-1, 1)
    return mem


def _tokens(result, name: str) -> list:
    """A stream's tokens from an interpreter or simulator result."""
    return result.streams[name]


def _gate(acks, name: str):
    """A ``[1]`` stream whose one token leaves once every ack arrived (their count)."""
    flat = acks
    if len(acks.shape) > 1:
        flat = Flatten(acks, 0, len(acks.shape) - 1, name=f"{name}_flat").out
    return Accum(
        Promote(flat, name=f"{name}_all").out, fn=numerics.accum_count("int16"), rank=1, name=name
    ).out


def _later_addresses(g: Graph, name: str, n: int, after=None):
    """``[n]`` addresses read from tensor ``name``; with ``after``, only once it arrived."""
    t = g.tensor(name, (n, 1), "int32")
    out = LinearOffChipLoad(t, tile=(1, 1), out_shape=(n,), ref=after, name=f"{name}_load").out
    return Flatten(out, 0, 1, name=f"{name}_flat").out


def two_stores(n_b: int, ordered: bool) -> Graph:
    """Store ``a`` writes tiles of ``x`` at addresses from a Source; store ``b`` writes ``n_b``
    tiles at addresses from tensor ``b_addr``, read (with ``ordered``) once ``a`` acknowledged
    all its writes."""
    g = Graph("two_stores")
    x = g.tensor("x", (4 * N_TILES, 4), "int16")
    a_addr = Source(g, ADDR("na"), name="a_addr").out
    a = RandomOffChipStore(a_addr, Source(g, TILES("na"), name="a_data").out, x, name="a").out
    after = _gate(a, "a_done") if ordered else None
    if not ordered:
        Sink(a, name="a_ack")
    b_addr = _later_addresses(g, "b_addr", n_b, after)
    b_data = Source(g, StreamType(Tile("int16", 4, 4), (n_b,)), name="b_data").out
    Sink(RandomOffChipStore(b_addr, b_data, x, name="b").out, name="b_ack")
    return g


def store_then_load(n_c: int, ordered: bool, load_tile: tuple[int, int] = (4, 4)) -> Graph:
    """Store ``a`` writes tiles of ``x``; load ``c`` reads ``n_c`` tiles of ``load_tile`` at
    addresses from tensor ``c_addr`` (with ``ordered``, once ``a`` acknowledged its writes)."""
    g = Graph("store_then_load")
    x = g.tensor("x", (4 * N_TILES, 4), "int16")
    a = RandomOffChipStore(
        Source(g, ADDR("na"), name="a_addr").out,
        Source(g, TILES("na"), name="a_data").out,
        x,
        name="a",
    ).out
    after = _gate(a, "a_done") if ordered else None
    if not ordered:
        Sink(a, name="a_ack")
    c_addr = _later_addresses(g, "c_addr", n_c, after)
    Sink(RandomOffChipLoad(c_addr, x, tile=load_tile, name="c").out, name="c_out")
    return g


def load_then_store(in_place: bool) -> Graph:
    """Load ``c`` reads tiles of ``x``; store ``d`` writes tiles of ``x``: the loaded tiles
    doubled (``in_place``: the store waits for the read) or tiles from a Source."""
    g = Graph("load_then_store")
    x = g.tensor("x", (4 * N_TILES, 4), "int16")
    loaded = RandomOffChipLoad(
        Source(g, ADDR("nc"), name="c_addr").out, x, tile=(4, 4), name="c"
    ).out
    if in_place:
        data = Map(loaded, loaded, fn=HW.add, name="twice").out
    else:
        Sink(loaded, name="c_out")
        data = Source(g, TILES("nd"), name="d_data").out
    Sink(RandomOffChipStore(Source(g, ADDR("nd"), name="d_addr").out, data, x, name="d").out)
    return g


def round_trip(n_c: int) -> Graph:
    """Both orders in one graph: store ``a`` writes tiles of ``x``; once it acknowledged them
    all, load ``c`` reads ``n_c`` tiles at addresses from tensor ``c_addr``; store ``d`` writes
    each tile ``c`` read, doubled, back where it came from (its addresses, from tensor
    ``d_addr``, are read once ``a`` is done too)."""
    g = Graph("round_trip")
    x = g.tensor("x", (4 * N_TILES, 4), "int16")
    a = RandomOffChipStore(
        Source(g, ADDR("na"), name="a_addr").out, Source(g, TILES("na"), name="a_data").out, x,
        name="a",
    ).out  # fmt: skip
    after = _gate(a, "a_done")
    loaded = RandomOffChipLoad(_later_addresses(g, "c_addr", n_c, after), x, tile=(4, 4), name="c")
    twice = Map(loaded.out, loaded.out, fn=HW.add, name="twice").out
    d_addr = _later_addresses(g, "d_addr", n_c, after)
    Sink(RandomOffChipStore(d_addr, twice, x, name="d").out, name="d_ack")
    return g


# -- which tensors are watched ---------------------------------------------------------------------


def test_only_tensors_a_store_shares_are_watched():
    assert set(memory_accessors(two_stores(1, False))) == {"x"}  # the address tensor: one load
    g = Graph("copy")
    x, y = g.tensor("x", (4, 4), "int16"), g.tensor("y", (4, 4), "int16")
    LinearOffChipStore(LinearOffChipLoad(x, tile=(4, 4), name="ld").out, y, name="st")
    assert memory_accessors(g) == {}
    assert RaceCheck.for_graph(g) is None  # nothing to watch: no bookkeeping at all


# -- unordered accesses raise, in every reader -----------------------------------------------------


@pytest.mark.parametrize("reader", RUNNERS)
def test_two_unordered_stores_to_one_tile_race(reader):
    g = two_stores(1, ordered=False)
    inputs = {"a_addr": _addresses([0, 2]), "a_data": _tiles(2, 7.0), "b_data": _tiles(1, 9.0)}
    with pytest.raises(StepRaceError) as err:
        RUNNERS[reader](g, _memory(b_addr=[2]), inputs)
    msg = str(err.value)
    assert "tile 2 (4x4 tiles) of tensor 'x'" in msg
    assert "no stream orders the two writes: the tensor's final value depends on timing" in msg
    # whichever wrote first, the other names it
    assert msg.startswith(("RandomOffChipStore 'a': writes", "RandomOffChipStore 'b': writes"))
    assert "also writes" in msg and "\n" not in msg


@pytest.mark.parametrize("reader", RUNNERS)
def test_a_load_unordered_with_a_store_races_either_way(reader):
    inputs = {"a_addr": _addresses([3]), "a_data": _tiles(1, 7.0)}
    with pytest.raises(StepRaceError, match=r"of tensor 'x', which Random") as err:
        RUNNERS[reader](store_then_load(2, ordered=False), _memory(c_addr=[1, 3]), inputs)
    msg = str(err.value)
    read_after_write = "RandomOffChipLoad 'c': reads tile 3 (4x4 tiles)" in msg
    write_after_read = "RandomOffChipStore 'a': writes tile 3 (4x4 tiles)" in msg
    assert read_after_write or write_after_read, msg
    if read_after_write:
        assert "RandomOffChipStore 'a' writes, and no stream carries that write's ack" in msg
    else:
        assert "RandomOffChipLoad 'c' reads, and no stream carries that read's tile" in msg


@pytest.mark.parametrize("reader", RUNNERS)
def test_a_store_unordered_with_an_earlier_read_races(reader):
    inputs = {
        "c_addr": _addresses([1]),
        "d_addr": _addresses([1]),
        "d_data": _tiles(1, 5.0),
    }
    with pytest.raises(StepRaceError, match=r"'d': writes tile 1 .* 'c' reads|'c': reads tile 1"):
        RUNNERS[reader](load_then_store(in_place=False), _memory(), inputs)


@pytest.mark.parametrize("reader", RUNNERS)
def test_a_write_that_waits_for_an_earlier_read_only_races_with_the_later_one(reader):
    """Load ``c`` reads tiles 0 then 1; each tile, repeated twice, is written by ``d`` to
    tiles 1, 3, 0, 2: d's first write (tile 1) waits only for the read of tile 0, so it races
    with the read of tile 1, even where a block already holds tile 1 when it sends the copy of
    tile 0 (the rtl profile's RepeatStatic)."""
    g = Graph("repeat_back")
    x = g.tensor("x", (4 * N_TILES, 4), "int16")
    loaded = RandomOffChipLoad(Source(g, ADDR("nc"), name="c_addr").out, x, tile=(4, 4), name="c")
    twice = RepeatStatic(loaded.out, 2, name="copies").out
    d_addr = Source(g, StreamType(Tile("int32", 1, 1), (regular("nc"), 2)), name="d_addr").out
    Sink(RandomOffChipStore(d_addr, twice, x, name="d").out, name="d_ack")
    inputs = {"c_addr": _addresses([0, 1]), "d_addr": [[np.array([[a]], np.int32) for a in pair]
                                                       for pair in ((1, 3), (0, 2))]}  # fmt: skip
    with pytest.raises(StepRaceError, match=r"tile 1 \(4x4 tiles\)"):
        RUNNERS[reader](g, _memory(), inputs)
    inputs["d_addr"] = [[np.array([[a]], np.int32) for a in pair] for pair in ((0, 3), (1, 2))]
    got = RUNNERS[reader](g, _memory(), inputs)  # each write after the read of its tile
    assert got.memory["x"][::4, 0].tolist() == [0, 1, 1, 0]


@pytest.mark.parametrize("reader", RUNNERS)
def test_a_stop_taken_whenever_it_comes_orders_nothing(reader):
    """Load ``c`` sends tiles 0 and 1 of one fetch block; an Expand sends each over a
    reference and takes the element's closing stop whenever it arrives, which a Promote sends
    only once it has tile 1. Store ``d`` writes the first copy (tile 0's) to tile 1: the write
    waits for tile 0 only and races with the read of tile 1 in every reader, whether or not
    the stop came before the copy left (found by tests/test_random_graphs.py, where the
    interpreter's Expand took it first and ordered the write after the read)."""
    g = Graph("expand_back")
    x = g.tensor("x", (4, 2 * 4), "int16")
    loaded = RandomOffChipLoad(
        Source(g, ADDR("nc"), name="c_addr").out, x, tile=(4, 4), fetch=(1, 2), name="c"
    ).out
    copies = RepeatStatic(loaded, 1, name="copies").out
    each = Expand(Promote(loaded, 0, name="lift").out, copies, 1, name="each").out
    d_addr = Source(g, StreamType(Tile("int32", 1, 1), (1, 1, 2, 1)), name="d_addr").out
    Sink(RandomOffChipStore(d_addr, each, x, name="d").out, name="d_ack")
    memory = {"x": np.repeat(np.arange(2, dtype=np.int16), 4)[None].repeat(4, 0).reshape(4, 8)}

    def inputs(first: int, second: int) -> dict:
        return {"c_addr": _addresses([0]),
                "d_addr": [[[[np.array([[first]], np.int32)], [np.array([[second]], np.int32)]]]]}  # fmt: skip

    with pytest.raises(StepRaceError, match=r"'d': writes tile 1 .* 'c' reads|'c': reads tile 1"):
        RUNNERS[reader](g, memory, inputs(1, 0))
    got = RUNNERS[reader](g, memory, inputs(0, 1))  # each tile written back in place
    assert got.memory["x"].tolist() == memory["x"].tolist()


def test_tiles_of_different_shapes_overlap_by_their_elements():
    """A load of 8x4 tiles reads store a's 4x4 tiles 2 and 3 as its tile 1."""
    inputs = {"a_addr": _addresses([3]), "a_data": _tiles(1, 7.0)}
    with pytest.raises(StepRaceError, match=r"tile 1 \(8x4 tiles\)|tile 3 \(4x4 tiles\)"):
        interpret(store_then_load(1, False, load_tile=(8, 4)), _memory(c_addr=[1]), inputs=inputs)
    # its tile 0 covers 4x4 tiles 0 and 1: no race with a write of tile 3
    got = interpret(store_then_load(1, False, load_tile=(8, 4)), _memory(c_addr=[0]), inputs=inputs)
    assert got.memory["x"][12:16].tolist() == [[7.0] * 4] * 4


def test_a_linear_store_races_with_any_load_of_its_tensor():
    g = Graph("linear")
    x = g.tensor("x", (8, 4), "int16")
    LinearOffChipStore(Source(g, StreamType(Tile("int16", 4, 4), (2,)), name="d").out, x)
    Sink(LinearOffChipLoad(x, tile=(4, 4), name="ld").out)
    with pytest.raises(StepRaceError, match=r"LinearOffChipLoad 'ld'|which LinearOffChipLoad 'ld'"):
        interpret(g, inputs={"d": _tiles(2, 1.0)})
    # a read after the store's write in the interpreter's run: it says why nothing can order it
    g = Graph("linear_then_read")
    x = g.tensor("x", (8, 4), "int16")
    d = Source(g, StreamType(Tile("int16", 4, 4), (2,)), name="d").out
    LinearOffChipStore(d, x, name="st")
    Sink(LinearOffChipLoad(x, tile=(4, 4), out_shape=(1,), ref=d, name="ld").out)
    with pytest.raises(StepRaceError) as err:
        interpret(g, inputs={"d": _tiles(2, 1.0)})
    assert str(err.value) == (
        "LinearOffChipLoad 'ld': reads tile 0 (4x4 tiles) of tensor 'x', which "
        "LinearOffChipStore 'st' writes, and no stream can order a read after that write (a "
        "LinearOffChipStore has no ack output; a RandomOffChipStore's acks can gate the read): "
        "the value read depends on timing"
    )


# -- ordered accesses pass, with the values of their order -----------------------------------------


@pytest.mark.parametrize("reader", RUNNERS)
def test_accesses_ordered_by_streams_pass(reader):
    run = RUNNERS[reader]
    # b waits for a's acks: b's value wins
    inputs = {"a_addr": _addresses([0, 2]), "a_data": _tiles(2, 7.0), "b_data": _tiles(1, 9.0)}
    got = run(two_stores(1, ordered=True), _memory(b_addr=[2]), inputs)
    assert got.memory["x"][::4, 0].tolist() == [7.0, 1.0, 9.0, 3.0]
    # c reads after a's acks: it reads a's tile
    inputs = {"a_addr": _addresses([3]), "a_data": _tiles(1, 7.0)}
    got = run(store_then_load(2, ordered=True), _memory(c_addr=[1, 3]), inputs)
    assert [t[0, 0] for t in _tokens(got, "c.out")[:2]] == [1.0, 7.0]
    # d writes back the tile c read, doubled: the read precedes the write through the data
    inputs = {"c_addr": _addresses([1, 2]), "d_addr": _addresses([1, 2])}
    got = run(load_then_store(in_place=True), _memory(), inputs)
    assert got.memory["x"][::4, 0].tolist() == [0.0, 2.0, 4.0, 3.0]


def test_a_round_trip_through_memory_is_ordered_on_the_rtl():
    """The orders the check relies on hold in the hardware: a load walking on a count of a
    store's acks reads what the store wrote, and a store of what a load read overwrites it only
    after the read (co-simulated on the fast tier with the HBM-like memory, 64 cycles per read:
    a write that did not wait would land before the read)."""
    from step_hw.cosim import validate
    from step_hw.memory_model import MemoryModel

    inputs = {"a_addr": _addresses([3, 1]), "a_data": _tiles(2, 5)}
    memory = _memory(c_addr=[1, 3, 0], d_addr=[1, 3, 0])
    got = interpret(round_trip(3), memory, inputs=inputs)
    assert got.memory["x"][::4, 0].tolist() == [0, 10, 2, 10]  # 1 and 3: 5 written, doubled
    report = validate(round_trip(3), memory, inputs=inputs, tier="fast", memory_model=MemoryModel.hbm(),
                      tag="races", quiet=True)  # fmt: skip
    assert report.ok and report.rtl_error is None and report.mismatch is None, str(report)
    assert report.rtl_profile_cycles == report.rtl_cycles, str(report)


@settings(max_examples=100, deadline=None)
@given(
    a=st.lists(st.integers(0, N_TILES - 1), max_size=4),
    b=st.lists(st.integers(0, N_TILES - 1), min_size=1, max_size=4),
    ordered=st.booleans(),
    reader=st.sampled_from(sorted(RUNNERS)),
)
def test_two_stores_race_exactly_when_unordered_and_overlapping(a, b, ordered, reader):
    """Random address sets (a may be empty when unordered): each reader refuses the graph exactly when the
    two stores write a common tile and no stream orders them; otherwise the tensor holds b's
    tiles where b wrote (if ordered), a's elsewhere it wrote, the initial values elsewhere."""
    assume(a or not ordered)  # the gate counts a's acks: no group, no token, when there are none
    g = two_stores(len(b), ordered)
    inputs = {"a_addr": _addresses(a), "a_data": _tiles(len(a), 7.0), "b_data": _tiles(len(b), 9.0)}
    if not ordered and set(a) & set(b):
        with pytest.raises(StepRaceError):
            RUNNERS[reader](g, _memory(b_addr=b), inputs)
        return
    got = RUNNERS[reader](g, _memory(b_addr=b), inputs)
    want = [9.0 if k in b else 7.0 if k in a else float(k) for k in range(N_TILES)]
    assert got.memory["x"][::4, 0].tolist() == want


@settings(max_examples=80, deadline=None)
@given(
    outer=st.lists(st.integers(1, 3), max_size=2),
    rows=st.sampled_from([(8, 2), (8, 4), (12, 6)]),  # (tensor rows, tile rows)
    cols=st.sampled_from([(6, 3), (4, 4), (8, 2)]),
    data=st.data(),
)
def test_cells_are_the_elements_of_the_tile(outer, rows, cols, data):
    """The grid cells of a tile cover exactly the elements tile_index gives, for the tile that
    sets the grid and for a larger one (several cells)."""
    from step_lang.ops.offchip import tile_index
    from step_lang.races import _Shadow

    g = Graph("cells")
    t = g.tensor("t", (*outer, rows[0], cols[0]), "int16")
    small, big = (rows[1] // 2 or 1, cols[1]), (rows[1], cols[1])
    nodes = [
        LinearOffChipLoad(t, tile=big, name="a"),
        LinearOffChipLoad(t, tile=small, name="b"),
    ]
    shadow = _Shadow(t, nodes)
    assert (shadow.rows, shadow.cols) == small
    for tile in (small, big):
        n_tiles = int(np.prod(outer or [1])) * (rows[0] // tile[0]) * (cols[0] // tile[1])
        k = data.draw(st.integers(0, n_tiles - 1))
        mark = np.zeros(t.shape, bool)
        mark[tile_index(t.shape, tile, k)] = True
        cells = np.zeros(int(np.prod(shadow.grid)), bool)
        cells[shadow.cells(tile, k)] = True
        grid = np.kron(cells.reshape(shadow.grid), np.ones(small, bool))
        assert (grid == mark).all()


RACY_FILE = """
import numpy as np
from step_lang import Graph, RandomOffChipStore, Sink, Source, StreamType, Tile, DONE

def build():
    g = Graph("racy")
    x = g.tensor("x", (8, 4), "int16")
    for name in ("a", "b"):
        addr = Source(g, StreamType(Tile("int32", 1, 1), (1,)), name=f"{name}_addr").out
        data = Source(g, StreamType(Tile("int16", 4, 4), (1,)), name=f"{name}_data").out
        Sink(RandomOffChipStore(addr, data, x, name=name).out)
    one = [np.ones((1, 1), np.int32), DONE]
    tile = [np.ones((4, 4), np.int16), DONE]
    return g, {}, {"a_addr": one, "a_data": tile, "b_addr": one, "b_data": tile}
"""


@pytest.mark.parametrize(
    "command", [["sim", "--functional"], ["sim"], ["metrics", "--evaluate"], ["validate"]]
)
def test_the_step_command_reports_a_race_in_one_line(tmp_path, monkeypatch, capsys, command):
    from stepcli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "racy.py").write_text(RACY_FILE)
    rc = main([command[0], "racy.py:build", *command[1:]])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err == (
        "step: error: RandomOffChipStore 'b': writes tile 1 (4x4 tiles) of tensor 'x', which "
        "RandomOffChipStore 'a' also writes, and no stream orders the two writes: the tensor's "
        "final value depends on timing\n"
    )
