#!/usr/bin/env python3
"""Summarizes an ncu --csv run of gpu__time_duration.sum and dram__bytes_read.sum: one line per
kernel name and grid (calls, µs a call, MB read a call, GB/s, total µs) and the total."""
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
ix = {h:i for i,h in enumerate(hdr)}
K = collections.OrderedDict()
for r in rows:
    id_ = int(r[ix['ID']])
    name = r[ix['Kernel Name']].split('(')[0].replace('void ', '').replace('unnamed>::','')[:50]
    d = K.setdefault(id_, {'name': name, 'grid': r[ix['Grid Size']], 'blk': r[ix['Block Size']]})
    v = float(r[ix['Metric Value']].replace(',', ''))
    u = r[ix['Metric Unit']]
    if r[ix['Metric Name']] == 'gpu__time_duration.sum':
        d['us'] = v * {'ns':1e-3,'us':1,'usecond':1,'ms':1e3,'msecond':1e3,'nsecond':1e-3}[u]
    else:
        d['B'] = v * {'byte':1,'Kbyte':1e3,'Mbyte':1e6,'Gbyte':1e9}[u]
agg = collections.OrderedDict()
for d in K.values():
    key = (d['name'], d['grid'])
    a = agg.setdefault(key, [0, 0.0, 0.0])
    a[0] += 1; a[1] += d['us']; a[2] += d.get('B', 0)
tot = sum(a[1] for a in agg.values())
for (n, g), (c, us, B) in agg.items():
    print(f"{n:50s} {g:16s} n={c:3d} {us/c:8.2f} us  {B/c/1e6:8.2f} MB  {B/us/1e3:6.0f} GB/s  total {us:8.1f}")
print('total', round(tot,1), 'us;', len(K), 'kernels')
