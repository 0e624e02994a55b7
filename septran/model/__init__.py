"""The model level: PyTorch models whose operators SepTran knows run as SepTran kernels.

``torch.compile(model, backend="septran")`` or ``septran.compile_model(model, example_inputs)``: the graph is
captured at the ATen level, patterns (``septran/model/patterns/``) replace what SepTran knows by custom ops
(``torch.ops.septran.*``) that run SepTran kernels, and every other node stays with torch.
"""
from septran.model.backend import register as _register

_register()
