"""Which machine a time was measured on: the part of a tuning key that names the hardware.

A target name (``sm90``) says which code is generated, not where it ran: an
H100 and an H200 share ``sm90`` but not their memory bandwidth, so a record
from one must never be reused on the other (TileLang's autotuner keys by the
arch string and does). The identity therefore holds what changes a
measurement: for a GPU its name, compute capability, SM count, memory and
CUDA/HIP version; for a CPU its model, the instruction-set flags a compiler
can use, and the core count.

The identity is a flat dict of str and int values, so that it is hashable
once sorted into pairs, and it prints the same on every run
(``device_string``).
"""
from __future__ import annotations

import functools
import json
import logging
import os
import platform
from pathlib import Path
from typing import Union

log = logging.getLogger(__name__)

DeviceIdentity = dict[str, Union[str, int]]

# /proc/cpuinfo flags that decide what code a compiler may emit (x86 "flags", Arm "Features").
CODEGEN_FLAGS = frozenset({
    "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c",
    "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512cd", "avx512ifma", "avx512vbmi", "avx512_vbmi2",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "avx_vnni_int8", "avx_ne_convert",
    "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "amx_complex",
    "asimd", "asimdhp", "asimddp", "fphp", "sve", "sve2", "svebf16", "bf16", "i8mm", "sme", "sme2",
})
_CPUINFO = Path("/proc/cpuinfo")
_MODEL_FIELDS = ("model name", "Model Name", "cpu model", "uarch", "Hardware", "CPU part")
_FLAG_FIELDS = ("flags", "Features", "isa")
_ID_FIELDS = ("vendor_id", "cpu family", "model", "CPU implementer", "CPU variant")
_GPU_KIND = "cuda"  # torch's device name for NVIDIA and AMD GPUs alike


def device_identity(target_device: str) -> DeviceIdentity:
    """The identity of the device a target's kernels run on; ``target_device`` is the target's torch device.

    ``"cuda"`` describes the current GPU (``torch.cuda.current_device()``);
    any other device describes this machine's processor.
    """
    if target_device == _GPU_KIND:
        return dict(_gpu_identity())
    return dict(_host_identity())


def device_string(identity: DeviceIdentity) -> str:
    """The stable text of an identity: canonical JSON, keys sorted."""
    return json.dumps(dict(identity), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def device_label(identity: DeviceIdentity) -> str:
    """A short name for tables: the GPU's or the processor's model."""
    if "gpu_name" in identity:
        return f"{identity['gpu_name']} ({identity.get('sm_count', '?')} SMs)"
    model = str(identity.get("cpu_model", "?")).split(" [")[0]
    for noise in ("(R)", "(TM)", "(tm)", " CPU", " Processor", " processor"):
        model = model.replace(noise, "")
    return f"{' '.join(model.split())} x{identity.get('cpu_count', '?')}"


@functools.lru_cache(maxsize=None)
def _host_identity() -> tuple[tuple[str, Union[str, int]], ...]:
    model, flags = _read_cpuinfo()
    identity: DeviceIdentity = {
        "machine": platform.machine() or "unknown",
        "cpu_model": model or platform.processor() or platform.machine() or "unknown",
        "cpu_flags": " ".join(sorted(flags & CODEGEN_FLAGS)),
        "cpu_count": os.cpu_count() or 0,
    }
    return tuple(sorted(identity.items()))


def host_flags() -> frozenset[str]:
    """Every flag this machine's processor reports (/proc/cpuinfo's ``flags``; empty where it is absent)."""
    return _host_flags()


def host_vendor() -> str:
    """Who made this machine's processor: /proc/cpuinfo's ``vendor_id`` (GenuineIntel, AuthenticAMD); "" where absent."""
    return _read_cpuinfo_fields().get("vendor_id", "")


def host_label() -> str:
    """This machine's processor, as tables name it."""
    return device_label(dict(_host_identity()))


@functools.lru_cache(maxsize=None)
def _host_flags() -> frozenset[str]:
    return frozenset(_read_cpuinfo()[1])


@functools.lru_cache(maxsize=None)
def _read_cpuinfo_fields() -> dict[str, str]:
    """The first processor's /proc/cpuinfo fields (name -> value); empty where the file is absent."""
    try:
        text = _CPUINFO.read_text(errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        name = name.strip()
        if sep and name not in fields:
            fields[name] = value.strip()
    return fields


def _read_cpuinfo() -> tuple[str, set[str]]:
    """The first processor's model name and flags; empty where /proc/cpuinfo is absent (macOS, Windows).

    A virtual machine may call every generation "AMD EPYC": the vendor,
    family and model numbers, where given, are appended to tell them apart.
    """
    fields = _read_cpuinfo_fields()
    if not fields:
        return "", set()
    model = next((fields[f] for f in _MODEL_FIELDS if fields.get(f)), "")
    numbers = [fields[f] for f in _ID_FIELDS if fields.get(f)]
    if numbers:
        model = f"{model} [{' '.join(numbers)}]".strip()
    flags = next((set(fields[f].split()) for f in _FLAG_FIELDS if fields.get(f)), set())
    return model, flags


@functools.lru_cache(maxsize=None)
def _gpu_identity() -> tuple[tuple[str, Union[str, int]], ...]:
    import torch

    if not torch.cuda.is_available():
        log.warning("no GPU is visible to torch; tuning records are keyed by this machine's processor instead")
        return _host_identity()
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    identity: DeviceIdentity = {
        "gpu_name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "sm_count": int(props.multi_processor_count),
        "memory_bytes": int(props.total_memory),
        "runtime": f"hip {torch.version.hip}" if torch.version.hip else f"cuda {torch.version.cuda}",
    }
    arch = getattr(props, "gcnArchName", None)
    if arch:
        identity["arch"] = str(arch)
    return tuple(sorted(identity.items()))
