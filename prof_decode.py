import sys, torch
sys.path.insert(0, "examples"); sys.path.insert(0, "bench")
import models as bm, septran, septran.model
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
model, _ = bm.block(sys.argv[2] if len(sys.argv) > 2 else "llama", False, 512)
kc, vc = model.new_cache()
xp, xd = torch.randn(1, 512, model.cfg.hidden), torch.randn(1, 1, model.cfg.hidden)
with torch.no_grad():
    fn = torch.compile(model, backend="septran", fullgraph=True)
    fn(xp, 0, kc, vc)
    p = septran.profile(fn, xd, 512, kc, vc, steps=20)
print(p)
