#!/usr/bin/env python3
"""Usage: scripts/tta_log_figures.py STDERR_FILE...

Figures of bench/tta_bench's finished runs, from its stderr lines (for a run cut short):
per variant the median (IQR) of sustained and first times over the fleets and seeds done, and
speed-ups as ratios of medians with the bench's hierarchical bootstrap (fleets, then seeds
within each fleet, paired; pairs where both variants finished only)."""
import math, random, re, statistics, sys, collections, zlib
runs = collections.defaultdict(dict)  # variant -> (fleet, seed) -> (first, sustained, rounds)
for path in sys.argv[1:]:
    for line in open(path):
        m = re.match(r'\[\d+/\d+\] (\S+) (\S+)\s+seed (\d+): first (\S+)(?: s)?, sustained (\S+)(?: s)?, (\d+) rounds', line)
        if m:
            f = lambda x: math.inf if x == 'never' else float(x)
            runs[m[2]][(m[1], int(m[3]))] = (f(m[4]), f(m[5]), int(m[6]))
def med(xs):
    xs = sorted(xs); n = len(xs)
    if n == 0: return math.inf
    return xs[n//2] if n % 2 else (math.inf if math.isinf(xs[n//2]) else 0.5*(xs[n//2-1]+xs[n//2]))
def q(xs, p):
    xs = sorted(xs); at = p*(len(xs)-1); lo = int(at); hi = min(len(xs)-1, lo+1)
    return xs[lo] + (at-lo)*(xs[hi]-xs[lo]) if at > lo else xs[lo]
for v in sorted(runs):
    r = runs[v]
    s = [x[1] for x in r.values()]; fi = [x[0] for x in r.values()]; ro = [x[2] for x in r.values()]
    print(f"| {v} | {len(r)} | {med(s):.0f} ({q(s,.25):.0f}-{q(s,.75):.0f}) | {med(fi):.0f} ({q(fi,.25):.0f}-{q(fi,.75):.0f}) | {med(ro):.0f} |")
def speedup(slow, fast, idx=1, B=10000):
    common = sorted(set(runs[slow]) & set(runs[fast]))
    if not common: return None
    fleets = sorted({k[0] for k in common})
    by = {f: [k for k in common if k[0] == f] for f in fleets}
    def ratio(picks):
        a = med([runs[slow][k][idx] for k in picks]); b = med([runs[fast][k][idx] for k in picks])
        if math.isinf(a) and math.isinf(b): return math.nan
        return 0 if math.isinf(b) else a/b
    point = ratio(common)
    rng = random.Random(zlib.crc32((slow + "|" + fast).encode()))
    draws = []
    for _ in range(B):
        picks = []
        for _ in fleets:
            f = rng.choice(fleets)
            picks += [rng.choice(by[f]) for _ in by[f]]
        r = ratio(picks)
        if not math.isnan(r): draws.append(r)
    draws.sort()
    return point, draws[int(0.025*len(draws))], draws[min(len(draws)-1, int(0.975*len(draws)))], len(common), len(fleets)
pairs = [(f"oort/{p}", f"fedcase/{p}") for p in ("none", "lru", "importance")] + \
        [("oort/lru", "fedcase/importance"), ("random/none", "oort/none"), ("random/none", "fedcase/importance")]
for slow, fast in pairs:
    if slow in runs and fast in runs:
        s = speedup(slow, fast); f = speedup(slow, fast, 0)
        if s:
            print(f"- {fast} vs {slow}: {s[0]:.2f}x [{s[1]:.2f}, {s[2]:.2f}] over {s[3]} runs on {s[4]} fleets; first crossing {f[0]:.2f}x [{f[1]:.2f}, {f[2]:.2f}]")
