import sys, math, statistics
sys.path.insert(0,'bench'); sys.path.insert(0,'.')
from cpu_pools import read_pools
from pytest_gpuperf.verdict.decide import run_level
from collections import defaultdict, Counter
for pool in sys.argv[1:]:
    rows = [r for r in read_pools([pool]) if r['tool']=='gp' and r['suite']=='cpu' and 'mm_thr' not in r['bench']]
    by = defaultdict(list)
    for r in rows: by[(r['bench'], r['variant'])].append(r)
    tab = Counter(); wl = defaultdict(list); procslow = defaultdict(list)
    for (b,v), rs in by.items():
        lv = sorted(run_level(r['rounds']) for r in rs)
        fast = statistics.median(lv[:max(2,len(lv)//2)])
        for r in rs:
            x = run_level(r['rounds'])/fast
            slow = x > 1.25
            c = r.get('contention') or {}
            tab[(slow, r.get('stability'))] += 1
            wl[slow].append((c.get('waited') or 0, r['load1']))
            procslow[r['proc']].append(x)
    print(pool)
    for k in sorted(tab): print('  ', k, tab[k])
    for s in (False, True):
        w = [a for a,b in wl[s]]; l=[b for a,b in wl[s]]
        print('  slow' if s else '  fast', len(w), 'waited med %.2f q90 %.2f' % (statistics.median(w), sorted(w)[int(.9*len(w))]), 'load1 med %.1f' % statistics.median(l))
    # process-wide: processes with >=2 slow benchmarks
    ps = {p: xs for p, xs in procslow.items()}
    print('  procs: ', ' '.join(f"{p}:" + ",".join(f"{x:.2f}" for x in xs) for p, xs in sorted(ps.items()) if max(xs) > 1.25)[:1500])
