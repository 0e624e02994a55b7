"""A call's arguments bound to the kernel's parameters, and the tensors checked: the first step of a call's plan."""
from __future__ import annotations

from septran.errors import CallError


def bind(entry: str, names: list, scalar_names: list, out_names: list, args: tuple, kwargs: dict) -> tuple[dict, dict, dict]:
    """name -> tensor, name -> where it was passed (position or keyword), and the scalars given (name -> value).

    Positional: the inputs (``names``), then the scalars; by keyword: any input, scalar or output (``out_names``:
    an output the caller passes is written into).
    """
    if len(args) > len(names) + len(scalar_names):
        raise CallError(
            f"{entry} takes {len(names)} inputs ({', '.join(names)})"
            + (f" and the scalars {', '.join(scalar_names)}" if scalar_names else "") + f", got {len(args)} arguments",
            hint="outputs (" + ", ".join(out_names) + ") are allocated and returned by the kernel, "
                 "or passed by name (" + ", ".join(f"{n}=..." for n in out_names) + ")",
        )
    bound = dict(zip(names, args))
    sources: dict = {n: i for i, n in enumerate(names[: len(args)])}
    given = dict(zip(scalar_names, args[len(names):]))
    for k in [k for k in kwargs if k in scalar_names]:
        if k in given:
            raise CallError(f"scalar {k} given twice")
        given[k] = kwargs[k]
    for k, v in kwargs.items():
        if k in scalar_names:
            continue
        if k not in out_names:
            if k not in names:
                raise CallError(f"{entry} has no input or output {k!r}",
                                hint=f"inputs: {', '.join(names)}; outputs: {', '.join(out_names)}")
            if k in bound:
                raise CallError(f"input {k} given twice")
        bound[k], sources[k] = v, k
    missing = [n for n in names if n not in bound]
    if missing:
        raise CallError(f"missing input {', '.join(missing)}", hint=f"call with ({', '.join(names)})")
    return bound, sources, given


def check_tensors(tensors: dict, target) -> None:
    """Each is a contiguous torch tensor on the target's kind of device, all of them on one device."""
    import torch

    first = None
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise CallError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type != target.torch_device:
            raise CallError(
                f"{name} is on {t.device}, but target {target.name} runs on {target.torch_device} tensors",
                hint=f"move it with .to('{target.torch_device}'), or compile for another target (SEPTRAN_TARGET)",
            )
        if not t.is_contiguous():
            raise CallError(f"{name} is not contiguous", hint=f"pass {name}.contiguous()")
        if first is not None and t.device != first[1]:
            raise CallError(f"{name} is on {t.device}, {first[0]} on {first[1]}: a call's tensors share one device",
                            hint=f"move {name} with .to('{first[1]}')")
        first = first or (name, t.device)
