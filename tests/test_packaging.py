"""An installed wheel finds its targets and mappings; shared code never names a target."""
from __future__ import annotations

import ast
import os
import json
import subprocess
import sys
import sysconfig
import textwrap
import time
import venv
import zipfile
from pathlib import Path

import pytest

from conftest import REPO
from support import lowering_records

pytestmark = pytest.mark.build  # builds a wheel (pip wheel)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
    )
    return next(out.glob("septran-*.whl"))


def test_wheel_carries_targets_and_mappings(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for target in ("cpu", "sm80", "sm90", "gfx942", "dsa_ref", "dsa_acme"):
        assert f"septran/backends/{target}/target.yaml" in names
        assert f"septran/mappings/{target}/gemm.yaml" in names
    assert "septran/backends/dsa_ref/vendor/dsa_ref.c" in names
    assert "septran/build/fast_call.cpp" in names  # the C entry of kernel calls, built on first use
    assert "septran/backends/dsa_acme/vendor/acme_npu.h" in names


def test_wheel_carries_the_kernel_library(wheel):
    """The model level's operators, their logic files and their mappings are in the wheel; no *_model copies."""
    names = set(zipfile.ZipFile(wheel).namelist())
    for op in ("gemm", "gemm_epilogue", "bmm", "attention", "layernorm", "rmsnorm", "softmax", "rope", "swiglu_mlp",
               "elementwise_chain"):
        assert f"septran/ops/logic/{op}.py" in names
        assert f"septran/mappings/cpu/{op}.yaml" in names
    for module in ("kernels", "gemm", "bmm", "attention", "norms", "rope", "swiglu", "elementwise"):
        assert f"septran/ops/{module}.py" in names
    assert not [n for n in names if n.endswith("_model.yaml") or n.startswith("septran/examples/")]


# Runs in a fresh venv with the wheel installed, from a folder outside the repository: examples/llama_block's run
# script (its model and the shared runner are the repository's; everything SepTran is the wheel's).
_LLAMA_PROBE = textwrap.dedent("""
    import importlib.util, json, sys
    import septran
    sys.path.insert(0, {examples!r})
    spec = importlib.util.spec_from_file_location("run_llama_block", {script!r})
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    result = run.main(hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=172, prompt=9, steps=2,
                      backend="septran", dtype="float32", repeats=0, quiet=True)
    import septran.ops.kernels
    print(json.dumps({{"septran": septran.__file__, "logic": septran.ops.kernels.logic("gemm").__file__,
                      "ok": bool(result["ok"]), "shares": [r.septran_share for r in result["reports"]],
                      "runs": sorted({{r.runs for rep in result["reports"] for r in rep.rows}})}}))
""")


@pytest.mark.slow
def test_installed_wheel_runs_the_model_level(wheel, tmp_path):
    """A wheel in a fresh venv runs the Llama block through torch.compile(backend="septran"), every FLOP of it in
    SepTran kernels: the kernel library (logic and mappings) ships in the wheel, not in the repository's examples.

    The venv sees the test's installed dependencies (torch, tilelang, ...) through a .pth naming this
    interpreter's site-packages: a folder a .pth names joins sys.path, but the .pth files inside it (the editable
    septran's finder) are not run, so ``import septran`` can only find the wheel."""
    start = time.monotonic()
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "outer_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    str(wheel)], check=True, capture_output=True)
    work = tmp_path / "work"
    work.mkdir()
    probe = work / "probe.py"
    probe.write_text(_LLAMA_PROBE.format(examples=str(REPO / "examples"),
                                         script=str(REPO / "examples" / "llama_block" / "run_llama_block.py")))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SEPTRAN_MAPPING", "SEPTRAN_MAPPING_PATH")}
    # The suite's lowering records (a folder with only a sitecustomize: the wheel's septran is the one imported)
    env = lowering_records.child_env(env)
    run = subprocess.run([str(python), str(probe)], cwd=work, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-4000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert Path(out["septran"]).is_relative_to(site), out["septran"]
    assert Path(out["logic"]) == site / "septran" / "ops" / "logic" / "gemm.py"
    assert out["ok"]
    assert out["shares"] and all(share == 1.0 for share in out["shares"]), out
    assert not [r for r in out["runs"] if "cannot run" in r or "refus" in r], out["runs"]
    print(f"wheel venv + Llama block: {time.monotonic() - start:.1f} s")


def test_installed_wheel_resolves_mappings_outside_the_source_tree(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    probe = (
        "import septran, septran.resources as r, septran.runtime.select as s;"
        "print(septran.__file__);"
        "print(sorted(r.target_folders()));"
        "print(s.choose_mapping('gemm', None, 'sm90').file)"
    )
    env = dict(os.environ, PYTHONPATH=str(site), SEPTRAN_TARGET="sm90")
    env.pop("SEPTRAN_MAPPING", None)
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    assert lines[0].startswith(str(site))
    assert lines[1] == str(sorted(p.name for p in (REPO / "backends").iterdir() if (p / "target.yaml").exists()))
    assert lines[2] == str(site / "septran" / "mappings" / "sm90" / "gemm.yaml")


def test_no_shared_code_names_a_target():
    """Everything that differs between targets lives in backends/ and mappings/ (design.md section 2)."""
    targets = {p.name for p in (REPO / "backends").iterdir() if (p / "target.yaml").exists()}
    offenders = []
    for path in sorted((REPO / "septran").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in targets:
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    assert not offenders, "target names in shared code:\n" + "\n".join(offenders)
