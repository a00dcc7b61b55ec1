# perf/results/ckpt-vs-peer.py CKPT_DAT PEER_DAT: checkpoint durations (bench_ckpt's ckpt-changelog.dat) against the
# PUT peer's PUTs in the same run (ckpt-peer.dat): the slowest checkpoints and the slowest PUT overlapping each.
import sys, statistics as st
ck = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
pe = [tuple(map(float, l.split())) for l in open(sys.argv[2])]
pm = sorted(x[1] for x in pe)
q = lambda v, f: v[min(len(v) - 1, int(f * len(v)))]
print(f"peer PUTs {len(pe)}: p50 {q(pm,.5):.0f} p90 {q(pm,.9):.0f} p99 {q(pm,.99):.0f} ms")
cd = sorted(x[1] for x in ck)
print(f"checkpoints {len(ck)}: p50 {q(cd,.5):.0f} p90 {q(cd,.9):.0f} p99 {q(cd,.99):.0f} ms")
# for each checkpoint, the peer PUTs that overlapped it (PUT [end-ms, end] meets [t-d, t])
pairs = []
for t, d in ck:
    a, b = t - d / 1000, t
    ov = [m for e, m in pe if e - m / 1000 < b and e > a]
    pairs.append((d, max(ov) if ov else None))
top = sorted(pairs, reverse=True)[:8]
print("slowest checkpoints (ms) and the slowest peer PUT overlapping each:")
for d, m in top: print(f"  {d:.0f}  peer {m if m is None else round(m)}")
xs = [(d, m) for d, m in pairs if m is not None]
if len(xs) > 2:
    print(f"correlation (checkpoint duration, overlapping peer PUT): {st.correlation([a for a,_ in xs],[b for _,b in xs]):.2f} over {len(xs)}")
