"""How kernels show in Jupyter: what was compiled, for what, and the TileLang program (highlighted as Python)."""
from __future__ import annotations


def variant_markdown(variant) -> str:
    """A variant: its shapes and the point it runs, the TileLang program, and (folded) ``explain()``."""
    spec = variant.spec
    shapes = ", ".join(f"{n}: {'x'.join(map(str, s))} {spec.dtypes[n]}" for n, s in spec.shapes.items())
    return (f"**SepTran variant** `{variant.program.name}` for `{variant.kernel.target.name}`: {shapes}  \n"
            f"point: {variant.choice.source}\n\n```python\n{variant.tilelang_source}```\n\n"
            f"<details><summary>explain()</summary>\n\n```\n{variant.explain()}```\n</details>\n")


def kernel_markdown(kernel) -> str:
    """A kernel: its signature, target and mapping; and its latest variant, if it has run or been specialised."""
    head = (f"**SepTran kernel** `{kernel.signature()}` on `{kernel.target.name}` "
            f"({kernel.target.description}), mapping `{kernel.mapping.file}`; {len(kernel.variants)} variant(s)\n\n")
    latest = kernel.latest
    return head + (variant_markdown(latest) if latest is not None else "_not specialised yet: call it, or kernel.specialize(...)_\n")
