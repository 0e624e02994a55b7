"""Issue 23, item 3: the design notes' own spelling runs as written (the package's name aside).

examples/design_gemm/ holds the design's GEMM example as written: `import task_lang as task`, `shape_from="A"`
partitions, the grid's `parallel_range` inside the block task, and a mapping with no `target:` whose host
instance names a `gemm_host_logic` the logic never defines. Its CPU twin has the same shape (LOCAL memories,
gemm_leaf_cpu).
"""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import septran
from conftest import GEMM_LOGIC, REPO, mapping_path, needs_gpu
from septran.expr import Tunable
from septran.frontend import build_graph

DESIGN = REPO / "examples" / "design_gemm"
LOGIC = DESIGN / "gemm_logic.py"
GPU_MAPPING = DESIGN / "gemm_on_nvidia_gpu.mapping.yaml"
CPU_MAPPING = DESIGN / "gemm_on_cpu.mapping.yaml"


def test_the_example_is_the_designs_text():
    """The files are the design's, byte for byte (main.py: but the package's name)."""
    logic = LOGIC.read_text()
    assert logic.startswith("import task_lang as task\n") and 'shape_from="A"' in logic and "Ap[i,:]" in logic
    mapping = GPU_MAPPING.read_text()
    assert "target:" not in mapping and "task_name: gemm_host_logic" in mapping and "threads" not in mapping
    assert "def gemm_host_logic" not in logic


def test_task_lang_is_an_alias_of_septran_task():
    import task_lang

    assert task_lang is septran.task and task_lang.partition is septran.task.partition


@pytest.mark.build
def test_the_designs_example_computes_a_matmul_on_the_cpu(monkeypatch):
    monkeypatch.delenv("SEPTRAN_TARGET", raising=False)
    kernel = septran.compile(logic_file=str(LOGIC), mapping_file=str(CPU_MAPPING), target="cpu")
    assert kernel.target.name == "cpu" and kernel.signature() == "gemm_host_logic(A, B) -> (C)"
    a, b = torch.randn(100, 72), torch.randn(72, 45)  # ragged against block_size 32 everywhere
    c = kernel(a, b)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    assert "for k in T.serial(T.ceildiv(A_dim1, block_size))" in kernel.tilelang_source


@pytest.mark.build
def test_the_verbatim_mapping_pipelines_tensor_core_gemms_on_sm90(monkeypatch):
    monkeypatch.setenv("SEPTRAN_TARGET", "sm90")
    kernel = septran.compile(logic_file=LOGIC, mapping_file=GPU_MAPPING)
    src = kernel.specialize(A=((1024, 1024), "float16"), B=((1024, 1024), "float16")).tilelang_source
    assert "T.Pipelined(T.ceildiv(A_dim1, block_size), num_stages=3)" in src and "T.gemm(A_shared, B_shared, C_local)" in src
    assert "threads=128" in src  # sm90's threads.default: the mapping names none
    assert "T.alloc_shared((block_size, block_size)" in src and "block_size = 128" in src


@pytest.mark.build
def test_the_compiles_target_names_a_mapping_without_one(monkeypatch):
    monkeypatch.setenv("SEPTRAN_TARGET", "cpu")  # the argument wins
    kernel = septran.compile(logic_file=LOGIC, mapping_file=GPU_MAPPING, target="sm80")
    assert kernel.target.name == "sm80"
    # sm80 has 163 KiB of shared memory: the design's 128 x 128 tiles in 3 stages take 192 KiB, refused at the mems line
    with pytest.raises(septran.LoweringError, match="SHARED needs 196608 bytes per program") as info:
        kernel.specialize(A=((256, 256), "float16"), B=((256, 256), "float16"))
    assert info.value.loc.file == str(GPU_MAPPING) and info.value.loc.line == 16


def test_a_mapping_whose_target_disagrees_with_the_compiles_is_refused_naming_both(tmp_path):
    named = tmp_path / "m.yaml"
    named.write_text("target: sm90\n" + CPU_MAPPING.read_text())
    with pytest.raises(septran.MappingError) as info:
        septran.compile(logic_file=LOGIC, mapping_file=named, target="cpu")
    text = str(info.value)
    assert "target='cpu'" in text and "`target: sm90`" in text and info.value.loc.line == 1


def test_a_mapping_without_target_and_an_unknown_target_is_refused(monkeypatch):
    monkeypatch.setenv("SEPTRAN_TARGET", "sm99")
    with pytest.raises(septran.SepTranError, match="sm99"):
        septran.compile(logic_file=LOGIC, mapping_file=CPU_MAPPING)


def test_the_implicit_host_is_the_block_tasks_grid(monkeypatch):
    monkeypatch.setenv("SEPTRAN_TARGET", "cpu")
    kernel = septran.compile(logic_file=LOGIC, mapping_file=CPU_MAPPING)
    graph = kernel.graph
    assert list(graph.tasks) == ["gemm_host_logic", "gemm_block_logic", "gemm_leaf_logic"]
    host, block = graph.tasks["gemm_host_logic"], graph.tasks["gemm_block_logic"]
    (grid,) = host.body
    assert grid.parallel and grid.body[0].callee == "gemm_block_logic"
    (k_loop,) = block.body
    assert not k_loop.parallel and k_loop.body[0].callee == "gemm_leaf_logic"  # whole-K panels: a loop over K tiles
    assert [p.tile for p in block.partitions] == [(None, Tunable("block_size")), (Tunable("block_size"), None)]


# shape_from, and its mistakes ---------------------------------------------------------------------------------------
def _trace(source: str, tmp_path, name: str):
    path = tmp_path / f"{name}_logic.py"
    path.write_text(source)
    from septran.runtime.select import load_logic_file

    return build_graph(getattr(load_logic_file(path), name))


LEAF = """
import task_lang as task

@task.define(leaf=True)
def leaf(C, A, B):
    task.call_primitive("gemm", C, A, B)
"""


def test_shape_from_cuts_block_size_tiles(tmp_path):
    graph = _trace(LEAF + """
@task.define
def blk(C, A, B):
    Cp = task.partition(C, by="blocks", shape_from="A")
    for i, j in task.parallel_range(Cp.shape):
        task.launch(leaf, Cp[i, j], A, B)
""", tmp_path, "blk")
    (part,) = graph.tasks["blk"].partitions
    assert [str(t) for t in part.tile] == ["block_size", "block_size"]


@pytest.mark.parametrize("call, phrase", [
    ('task.partition(C, by="blocks", shape_from="Z")', "shape_from='Z' names no tensor parameter of blk"),
    ('task.partition(C, by="blocks", shape_from="A", tile=(4, 4))', "tile= or shape_from=, not both"),
    ('task.partition(C, by="blocks", shape="A")', "unknown keyword 'shape'"),
])
def test_shape_from_mistakes_are_located(tmp_path, call, phrase):
    with pytest.raises(septran.FrontendError) as info:
        _trace(LEAF + f"""
@task.define
def blk(C, A, B):
    Cp = {call}
    task.launch(leaf, C, A, B)
""", tmp_path, "blk")
    assert phrase in str(info.value) and info.value.loc.line == 10 and "Traceback" not in str(info.value)


# an explicit host that launches one program: a grid of one ----------------------------------------------------------
ONE_PROGRAM = LEAF + """
@task.define
def blk(C, A, B):
    Ap = task.partition(A, by="blocks", tile=(None, 8))
    Bp = task.partition(B, by="blocks", tile=(8, None))
    for k in task.range(Ap.shape[1]):
        task.launch(leaf, C, Ap[0, k], Bp[k, 0])

@task.define
def host(C, A, B):
    task.launch(blk, C, A, B)
"""

ONE_PROGRAM_MAPPING = """
target: cpu
entrypoint: h
task_mappings:
  h: {task_name: host, proc: HOST, mems: {C: GLOBAL, A: GLOBAL, B: GLOBAL}, calls: {blk: b}}
  b: {task_name: blk, proc: BLOCK, mems: {C: LOCAL, A: LOCAL, B: LOCAL}, leaf_task_bindings: {leaf: gemm_leaf_cpu}}
"""


@pytest.mark.build
def test_a_host_that_launches_one_program_is_a_grid_of_one(tmp_path):
    path = tmp_path / "one_logic.py"
    path.write_text(ONE_PROGRAM)
    kernel = septran.compile(logic_file=path, mapping_file=ONE_PROGRAM_MAPPING)
    a, b = torch.randn(12, 20), torch.randn(20, 7)
    torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert "with T.Kernel(1" in kernel.tilelang_source


def test_an_implicit_host_over_a_task_without_a_grid_launches_it_once(tmp_path):
    path = tmp_path / "blk_logic.py"
    path.write_text(ONE_PROGRAM.split("@task.define\ndef host")[0])
    mapping = ONE_PROGRAM_MAPPING.replace("task_name: host", "task_name: never_defined")
    kernel = septran.compile(logic_file=path, mapping_file=mapping)
    (grid,) = kernel.graph.tasks["never_defined"].body
    assert grid.parallel and str(grid.extents[0]) == "1" and grid.body[0].callee == "blk"


def test_an_unknown_host_task_that_calls_no_logic_task_is_still_reported(tmp_path):
    path = tmp_path / "blk_logic.py"
    path.write_text(ONE_PROGRAM)
    mapping = ONE_PROGRAM_MAPPING.replace("task_name: host", "task_name: hots").replace("calls: {blk: b}", "calls: {blc: b}")
    with pytest.raises(septran.MappingError, match="the logic has no task 'hots'"):
        septran.compile(logic_file=path, mapping_file=mapping)


# the design's main, as written, on a GPU ---------------------------------------------------------------------------
@needs_gpu
@pytest.mark.build
def test_the_designs_main_runs_as_written():
    code = (DESIGN / "main.py").read_text() + "\nassert (c.float() - a.float() @ b.float()).abs().max() < 0.5\n"
    subprocess.run([sys.executable, "-c", code], cwd=DESIGN, check=True, timeout=600)


def test_the_wheel_ships_task_lang_and_the_commands():
    tomllib = pytest.importorskip("tomllib")  # (Python 3.11)

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "task_lang" in config["py-modules"] and "septran.commands" in config["packages"]


def test_a_search_space_without_target_keeps_the_compiles_at_every_point():
    text = (REPO / "mappings" / "cpu" / "gemm.yaml").read_text().replace("target: cpu\n", "")
    kernel = septran.compile(logic_file=REPO / "septran" / "ops" / "logic" / "gemm.py", mapping=text, target="cpu")
    assert kernel.mapping.space.size > 1 and kernel.mapping.target.value == "cpu"
    assert kernel.at({}).mapping.target.value == "cpu"  # a point is parsed again from the edited file


@pytest.mark.parametrize("default, ok", [("128", True), ("96", False), ("2048", False)])
def test_a_targets_default_thread_count_is_one_it_takes(tmp_path, default, ok):
    from septran.target import TargetError, load_target_file

    text = (REPO / "backends" / "sm90" / "target.yaml").read_text()
    assert "default: 128}" in text
    (tmp_path / "target.yaml").write_text(text.replace("default: 128}", f"default: {default}}}"))
    if ok:
        assert load_target_file(tmp_path / "target.yaml").default_threads == int(default)
    else:
        with pytest.raises(TargetError, match="threads.default must be a multiple of 128 up to 1024"):
            load_target_file(tmp_path / "target.yaml")


def test_septran_target_disagreeing_with_a_passed_mappings_target_is_refused_naming_both(monkeypatch):
    """A mapping the caller passes names cpu; SEPTRAN_TARGET names sm90 and no target= settles it: refused at the
    mapping's `target:` line (SEPTRAN_MAPPING, which forces one file whatever the target, stays the exception)."""
    monkeypatch.setenv("SEPTRAN_TARGET", "sm90")
    monkeypatch.delenv("SEPTRAN_MAPPING", raising=False)
    with pytest.raises(septran.MappingError, match=r"SEPTRAN_TARGET=sm90 and .*`target: cpu` disagree") as info:
        septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu"))
    assert info.value.loc is not None and info.value.loc.file == str(mapping_path("cpu"))
    assert "target='cpu'" in str(info.value)
    assert septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu"), target="cpu").target.name == "cpu"
