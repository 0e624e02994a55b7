"""What a target is, as ``backends/<name>/target.yaml`` describes it: processors, memories, leaves, its
vendor library and its speeds. ``septran.target`` reads the files; these are the frozen results."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Optional, Union

from septran.errors import SepTranError, SourceLoc


class TargetError(SepTranError):
    """A target folder is malformed."""

    stage = "target"


VENDOR_OPS = ("load", "store", "fill_zero", "sync", "declare", "release",
              "store_evict_first")  # a store whose lines the caches need not keep (copy eviction_policy: evict_first)


@dataclass(frozen=True)
class MemorySpace:
    name: str
    alloc: Optional[str]  # TileLang allocation function; None: tensors passed to the kernel
    suffix: str  # buffer names read like hand-written TileLang: A_shared, C_local
    capacity_bytes: Optional[int]  # per program instance
    per_stage: bool  # each pipeline stage holds its own copy
    # A memory TileLang does not know (a DSA's scratchpad): SepTran places each
    # buffer at a byte offset and moves data with the vendor calls in ``ops``.
    placed: bool = False
    align_bytes: int = 64
    ops: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # load, store, fill_zero, sync, declare, release
    # Spread over the threads (TileLang's fragments): T.Parallel reads an element only at the loop's own index.
    own_index_only: bool = False
    # The element types its ``ops`` have functions for (the vendor's septran_cpu_load_f32_f16...); a copy or clear of
    # another type stays TileLang's own (T.copy, T.clear). Empty: any.
    op_dtypes: tuple[str, ...] = ()
    # T.copy keywords that copies into or out of it take for an element type, where TileLang's default copy has no
    # implementation for it (sm90: TMA has no bool descriptor, so a bool tile is copied without TMA). A mapping's
    # own `copy:` keyword for the same option wins.
    copy_by_dtype: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def is_global(self) -> bool:
        return self.alloc is None and not self.placed


@dataclass(frozen=True)
class VendorLibrary:
    """A third-party shared library a vendor library links against, shipped inside a Python distribution.

    Located with ``importlib.util.find_spec`` (the package is never imported: data, not code).
    """

    package: str  # top-level import name of the package that holds the file (scipy_openblas32)
    file: str  # the library, relative to the package's folder (lib/libscipy_openblas.so)
    dist: str  # the distribution to install when the package is missing (scipy-openblas32)


@dataclass(frozen=True)
class Vendor:
    """A vendor's C library: built once, linked into every kernel, asked for errors after each call."""

    sources: tuple[Path, ...]
    cflags: tuple[str, ...]  # after the default gcc -std=c11 -O2 -fPIC: may add flags or override them (-O3)
    take_error: Optional[str]  # int32_t f(char* buf, int32_t len): the first error since the last call, 0 if none
    reset: Optional[str]  # void f(void): a fresh device state
    set_debug: Optional[str]  # void f(int32_t on)
    debug_violations: Optional[str]  # int32_t f(void): debug reports since the last call
    libraries: tuple[VendorLibrary, ...] = ()
    include: tuple[Path, ...] = ()  # headers force-included (-include) into every kernel of the target


@dataclass(frozen=True)
class Proc:
    name: str
    memories: tuple[str, ...]
    grid: bool  # a parallel range of this proc becomes the kernel grid
    # How the grid's programs may be spread over the machine's threads (OpenMP schedules, for targets
    # SepTran builds from C): the first is the default. Empty: the grid's programs run as the target runs them.
    schedules: tuple[str, ...] = ()


@dataclass(frozen=True)
class LeafImpl:
    """A target's implementation of a primitive: what it computes and the TileLang it emits."""

    name: str
    implements: tuple[str, ...]  # primitive names or kinds of primitives ("gemm", "elementwise", "reduce")
    meaning: str
    mems: Mapping[str, tuple[str, ...]]  # primitive parameter ("*": every one) -> memory spaces it accepts
    tile_multiple: Mapping[str, int]  # dimension letter of the primitive -> tile extents must be multiples
    templates: Mapping[str, str]  # what it implements -> TileLang, with {C}, {A}, ... for the arguments
    loc: SourceLoc
    flags: tuple[str, ...] = ()  # primitive flags it can honour (transpose_A, ...), rendered at {flags}
    accum_dtypes: tuple[str, ...] = ()  # the accumulator types it takes (empty: any the target has)
    # memory -> the element types an operand it reads may have there (fp32 fragments cannot feed a tensor-core gemm)
    dtypes_in: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    # kinds of reduction ("reduce", "reduce_axis") whose reduced tile extent must be a power of two (a butterfly
    # all-reduce across the threads that share a row)
    reduced_power_of_two: tuple[str, ...] = ()
    # what it implements (a primitive's name or kind) -> the combinations its functions are declared for, each
    # operand -> element types (a vendor's septran_cpu_reduce_max_f32 takes float* out and float* X; a tensor
    # core accumulates float16 from float16 operands only). The operands must all fit one combination; an
    # operand a combination does not list may be any type; nothing listed: any.
    operand_dtypes: Mapping[str, tuple[Mapping[str, tuple[str, ...]], ...]] = field(default_factory=lambda: MappingProxyType({}))
    # /proc/cpuinfo flags the host CPU must report for the leaf to run (a matrix unit: amx_tile, amx_bf16); a
    # mapping that binds it elsewhere is refused at the binding (lowering/bind.py)
    cpu_flags: tuple[str, ...] = ()

    def runs(self, prim) -> bool:
        return prim.name in self.implements or prim.kind in self.implements

    def template(self, prim) -> str:
        return self.templates.get(prim.name) or self.templates[prim.kind]

    def accepts(self, param: str) -> tuple[str, ...]:
        return self.mems.get(param) or self.mems.get("*") or ()


@dataclass(frozen=True)
class Perf:
    """Speeds and limits of the hardware, for the cost model (``perf:`` in target.yaml).

    Rates are of the whole device; the cost model divides by ``units``. See
    backends/README.md for each key and the target files for their sources.
    """

    units: int  # parallel units the grid spreads over (SMs, CUs, cores that run programs)
    peak_flops: Mapping[str, float]  # FLOP/s of gemm leaves, by operand dtype (the matrix unit's rate)
    vector_flops: float  # FLOP/s of elementwise code and reductions (evaluated in float32)
    bandwidth_bytes: float  # bytes/s between global memory and on-chip memory
    launch_seconds: float  # fixed cost of one call
    loc: SourceLoc
    overlap: bool = True  # copies overlap compute (async copies, many programs per unit); false: times add
    shared_space: Optional[str] = None  # the memory whose per-unit capacity limits resident programs
    shared_bytes_per_unit: Optional[int] = None
    shared_reserved_bytes: int = 0  # taken per resident program besides its buffers (CUDA: 1 KiB)
    threads_per_unit: Optional[int] = None
    programs_per_unit: Optional[int] = None  # the most programs a unit holds at once
    registers_per_unit: Optional[int] = None  # 32-bit registers (for register counts read from nvcc later)


@dataclass(frozen=True)
class Target:
    name: str
    folder: Path
    loc: SourceLoc
    description: str
    tilelang_target: Union[str, Mapping[str, Any]]
    language: str  # the TileLang dialect module the generated program imports
    execution_backend: str
    compile_flags: tuple[str, ...]
    pass_configs: Mapping[str, Any]
    torch_device: str
    detect: Mapping[str, Any]
    device_source_ext: str
    dtypes: tuple[str, ...]
    max_threads: Optional[int]  # None: the target has no thread count to choose
    thread_multiple: int
    procs: Mapping[str, Proc]
    memories: Mapping[str, MemorySpace]
    leaves: Mapping[str, LeafImpl]
    dtype_codes: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))  # how vendor calls name dtypes
    # dtypes the target takes by converting them: the runtime hands the program copies in the second type
    # (bfloat16 tensors computed in float32) and converts outputs back
    converts: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # dtypes a program may take unconverted where its mapping says ``keep_dtypes``, held as the bits of the second
    # type (TileLang's C has no bfloat16): only vendor functions named for the type touch them
    # (lowering/bits_dtypes.py refuses anything else)
    holds_as_bits: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # The most pipeline stages TileLang can give a loop whose trip count is not a constant (None: no limit).
    dynamic_pipeline_stages: Optional[int] = None
    # TileLang gives a pipelined loop whose copies are TMA loads a producer and a consumer warpgroup (warp
    # specialisation); where that loop sits inside another sequential loop, TileLang 0.1.15 moves the statements
    # before it (an accumulator's clear) into the consumer's body at every outer iteration: wrong results,
    # measured on an H100. True: such a nest is refused unless its copies are not TMA (lowering/tilelang_limits.py).
    nested_tma_pipelines_wrong: bool = False
    vendor: Optional[Vendor] = None
    # "tilelang": TileLang builds and calls the kernel; "c": TileLang lowers it to C and SepTran builds it
    # (build/c_builder.py: the grid's programs on every core, a call without TileLang's adapter).
    builder: str = "tilelang"
    copy_options: tuple[str, ...] = ()  # the T.copy keywords a mapping's `copy:` may pass (besides `via`)
    perf: Optional[Perf] = None  # speeds for the cost model (septran.tuning.cost); None: not given
    # TileLang's T.atomic_add works here: a mapping may ask programs to add into one output (`combine: atomic`).
    atomic_add: bool = False
    # A parallel_range inside a program becomes TileLang's T.Parallel where the lowering proves it may
    # (lowering/parallel_loops.py); False: loops in one order.
    parallel_in_program: bool = False
    # One program may hold two kernels launched one after the other (a mapping's `combine: two_kernels`).
    two_kernels: bool = False
    # A program whose walks over a dynamic size run once where that size fits one tile is made in two versions,
    # chosen at run time by the size (lowering/one_tile.py): a row then is staged once for all its passes.
    one_tile_versions: bool = False
    # Elementwise loops over a tile staged from one that overhangs its tensor run over its in-bounds part where no
    # reader needs the rest (lowering/clip_staged.py): their extents are then expressions, which plain loops take.
    clip_staged_loops: bool = False
    # Tiles of one tensor, in one memory, type and shape, whose lives do not overlap share a buffer
    # (lowering/reuse_buffers.py): a row walked three times is staged in one buffer, not three. Where every buffer
    # lives for the whole program.
    reuse_buffers: bool = False
    # The thread count of a program whose mapping names none (``threads: {default: 128}``); None: it must name one.
    default_threads: Optional[int] = None
    # Model-level fusions whose kernels this target's shipped mappings have run against torch
    # (``model_fusions: [gemm_residual]``): the model rewrite makes no other fusion here.
    model_fusions: tuple[str, ...] = ()

    @property
    def index_bits(self) -> int:
        """The width of TileLang's index arithmetic for this target (its ``tl.config_index_bitwidth``)."""
        return int(self.pass_configs.get("tl.config_index_bitwidth", 32))

    @property
    def has_threads(self) -> bool:
        return self.max_threads is not None

    def memory(self, name: str) -> MemorySpace:
        return self.memories[name]
