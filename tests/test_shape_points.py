"""``shape_points:``: a mapping's untuned point by shape bucket (septran/mapping/shape_points.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

import septran
from septran.errors import MappingError
from septran.mapping.schema import parse_mapping
from septran.runtime import points

REPO = Path(__file__).resolve().parents[1]
SPACE = """target: cpu
entrypoint: gemm_host
task_mappings:
  gemm_host:
    task_name: gemm_host_logic
    proc: HOST
    mems: {C: GLOBAL, A: GLOBAL, B: GLOBAL}
    tunables: {BM: !tune [64, 16], BN: !tune [64, 16], BK: 64}
    calls: {gemm_block_logic: gemm_block_cpu}
  gemm_block_cpu:
    task_name: gemm_block_logic
    proc: BLOCK
    mems: {C: LOCAL, A: GLOBAL, B: GLOBAL}
    leaf_task_bindings: {gemm_leaf_logic: gemm_leaf_blas}
"""
BUCKETS = SPACE + """shape_points:
  - when: {A: [16, null], B: [null, 16]}
    point: {gemm_host.tunables.BM: 16, task_mappings.gemm_host.tunables.BN: 16}
  - when: {A: [16]}
    point: {gemm_host.tunables.BM: 16}
"""
BM, BN = "task_mappings.gemm_host.tunables.BM", "task_mappings.gemm_host.tunables.BN"


def test_entries_parse_with_full_and_short_paths():
    m = parse_mapping(BUCKETS, "m.yaml")
    assert [dict(e.point) for e in m.shape_points] == [{BM: 16, BN: 16}, {BM: 16}]
    assert dict(m.shape_points[0].when) == {"A": (16, None), "B": (None, 16)}
    assert m.at({BM: 16}).shape_points == m.shape_points  # a point of the space keeps them (unused there)


@pytest.mark.parametrize("shapes,want", [
    ({"A": (8, 500), "B": (500, 16), "C": (8, 16)}, 0),
    ({"A": (16, 500), "B": (500, 17), "C": (16, 17)}, 1),
    ({"A": (1, 5), "B": (5, 4096), "C": (1, 4096)}, 1),
    ({"A": (17, 5), "B": (5, 8), "C": (17, 8)}, None),
])
def test_the_first_entry_whose_bounds_hold(shapes, want):
    m = parse_mapping(BUCKETS, "m.yaml")
    from septran.mapping import shape_points

    assert shape_points.bucket(m.shape_points, shapes) == (None if want is None else (want,))


@pytest.mark.parametrize("tail,message", [
    ("shape_points: {A: 1}\n", "must be a list"),
    ("shape_points:\n  - when: {A: [16]}\n", "has the key `point`, one or more of"),
    ("shape_points:\n  - {point: {gemm_host.tunables.BM: 16}}\n", "has the key `point`, one or more of"),
    ("shape_points:\n  - {dtypes: {A: bfloat17}, point: {gemm_host.tunables.BM: 16}}\n", "must be an element type"),
    ("shape_points:\n  - {cpu_flags: amx, point: {gemm_host.tunables.BM: 16}}\n", "list of /proc/cpuinfo flags"),
    ("shape_points:\n  - {when: {A: 16}, point: {gemm_host.tunables.BM: 16}}\n", "list of upper bounds"),
    ("shape_points:\n  - {when: {A: [-1]}, point: {gemm_host.tunables.BM: 16}}\n", "must be a size"),
    ("shape_points:\n  - {when: {A: [16]}, point: {gemm_host.tunables.BK: 64}}\n", "not a !tune dimension"),
    ("shape_points:\n  - {when: {A: [16]}, point: {gemm_host.tunables.BM: 32}}\n", "not a choice"),
    ("shape_points:\n  - {threads: 0, point: {gemm_host.tunables.BM: 16}}\n", "`threads` is the most threads"),
    ("shape_points:\n  - {above: {A: 16}, point: {gemm_host.tunables.BM: 16}}\n", "list of lower bounds"),
    ("shape_points:\n  - {above: {A: [1.5]}, point: {gemm_host.tunables.BM: 16}}\n", "must be a size"),
    ("shape_points:\n  - {above: {A: [null, 64]}, when: {A: [null, 64]}, point: {gemm_host.tunables.BM: 16}}\n",
     "A's axis 1 must be above 64 and at most 64: no size is"),
    ("shape_points:\n  - {threads: true, point: {gemm_host.tunables.BM: 16}}\n", "`threads` is the most threads"),
    ("shape_points:\n  - {threads: [1], point: {gemm_host.tunables.BM: 16}}\n", "`threads` is the most threads"),
    ("shape_points:\n  - {cpu_vendor: [GenuineIntel], point: {gemm_host.tunables.BM: 16}}\n", "`cpu_vendor` is a /proc/cpuinfo"),
    ("shape_points:\n  - {cpu_vendor: Intel Inc, point: {gemm_host.tunables.BM: 16}}\n", "`cpu_vendor` is a /proc/cpuinfo"),
    ("shape_points:\n  - {cpu_vendor: intel, point: {gemm_host.tunables.BM: 16}}\n", "`cpu_vendor` is a /proc/cpuinfo"),
    ("shape_points:\n  - {threads: 1, continue: yes please, point: {gemm_host.tunables.BM: 16}}\n", "`continue` is true or false"),
    ("shape_points:\n  - {continue: true, point: {gemm_host.tunables.BM: 16}}\n", "has the key `point`, one or more of"),
    ("shape_points:\n  - {ranks: {A: two}, point: {gemm_host.tunables.BM: 16}}\n", "must be a number of axes"),
    ("shape_points:\n  - {ranks: [2], point: {gemm_host.tunables.BM: 16}}\n", "`ranks` maps parameters"),
    ("shape_points:\n  - {numel: {A: -1}, point: {gemm_host.tunables.BM: 16}}\n", "must be a number of elements"),
    ("shape_points:\n  - {numel: 100, point: {gemm_host.tunables.BM: 16}}\n", "`numel` maps parameters"),
])
def test_bad_entries_are_located_errors(tail, message):
    with pytest.raises(MappingError, match=message) as err:
        parse_mapping(SPACE + tail, "m.yaml")
    assert err.value.loc is not None and err.value.loc.file == "m.yaml" and err.value.loc.line > 14


GOES_ON = SPACE + """shape_points:
  - when: {A: [1]}
    point: {gemm_host.tunables.BM: 16, gemm_host.tunables.BN: 16}
  - cpu_vendor: GenuineIntel
    continue: true
    point: {gemm_host.tunables.BN: 16}
  - when: {C: [100, 100]}
    point: {gemm_host.tunables.BM: 16, gemm_host.tunables.BN: 64}
  - threads: 1
    point: {gemm_host.tunables.BM: 16}
"""


def test_an_entry_that_continues_adds_to_the_next_entry_a_call_meets():
    """`continue: true`: the call goes on to the next entry it meets, whose dimensions fill in what the first left
    unset (the first's values stand); an entry before it still ends the search, and a bucket of several entries
    is named by all their bounds."""
    from septran.mapping import shape_points

    entries = parse_mapping(GOES_ON, "m.yaml").shape_points
    small, big, row = {"A": (50, 8), "C": (50, 50)}, {"A": (500, 8), "C": (500, 500)}, {"A": (1, 8), "C": (1, 50)}
    meet = lambda shapes, vendor, threads=2: shape_points.bucket(entries, shapes, threads=threads, cpu_vendor=vendor)  # noqa: E731
    assert meet(small, "GenuineIntel") == (1, 2) and meet(small, "AuthenticAMD") == (2,)
    assert meet(big, "GenuineIntel") == (1,) and meet(big, "GenuineIntel", 1) == (1, 3) and meet(big, "AuthenticAMD") is None
    assert meet(row, "GenuineIntel") == (0,)  # an entry above it ends the search as before
    assert shape_points.point_of(entries, (1, 2)) == {BM: 16, BN: 16}  # BN from the Intel entry, BM from the size class
    assert shape_points.point_of(entries, (1, 3)) == {BM: 16, BN: 16}
    assert shape_points.bucket_id(entries, (2,)) == entries[2].bucket_id()
    assert len({shape_points.bucket_id(entries, met) for met in ((1,), (2,), (1, 2), (1, 3))}) == 4
    assert shape_points.described(entries, (1, 2)) == "shape_points entries 2 and 3, m.yaml:18, m.yaml:21"


def test_the_shipped_intel_entries_give_mkl_in_every_size_class():
    """gemm.yaml and bmm.yaml name the MKL leaf once for an Intel CPU's float32 calls, above the size classes: every
    such call of more than 16 rows runs it (a gemm over a whole C in one program, a bmm in the tiles an AMD CPU
    runs), and a decode step keeps its own point."""
    from septran.mapping import shape_points

    whole = {"task_mappings.gemm_block_cpu.mems.C": "GLOBAL", "task_mappings.gemm_host.tunables.BM": 4096,
             "task_mappings.gemm_host.tunables.BN": 16384, "task_mappings.gemm_host.tunables.BK": 4096}
    for name, leaf in (("gemm", "task_mappings.gemm_block_cpu.leaf_task_bindings.gemm_leaf_logic"),
                       ("bmm", "task_mappings.bmm_block_cpu.leaf_task_bindings.bmm_leaf_logic")):
        entries = parse_mapping((REPO / "mappings" / "cpu" / f"{name}.yaml").read_text(), f"{name}.yaml").shape_points
        f32 = {"A": "float32", "B": "float32", "C": "float32"}
        for m, n, k in ((37, 300, 77), (333, 555, 777), (1000, 1000, 1000), (1500, 1500, 64), (4, 4096, 4096)):
            shapes = {"A": (m, k), "B": (k, n), "C": (m, n)} if name == "gemm" else \
                {"A": (3, m, k), "B": (3, k, n), "C": (3, m, n)}
            for threads in (1, 2):
                intel, amd = (shape_points.bucket(entries, shapes, f32, frozenset(), threads, v)
                              for v in ("GenuineIntel", "AuthenticAMD"))
                amd_point = shape_points.point_of(entries, amd) if amd else {}
                intel_point = shape_points.point_of(entries, intel)
                if m <= 16:  # a decode step: its own point, the same on both
                    assert intel == amd and intel_point.get(leaf) != "gemm_leaf_mkl", (name, m, n, k)
                elif name == "gemm":
                    assert intel_point == {**whole, leaf: "gemm_leaf_mkl"}, (name, m, n, k, threads)
                else:
                    assert intel_point == {**amd_point, leaf: "gemm_leaf_mkl"}, (name, m, n, k, threads)


def test_a_mapping_without_tune_refuses_them():
    fixed = SPACE.replace("!tune [64, 16]", "64")
    with pytest.raises(MappingError, match="needs a search space"):
        parse_mapping(fixed + "shape_points:\n  - {when: {A: [16]}, point: {gemm_host.tunables.BM: 16}}\n", "m.yaml")


def test_an_unknown_parameter_is_refused_when_a_call_meets_it():
    m = parse_mapping(SPACE + "shape_points:\n  - {when: {Q: [16]}, point: {gemm_host.tunables.BM: 16}}\n", "m.yaml")
    with pytest.raises(MappingError, match="not a parameter"):
        m.shape_points[0].holds({"A": (1, 2), "B": (2, 3), "C": (1, 3)})


@pytest.mark.build
def test_a_dynamic_kernel_keeps_one_variant_per_bucket(cpu_maker):
    """The model level's GEMM (rows dynamic): a decode step's one row runs the shipped decode point, a prefill the
    first point, and each later call of either kind reuses its variant. (An AMD CPU's entries: an Intel CPU's
    float32 GEMMs of more than 16 rows meet its own, above the size classes.)"""
    import torch

    import septran.ops.kernels
    from septran.ops.gemm import gemm_kernel
    cpu_maker("AuthenticAMD")
    septran.ops.kernels.clear()  # the library's kernels are shared: count this test's variants only
    k = gemm_kernel("cpu", "none", False, True)
    w = torch.randn(32, 24)
    sources = []
    for m in (1, 40, 1, 40, 3):
        a = torch.randn(m, 32)
        torch.testing.assert_close(k(a, w), a @ w, rtol=1e-4, atol=1e-4)
        sources.append(k.tuning["source"])
    # (entries 7 and 8, after these: a bfloat16 call of more rows on a CPU with a matrix unit; later, float32 by size)
    assert "shape_points entry 1" in sources[0]  # one row
    assert sources[1] == sources[3] and "shape_points entry 15" in sources[1]  # 40 x 24: a small C, 64 x 64 tiles
    assert sources[2] == sources[0] and "shape_points entry 5" in sources[4]  # three rows: a small call
    assert len(k.variants) == 3


def test_the_shipped_cpu_gemm_mappings_bucket_small_and_decode_calls():
    for name in ("gemm", "gemm_epilogue"):
        k = septran.compile(logic_file=REPO / "examples" / name / f"{name}.py", mapping_file=REPO / "mappings" / "cpu" / f"{name}.yaml") \
            if name == "gemm" else None
        m = parse_mapping((REPO / "mappings" / "cpu" / f"{name}.yaml").read_text(), f"{name}.yaml")
        from septran.mapping import shape_points

        units = sum(1 for e in m.shape_points if e.cpu_flags)
        # both units: a middling C (128 x 256 tiles), then the rest; the epilogue's small bf16 prefill first
        assert units == (4 if name == "gemm" else 7)

        # one row, small or not (a GEMV: tiles as wide as C, up to one program as wide as B), then a small call,
        # then a few rows; last, a bfloat16 call of more rows on a CPU with a matrix unit (entries of dtypes and
        # cpu_flags, which a caller naming no types never falls in)
        assert shape_points.bucket(m.shape_points, {"A": (1, 4096), "B": (4096, 11008), "C": (1, 11008),
                                                    "bias": (11008,)}) == (3,)
        assert shape_points.bucket(m.shape_points, {"A": (1, 256), "B": (256, 256), "C": (1, 256), "bias": (256,)}) == (0,)
        assert shape_points.bucket(m.shape_points, {"A": (1, 256), "B": (256, 768), "C": (1, 768), "bias": (768,)}) == (1,)
        assert shape_points.bucket(m.shape_points, {"A": (1, 4096), "B": (4096, 4096), "C": (1, 4096),
                                                    "bias": (4096,)}) == (2,)
        assert shape_points.bucket(m.shape_points, {"A": (16, 16), "B": (16, 16), "C": (16, 16), "bias": (16,)}) == (4,)
        decode = 5 if name == "gemm" else 6  # the epilogue's entry 5: a decode step wider than 4096, 1024-wide tiles
        assert shape_points.bucket(m.shape_points, {"A": (4, 4096), "B": (4096, 4096), "C": (4, 4096),
                                                    "bias": (4096,)}) == (decode,)
        wide = shape_points.bucket(m.shape_points, {"A": (4, 4096), "B": (4096, 11008), "C": (4, 11008), "bias": (11008,)})
        assert wide == (decode if name == "gemm" else 5,)
        assert shape_points.bucket(m.shape_points, {"A": (512, 512), "B": (512, 512), "C": (512, 512), "bias": (512,)}) is None
        if k is not None:
            assert points.bucket(k, type("Spec", (), {"shapes": {"A": (1, 8), "B": (8, 8), "C": (1, 8)},
                                                "dtypes": {"A": "float32", "B": "float32", "C": "float32"}})()) == (0,)


def test_a_dynamic_kernel_keeps_tuning_records_per_bucket():
    """Rows are dynamic (-1 in the key): without the bucket, a decode step's record would serve a prefill and the
    reverse. Two row counts of one bucket share a key; of two buckets (one row, a small call, the first point),
    not."""
    from septran.ops.gemm import gemm_kernel

    k = gemm_kernel("cpu", "none", False, True)

    def key(rows: int):
        described = {"A": ((rows, 32), "float32"), "B": ((32, 24), "float32")}
        return k.tuning_key(k.specialization(described, k.scalar_values({}))).digest()

    assert key(3) == key(16) != key(1)  # a small call's bucket, and one row's
    assert key(40) == key(300) != key(3)


def test_a_bucket_names_its_tuning_records_by_its_bounds():
    """A record of a bucketed call names the entry by its bounds, not its place in the list: an entry inserted
    before it leaves the records where they were (never another bucket's point)."""
    from septran.ops.gemm import gemm_kernel

    k = gemm_kernel("cpu", "none", False, True)
    entries = {e.bounds_text(): e.bucket_id() for e in k.mapping.shape_points}
    for rows, bounds in ((1, "A<=[1]; C<=[*, 256]"), (3, "A<=[16, 256]; B<=[256, 256]")):
        shapes = {"A": ((rows, 32), "float32"), "B": ((32, 24), "float32"), "C": ((rows, 24), "float32")}
        scalars = dict(k.tuning_key(k.specialization(shapes, {})).scalars)
        assert float.fromhex(scalars[points.BUCKET]) == entries[bounds]


THREADS = SPACE + """shape_points:
  - {when: {A: [16]}, point: {gemm_host.tunables.BM: 16}}
  - {threads: 1, point: {gemm_host.tunables.BN: 16}}
"""


def test_an_entry_with_threads_holds_for_at_most_that_many():
    from septran.mapping import shape_points

    m = parse_mapping(THREADS, "m.yaml")
    big = {"A": (40, 8), "B": (8, 40), "C": (40, 40)}
    assert shape_points.asks_threads(m.shape_points)
    assert [shape_points.bucket(m.shape_points, big, threads=t) for t in (1, 2, None)] == [(1,), None, None]
    assert shape_points.bucket(m.shape_points, {"A": (4, 8), "B": (8, 40), "C": (4, 40)}, threads=1) == (0,)
    assert m.shape_points[1].bounds_text() == "threads<=1"  # (a bucket's records are named by it)
    intel = parse_mapping(SPACE + "shape_points:\n  - {cpu_vendor: GenuineIntel, point: {gemm_host.tunables.BM: 16}}\n",
                          "m.yaml").shape_points
    assert shape_points.asks_vendor(intel) and not shape_points.asks_vendor(m.shape_points)
    assert [shape_points.bucket(intel, big, cpu_vendor=v) for v in ("GenuineIntel", "AuthenticAMD", None)] == [(0,), None, None]
    assert intel[0].bounds_text() == "vendor:GenuineIntel"
    above = parse_mapping(SPACE + "shape_points:\n  - {above: {C: [16, null]}, when: {C: [null, 32]}, "
                                  "point: {gemm_host.tunables.BM: 16}}\n", "m.yaml").shape_points
    assert above[0].bounds_text() == "C<=[*, 32]; C>[16, *]"
    assert [shape_points.bucket(above, {"C": c}) for c in ((16, 8), (17, 8), (17, 33), (900, 32))] == [None, (0,), None, (0,)]
    assert not shape_points.asks_threads(parse_mapping(BUCKETS, "m.yaml").shape_points)


@pytest.mark.build
def test_a_kernel_runs_the_point_of_the_thread_count_at_each_call(tmp_path):
    """The point follows torch.set_num_threads between calls, through Python and through the C entry alike."""
    import torch

    from septran.build import pyext
    from septran.runtime import fast_call

    pyext.start()
    pyext.module(wait=None)
    path = tmp_path / "m.yaml"
    path.write_text(THREADS)
    k = septran.compile(logic_file=REPO / "examples" / "gemm" / "gemm.py", mapping_file=path)
    a, b = torch.randn(40, 24), torch.randn(24, 40)
    before = torch.get_num_threads()
    try:
        for threads in (2, 1, 2, 1):
            torch.set_num_threads(threads)
            for _ in range(fast_call.CALLS_BEFORE + 2):
                torch.testing.assert_close(k(a, b), a @ b, rtol=1e-4, atol=1e-4)
                want = "shape_points entry 2" if threads == 1 else "first point"
                assert want in k.latest.choice.source, threads
    finally:
        torch.set_num_threads(before)
    assert len(k.variants) == 2 and k._fast is not None and k._fast.size() == 2


def test_the_shipped_gemm_and_bmm_points_by_thread_count():
    """gemm: a float32 C of more than 320 rows and columns on one thread, more than 400 on any count, runs as one
    program over the whole C in GLOBAL (the vendor's call splits it over the threads); bmm, one thread: batches of
    more than 384 rows and columns in 512 x 512 tiles; two threads only where the larger tiles share out evenly;
    float16 takes float32's tiles up to 1024 x 1024 (never the whole C), larger float16 Cs the first point."""
    from septran.mapping import shape_points

    def point(name, shapes, threads, dtype="float32", vendor="AuthenticAMD"):
        m = parse_mapping((REPO / "mappings" / "cpu" / f"{name}.yaml").read_text(), f"{name}.yaml")
        k = shape_points.bucket(m.shape_points, shapes, {"A": dtype, "B": dtype, "C": dtype}, frozenset(), threads, vendor)
        return {p.rsplit(".", 1)[1]: v for p, v in shape_points.point_of(m.shape_points, k).items()} if k else None

    def gemm(m, n, k=1000):
        return {"A": (m, k), "B": (k, n), "C": (m, n)}

    big = {"BM": 512, "BN": 512}
    whole = {"C": "GLOBAL", "BM": 4096, "BN": 16384, "BK": 4096}
    assert point("gemm", gemm(1000, 1000), 1) == whole and point("gemm", gemm(5000, 3000), 1) == whole
    assert point("gemm", gemm(321, 321), 1) == whole and point("gemm", gemm(321, 321), 2) != whole
    assert point("gemm", gemm(1000, 1000), 2) == whole and point("gemm", gemm(1500, 1500), 3) == whole
    # smaller C, on any thread count: tiles that give every thread several programs, handed out dynamically
    small, middling = ({"BM": b, "BN": n, "schedule": "dynamic"} for b, n in ((64, 64), (128, 256)))
    assert point("gemm", gemm(64, 256), 2, "float16") == small and point("gemm", gemm(1000, 1000), 1, "float16") == middling
    assert point("gemm", gemm(2000, 2000), 1, "float16") is None
    # the epilogue's float16 prefill of a small model: tiles for both threads, not one program the vendor splits
    # after widening its operands on one (the Llama block's float16 prefill at 2 threads 10.0 -> 1.0 ms)
    assert point("gemm_epilogue", gemm(64, 256, 688), 2, "float16") == small
    assert point("gemm", gemm(320, 320), 2) == small and point("gemm", gemm(37, 300), 1) == small
    assert point("gemm", gemm(400, 1000), 2) == middling and point("gemm", gemm(1000, 390), 3) == middling
    assert point("gemm", gemm(300, 1024), 1) == middling and point("gemm", gemm(321, 200), 2) == middling
    bmm = lambda b, m, n: {"A": (b, m, 64), "B": (b, 64, n), "C": (b, m, n)}  # noqa: E731
    assert point("bmm", bmm(8, 512, 512), 1) == big and point("bmm", bmm(3, 512, 512), 2) == {"BN": 512}
    dynamic = {"schedule": "dynamic"}  # bmm's other float32 batches: the first point's tiles, handed out dynamically
    assert point("bmm", bmm(3, 200, 512), 2) == dynamic and point("bmm", bmm(3, 1024, 1024), 2) == dynamic
    assert point("bmm", bmm(12, 128, 128), 2) == {"BM": 64, "BN": 64, "schedule": "dynamic"}
    # an Intel CPU: MKL's leaf for every float32 shape of more than 16 rows; a gemm over the whole C
    mkl = {"gemm_leaf_logic": "gemm_leaf_mkl"}
    assert point("gemm", gemm(1000, 1000), 1, vendor="GenuineIntel") == {**whole, **mkl}
    assert point("gemm", gemm(37, 300), 2, vendor="GenuineIntel") == {**whole, **mkl}
    assert point("gemm", gemm(4, 1500), 2, vendor="GenuineIntel") == {"BM": 16, "BN": 4096, "BK": 4096}
    assert point("gemm", gemm(100, 100), 2, "bfloat16", vendor="GenuineIntel") is None
    assert point("bmm", bmm(3, 512, 512), 2, vendor="GenuineIntel") == {"BN": 512, "bmm_leaf_logic": "gemm_leaf_mkl"}
    assert point("bmm", bmm(3, 1024, 1024), 2, vendor="GenuineIntel") == {**dynamic, "bmm_leaf_logic": "gemm_leaf_mkl"}


def test_tune_models_own_point_is_a_whole_point_of_the_space():
    """A bucket's entry names a few dimensions; the point tune-model times and records as the mapping's own holds
    them all (a partial one was never equal to a tuned point, and its record was skipped as not of the space)."""
    from septran.commands.tune_model import mapping_point

    k = septran.compile(logic_file=REPO / "examples" / "gemm" / "gemm.py", mapping_file=REPO / "mappings" / "cpu" / "gemm.yaml")
    spec = k.specialization({"A": ((1, 4096), "float32"), "B": ((4096, 4096), "float32")}, {})
    own = mapping_point(k, spec)
    assert k.mapping.space.refusal(own) is None and own[BM] == 1 and set(own) == set(k.mapping.space.first)


def test_a_middling_bfloat16_c_runs_smaller_tiles_on_the_unit():
    """On a CPU with a bf16 unit, a bfloat16 C of at most 800 x 800 runs 128 x 256 tiles handed out dynamically
    (gemm and the epilogue); a larger one the unit's own entry."""
    from septran.mapping import shape_points

    bf16 = {"A": "bfloat16", "B": "bfloat16", "C": "bfloat16"}
    for name, leaf_key in (("gemm", "gemm_leaf_logic"), ("gemm_epilogue", "epi_gemm_leaf")):
        m = parse_mapping((REPO / "mappings" / "cpu" / f"{name}.yaml").read_text(), f"{name}.yaml")
        for flags, leaf in (({"avx512_bf16"}, "gemm_leaf_avx512bf16"), ({"amx_tile", "amx_bf16", "avx512_bf16"}, "gemm_leaf_amx")):
            def point(c):
                shapes = {"A": (c[0], 777), "B": (777, c[1]), "C": c, "bias": (c[1],)}
                k = shape_points.bucket(m.shape_points, shapes, bf16, frozenset(flags), 2)
                return {p.rsplit(".", 1)[1]: v for p, v in shape_points.point_of(m.shape_points, k).items()}
            mid = point((333, 555))
            assert mid[leaf_key] == leaf and (mid["BM"], mid["BN"], mid["schedule"]) == (128, 256, "dynamic")
            assert point((2000, 1500))[leaf_key] == leaf and "BM" not in point((2000, 1500))


def test_zen_5_runs_the_float32_linears_on_openblas():
    """AMD CPUs that report VP2INTERSECT (Zen 5) run the epilogue's and SwiGLU's float32 GEMMs on OpenBLAS, whose
    AVX-512 kernels use the full-width units; a Zen 4 (no VP2INTERSECT) and an Intel CPU keep MKL."""
    from septran.mapping import shape_points

    cases = {"gemm_epilogue": ({"A": (333, 777), "B": (555, 777), "C": (333, 555), "bias": (555,)},
                               {"A": "float32", "B": "float32", "C": "float32", "bias": "float32"},
                               "task_mappings.epi_block_cpu.leaf_task_bindings.epi_gemm_leaf"),
             "swiglu_mlp": ({"X": (128, 256), "Wg": (256, 688), "Wu": (256, 688), "H": (128, 688)},
                            {"X": "float32", "Wg": "float32", "Wu": "float32", "H": "float32"},
                            "task_mappings.swiglu_block_cpu.leaf_task_bindings.swiglu_gate")}
    for name, (shapes, dtypes, leaf) in cases.items():
        m = parse_mapping((REPO / "mappings" / "cpu" / f"{name}.yaml").read_text(), f"{name}.yaml")

        def point(vendor, flags):
            met = shape_points.bucket(m.shape_points, shapes, dtypes, frozenset(flags), 2, vendor)
            return shape_points.point_of(m.shape_points, met)[leaf]

        assert point("AuthenticAMD", {"avx512f", "avx512_vp2intersect"}) == "gemm_leaf_blas", name
        assert point("AuthenticAMD", {"avx512f", "avx512_bf16"}) == "gemm_leaf_mkl", name
        assert point("GenuineIntel", {"avx512f", "avx512_vp2intersect"}) == "gemm_leaf_mkl", name


@pytest.mark.parametrize("name", ["attention", "attention_full"])
def test_zen_5_computes_attention_scores_on_openblas(name):
    from septran.mapping import shape_points

    m = parse_mapping((REPO / "mappings" / "cpu" / f"{name}.yaml").read_text(), f"{name}.yaml")
    shape = (1, 8, 512, 64)
    leaf = "task_mappings.attn_block.leaf_task_bindings.attn_scores"

    def point(vendor, flags):
        met = shape_points.bucket(m.shape_points, {"Q": shape, "K": shape, "V": shape, "O": shape}, {"Q": "float32"},
                                  frozenset(flags), 2, vendor)
        return m.space.first[leaf] if met is None else shape_points.point_of(m.shape_points, met).get(
            leaf, m.space.first[leaf])

    assert point("AuthenticAMD", {"avx512_vp2intersect"}) == "gemm_leaf_blas"
    assert point("AuthenticAMD", {"avx512_bf16"}) == point("GenuineIntel", {"avx512_vp2intersect"}) == "gemm_leaf_mkl"


def test_an_entry_may_ask_for_a_number_of_axes():
    """``ranks: {X: 2}``: the entry holds for calls whose X has that many axes (one logic builds tasks of several
    ranks); the bucket's name says so; a parameter it names must be one of the entry's."""
    from septran.mapping import shape_points

    entries = parse_mapping(SPACE + "shape_points:\n  - {ranks: {A: 2}, above: {A: [null, 8]}, point: {gemm_host.tunables.BM: 16}}\n",
                            "m.yaml").shape_points
    assert entries[0].matches({"A": (4, 16)}, {}, ()) and not entries[0].matches({"A": (4, 4)}, {}, ())
    assert not entries[0].matches({"A": (1, 4, 16)}, {}, ())
    assert entries[0].bounds_text() == "A>[*, 8]; A:rank2"
    with pytest.raises(MappingError, match="not a parameter of the entry task"):
        entries[0].matches({"B": (4, 16)}, {}, ())


def test_an_entry_may_ask_for_at_most_so_many_elements():
    """``numel: {A: 1000}``: the entry holds for calls whose A has at most 1000 elements, whatever its shape."""
    entries = parse_mapping(SPACE + "shape_points:\n  - {numel: {A: 1000}, point: {gemm_host.tunables.BM: 16}}\n",
                            "m.yaml").shape_points
    assert entries[0].matches({"A": (10, 100)}, {}, ()) and entries[0].matches({"A": (1000, 1)}, {}, ())
    assert not entries[0].matches({"A": (10, 101)}, {}, ())
    assert entries[0].bounds_text() == "A.numel<=1000"
