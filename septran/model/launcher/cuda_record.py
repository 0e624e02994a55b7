"""Recording a segment on a GPU target: as on cpu (``record``), but a kernel is called through its host entry.

A step's kernel on a GPU target is TileLang's ``JITKernel`` (``execution_backend: tvm_ffi``); its host entry is
a TVM-FFI function taking one ``DLTensor*`` per parameter (``cuda_source``). The recorder writes down, per
parameter, the tensor's place and its shape as expressions; the kernel binds its dynamic sizes from those shapes.
What the launcher cannot pass that way is ``Unsupported`` and the segment keeps its steps: a kernel with another
execution backend, with outputs TileLang allocates or scalar parameters, a parameter whose dtype DLPack's table
here lacks, a dimension the kernel was built static in that varies in the graph (the kernel would refuse the
next size), or a tensor that is not contiguous by its expressions (the launcher passes contiguous strides).
"""
from __future__ import annotations

from septran.model.launcher.cexpr import Unsupported
from septran.model.launcher.cuda_source import DL_TYPES, KernelCall, Tensor
from septran.model.launcher.record import Recorder
from septran.model.launcher.views import contiguous_strides, same


def host_entry(fn):
    """The TVM-FFI function a TileLang ``tvm_ffi`` kernel's adapter calls (what ``JITKernel(*tensors)`` runs): the
    entry ``main`` of its executable, a ``tvm.runtime.Executable`` when just compiled (jitted into a module) or the
    module itself when TileLang loaded it from its cache."""
    executable = fn.adapter._get_executable()
    module = executable.jit() if type(executable).__name__ == "Executable" else executable
    return module.main


def _static(dim) -> bool:
    return isinstance(dim, int) or type(dim).__name__ == "IntImm"


class CudaRecorder(Recorder):
    """``record.Recorder`` whose kernel calls become ``cuda_source.KernelCall``s (``kernels``: (handle, the
    TVM-FFI function object, the JITKernel) per distinct kernel; the objects keep the handle valid)."""

    def _glue_op(self, n, env: dict) -> bool:
        """The glue's loops are host C (glue.py): on a device the segment keeps its steps (``segments.cut`` already
        ends a segment at a node on another device than the host, so this is a second fence)."""
        from septran.model.launcher import glue

        if n.target in glue._OPS:
            raise Unsupported(f"{n.name}: the launcher's glue runs on the host, not on a CUDA device")
        return False

    @staticmethod
    def _converts(lay) -> bool:
        """The conversions around a kernel are host loops (record.Recorder._converted): not on a device."""
        return False

    def _takes(self, fn) -> bool:
        adapter = getattr(fn, "adapter", None)
        return getattr(fn, "execution_backend", None) == "tvm_ffi" and adapter is not None and \
            not getattr(adapter, "result_idx", None)

    def _call(self, n, plan, fn, params: list) -> None:
        kernel_params = list(fn.adapter.params)
        if len(kernel_params) != len(params):
            raise Unsupported(f"{n.name}: its kernel takes {len(kernel_params)} parameters, the plan passes "
                              f"{len(params)} tensors")
        args = []
        for k, (d, p) in enumerate(zip(params, kernel_params)):
            if d.dtype not in DL_TYPES or getattr(p, "shape", None) is None or len(p.shape) != len(d.sizes):
                raise Unsupported(f"{n.name}: parameter {k} ({d.dtype}) is no tensor the launcher can describe")
            for dim, e in zip(p.shape, d.sizes):
                if _static(dim) and e.free_symbols:
                    raise Unsupported(f"{n.name}: its kernel is static in a dimension that varies ({e})")
            dense = contiguous_strides(d.sizes)
            if not all(same(a, b) for a, b, s in zip(d.strides, dense, d.sizes) if not (s.is_number and s == 1)):
                raise Unsupported(f"{n.name}: parameter {k} is not contiguous by its expressions ({d.strides})")
            args.append(Tensor(self._ptr(d), d.sizes, dense, d.dtype))
        index = next((i for i, entry in enumerate(self.kernels) if entry[2] is fn), None)
        if index is None:
            entry = host_entry(fn)
            self.kernels.append((entry.__chandle__(), entry, fn))
            index = len(self.kernels) - 1
        self.program.ops.append(KernelCall(index, tuple(args)))
        if plan.check_errors is not None:  # the vendor's error channel, asked once per launch (per target)
            target = n.target.kernel.target
            if all(t is not target for t in self.checks):
                self.checks.append(target)

