"""The front door: target and mapping selection from the environment, dumps, jit, explain."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import septran
from septran import task
from conftest import GEMM_LOGIC, first_point_text, mapping_path

REPO_TESTS = Path(__file__).resolve().parent


def test_default_target_without_gpu_is_cpu(monkeypatch):
    monkeypatch.delenv("SEPTRAN_TARGET", raising=False)
    monkeypatch.delenv("SEPTRAN_MAPPING", raising=False)
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    kernel = septran.compile(logic_file=GEMM_LOGIC)
    assert kernel.target.name == "cpu"
    assert kernel.mapping.file == str(mapping_path("cpu"))


@pytest.mark.parametrize("target", ["sm80", "sm90", "gfx942", "cpu"])
def test_septran_target_selects_the_mapping(monkeypatch, target):
    monkeypatch.setenv("SEPTRAN_TARGET", target)
    monkeypatch.delenv("SEPTRAN_MAPPING", raising=False)
    kernel = septran.compile(logic_file=GEMM_LOGIC)
    assert kernel.target.name == target
    assert kernel.mapping.file.endswith(f"mappings/{target}/gemm.yaml")


def test_septran_mapping_forces_one_file(monkeypatch, tmp_path):
    custom = tmp_path / "mine.yaml"
    custom.write_text(first_point_text("cpu").replace("BM: 256", "BM: 16"))
    monkeypatch.setenv("SEPTRAN_TARGET", "sm90")  # the forced file wins over the target's mapping
    monkeypatch.setenv("SEPTRAN_MAPPING", str(custom))
    kernel = septran.compile(logic_file=GEMM_LOGIC)
    assert kernel.mapping.file == str(custom)
    assert "BM = 16" in kernel.specialize(A=((40, 30), "float32"), B=((30, 20), "float32")).tilelang_source


def test_septran_mapping_path_adds_user_folders(monkeypatch, tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "gemm.yaml").write_text(first_point_text("cpu").replace("BK: 32", "BK: 8"))
    monkeypatch.setenv("SEPTRAN_TARGET", "cpu")
    monkeypatch.delenv("SEPTRAN_MAPPING", raising=False)
    monkeypatch.setenv("SEPTRAN_MAPPING_PATH", str(tmp_path))
    kernel = septran.compile(logic_file=GEMM_LOGIC)
    assert kernel.mapping.file == str(tmp_path / "cpu" / "gemm.yaml")


def test_missing_mapping_says_where_it_looked(monkeypatch, tmp_path):
    logic = tmp_path / "axpy_like.py"
    shutil.copy(GEMM_LOGIC, logic)
    monkeypatch.setenv("SEPTRAN_TARGET", "cpu")
    monkeypatch.delenv("SEPTRAN_MAPPING", raising=False)
    with pytest.raises(septran.MappingError, match=r"(?s)no mapping of operator 'axpy_like' for target 'cpu'.*cpu/axpy_like.yaml"):
        septran.compile(logic_file=logic)


def test_compile_takes_task_functions_and_modules():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gemm_logic_for_test", GEMM_LOGIC)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    by_fn = septran.compile(module.gemm_host_logic, mapping_path("cpu"))
    by_module = septran.compile(module, mapping_file=mapping_path("cpu"))
    assert by_fn.graph.entry == by_module.graph.entry == "gemm_host_logic"
    with pytest.raises(septran.MappingError, match="asked to compile for 'sm90' with a mapping for 'cpu'"):
        septran.compile(module.gemm_host_logic, mapping_path("cpu"), target="sm90")


@pytest.mark.build
def test_dump_dir_gets_every_stage(monkeypatch, tmp_path):
    monkeypatch.setenv("SEPTRAN_DUMP_DIR", str(tmp_path))
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu"))
    a, b = torch.randn(20, 12), torch.randn(12, 8)
    torch.testing.assert_close(kernel(a, b), a @ b)
    names = sorted(p.name for p in tmp_path.iterdir())
    stem = "gemm_host.cpu.20x8_20x12_12x8.float32"
    passes = ("00-taskgraph", "01-constants", "02-flatten", "03-verify", "04-stage", "05-place", "06-tileprogram")
    assert names == sorted([f"{stem}.{s}.txt" for s in passes] + [f"{stem}.device.c", f"{stem}.tilelang.py"])
    assert (tmp_path / f"{stem}.tilelang.py").read_text() == kernel.tilelang_source
    assert "task gemm_block_logic(C: reduce" in (tmp_path / f"{stem}.00-taskgraph.txt").read_text()
    assert "int32_t gemm_host_kernel" in (tmp_path / f"{stem}.device.c").read_text()


@pytest.mark.build
def test_source_only_for_gpu_targets_dumps_device_code(monkeypatch, tmp_path):
    monkeypatch.setenv("SEPTRAN_DUMP_DIR", str(tmp_path))
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("sm80"))
    variant = kernel.specialize(A=((256, 64), "float16"), B=((64, 128), "float16"))
    assert "__global__" in variant.device_source
    assert (tmp_path / f"{variant.tag}.device.cu").read_text() == variant.device_source


def test_explain_names_mapping_keys_and_lines():
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("sm90"))
    kernel.specialize(A=((512, 256), "float16"), B=((256, 512), "float16"))
    text = kernel.explain()
    yaml_lines = first_point_text("sm90").splitlines()
    mems_line = next(i for i, l in enumerate(yaml_lines, 1) if l.strip().startswith("mems:") and "REGISTER" in l)
    pipe_line = next(i for i, l in enumerate(yaml_lines, 1) if l.strip().startswith("pipeline:"))
    assert "alloc C_local: (BM, BN) float32 in REGISTER" in text
    assert f"gemm.yaml:{mems_line}:" in text
    assert "loop k in 0..ceildiv(A_dim1, BK) (pipelined, 3 stages)" in text
    assert f"gemm.yaml:{pipe_line}:" in text
    assert "copy A[(by * BM):+BM, (k * BK):+BK] -> A_shared" in text
    assert "copy C out once, after its last write (reduce)" in text
    assert "gemm_leaf_logic -> gemm_leaf_tensorcore" in text
    # Read-only tiles are never copied back.
    assert "A_shared -> A" not in text and "B_shared -> B" not in text


@pytest.mark.build
def test_copy_policy_reaches_t_copy(tmp_path):
    text = first_point_text("sm90").replace(
        "    pipeline: 3\n", "    pipeline: 3\n    copy: {A: {disable_tma: true, eviction_policy: evict_first}}\n"
    )
    custom = tmp_path / "gemm.yaml"
    custom.write_text(text)
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=custom)
    variant = kernel.specialize(A=((512, 256), "float16"), B=((256, 512), "float16"))
    assert "T.copy(A[by * BM, k * BK], A_shared, disable_tma=True, eviction_policy='evict_first')" in variant.tilelang_source
    assert "T.copy(B[k * BK, bx * BN], B_shared)\n" in variant.tilelang_source
    # TileLang honours it: only B still arrives by TMA (one descriptor, one bulk load instead of two).
    plain = kernel_default_sm90().specialize(A=((512, 256), "float16"), B=((256, 512), "float16")).device_source
    cuda = variant.device_source
    assert plain.count("tl::tma_load(") == 2 and plain.count("prefetch_tma_descriptor") == 2
    assert cuda.count("tl::tma_load(") == 1 and cuda.count("prefetch_tma_descriptor") == 1


def kernel_default_sm90():
    return septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("sm90"))


@task.define(leaf=True)
def _leaf(C, A, B):
    task.call_primitive("gemm", C, A, B)


@task.define
def _block(C, A, B):
    Ap = task.partition(A, by="blocks", tile=("BM", "BK"))
    Bp = task.partition(B, by="blocks", tile=("BK", "BN"))
    for k in task.range(Ap.shape[1]):
        task.launch(_leaf, C, Ap[0, k], Bp[k, 0])


@pytest.mark.build
def test_jit_decorator_in_a_notebook(monkeypatch, tmp_path):
    """@septran.jit above @task.define: compiles on first call with the environment's mapping."""
    mapping = tmp_path / "nb.yaml"
    mapping.write_text(
        first_point_text("cpu")
        .replace("gemm_host_logic", "nb_gemm").replace("gemm_block_logic", "_block").replace("gemm_leaf_logic", "_leaf")
    )
    monkeypatch.setenv("SEPTRAN_MAPPING", str(mapping))

    @septran.jit
    @task.define
    def nb_gemm(C, A, B):
        Cp = task.partition(C, by="blocks", tile=("BM", "BN"))
        Ap = task.partition(A, by="blocks", tile=("BM", None))
        Bp = task.partition(B, by="blocks", tile=(None, "BN"))
        for i, j in task.parallel_range(Cp.shape):
            task.launch(_block, Cp[i, j], Ap[i, 0], Bp[0, j])

    globals()["nb_gemm"] = nb_gemm.fn  # a notebook cell's tasks live in its module
    a, b = torch.randn(70, 50), torch.randn(50, 30)
    torch.testing.assert_close(nb_gemm(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert "def nb_gemm(" in nb_gemm.tilelang_source
    assert "gemm_host_kernel" not in nb_gemm.device_source


@pytest.mark.build
def test_full_slices_lower_like_whole_dimensions():
    """`Ap[i, :]` over a tiled dimension is the whole row of tiles: the same program as tile=(BM, None)."""
    slices = REPO_TESTS / "logic_cases" / "gemm_full_slices.py"
    shapes = dict(A=((300, 200), "float32"), B=((200, 100), "float32"))
    ours = septran.compile(logic_file=slices, mapping_file=mapping_path("cpu")).specialize(**shapes)
    seed = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu")).specialize(**shapes)
    body = lambda src: src[src.index("@T.prim_func"):]  # noqa: E731 - the headers name different files
    assert body(ours.tilelang_source) == body(seed.tilelang_source)
    a, b = torch.randn(70, 50), torch.randn(50, 30)
    torch.testing.assert_close(septran.compile(logic_file=slices, mapping_file=mapping_path("cpu"))(a, b), a @ b,
                               rtol=1e-4, atol=1e-4)


def test_third_party_targets_register_through_entry_points(monkeypatch, tmp_path):
    import shutil
    from importlib import metadata

    from septran import resources

    folder = tmp_path / "my_npu"
    shutil.copytree(REPO_TESTS.parent / "backends" / "cpu", folder)
    (folder / "target.yaml").write_text((folder / "target.yaml").read_text().replace("name: cpu", "name: my_npu"))
    ep = metadata.EntryPoint(name="my_npu", value="os.path:curdir", group="septran.targets")
    monkeypatch.setattr(metadata, "entry_points", lambda group=None: [ep] if group == "septran.targets" else [])
    monkeypatch.setattr(metadata.EntryPoint, "load", lambda self: str(folder))
    assert resources.target_folders()["my_npu"] == folder
    assert septran.target.load_target("my_npu").name == "my_npu"
