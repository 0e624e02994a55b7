"""An installed wheel finds its targets and mappings; shared code never names a target."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

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
    assert "septran/backends/dsa_acme/vendor/acme_npu.h" in names


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
