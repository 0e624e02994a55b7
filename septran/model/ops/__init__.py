"""The custom ops (``torch.ops.septran.*``) that the rewritten graphs call; each module registers one family."""
from septran.model.ops import bmm, gemm  # noqa: E402,F401 - registers torch.ops.septran.bmm / .gemm
