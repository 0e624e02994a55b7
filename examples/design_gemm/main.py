# The design's step 4, as written, the package's name aside (its notes spell it `septran_compiler` and `tasklevel_compiler`).
import torch
import septran as stc   # the design calls the package septran_compiler

# 编译:逻辑 + 映射 → 高性能代码
kernel = stc.compile(
    logic_file="gemm_logic.py",
    mapping_file="gemm_on_nvidia_gpu.mapping.yaml"
)

# 执行
a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
b = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
c = kernel(a, b)
