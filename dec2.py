import sys, time, torch, statistics
sys.path.insert(0, "bench")
import models as bm, septran, septran.model
torch.set_num_threads(int(sys.argv[1]))
model, _ = bm.block(sys.argv[2] if len(sys.argv) > 2 else "llama", False, 512)
kc, vc = model.new_cache()
xp, xd = torch.randn(1, 512, model.cfg.hidden), torch.randn(1, 1, model.cfg.hidden)
with torch.no_grad():
    fn = torch.compile(model, backend="septran", fullgraph=True)
    fn(xp, 0, kc, vc)
    for _ in range(5): fn(xd, 512, kc, vc)
    ts = []
    for _ in range(50):
        t = time.perf_counter(); fn(xd, 512, kc, vc); ts.append(time.perf_counter() - t)
print(f"threads {sys.argv[1]}: decode median {statistics.median(ts)*1e3:.3f} ms min {min(ts)*1e3:.3f}")
