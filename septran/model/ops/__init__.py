"""Custom ops (``torch.ops.septran.*``) that run SepTran kernels: one module per operator family."""
