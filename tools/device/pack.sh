#!/bin/bash
# Packs what `make gpu` (tools/device/run.sh) and the host CPU's checks (tools/device/cpu.sh) need on a lent GPU
# machine that has torch but no network and no SepTran set-up: TileLang 0.1.15 and its TVM-FFI, z3 and DLPack
# extension, optuna with its dependencies, and scipy-openblas32, as cp312 wheels unpacked into one tar.xz (about
# 47 MB; a call carries at most 64 MiB with the repository). Run here, once:
#   bash tools/device/pack.sh            -> .gpu/site.tar.xz  (.gpu/ is ignored by git: .git/info/exclude)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.gpu/' .git/info/exclude || echo /.gpu/ >> .git/info/exclude
work=$(mktemp -d)
pins=(tilelang==0.1.15 apache-tvm-ffi==0.1.12 z3-solver==4.15.4.0 torch_c_dlpack_ext==0.1.5
      optuna==5.0.0 alembic==1.20.1 sqlalchemy==2.1.9 colorlog==6.12.0 mako==1.4.3 greenlet==3.5.6
      scipy-openblas32==0.3.34.481.3)  # OpenBLAS: the cpu target's vendor library (tools/device/cpu.sh)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$work/whl" "${pins[@]}"
mkdir -p "$work/site"
for w in "$work"/whl/*.whl; do python3 -m zipfile -e "$w" "$work/site"; done
# z3's wheel holds its library twice and a 22 MB binary: keep one library, link the other name to it
rm -rf "$work"/site/z3_solver-*.data "$work/site/z3/lib/libz3.so"
ln -s libz3.so.4.15 "$work/site/z3/lib/libz3.so"
find "$work/site" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p .gpu
tar cf - -C "$work/site" . | xz -T0 -6 > .gpu/site.tar.xz
rm -rf "$work"
ls -la .gpu/site.tar.xz
