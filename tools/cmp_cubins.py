#!/usr/bin/env python3
"""tools/cmp_cubins.py: one kernel's cubins of a reference cache against a newer cache's
entries of the same specializations, matched by (spec, arch), where the newer registry
may have added parameters (the new spec is the reference spec plus SUFFIX, e.g.
',tail=0').  For each pair: whole nvdisasm listing (the mangled kernel name normalized,
as the extra template arguments change it), instruction count, the ELF sections whose
bytes differ, and the ptxas report (registers / spill store / spill load / stack bytes)
of both.  Then the newer cache's entries that have no reference (new specializations),
with their report.  nvdisasm must be on PATH.  (Written when bwd_intra gained its varlen
parameter, as cmp_intra_cubins.py; generalized when the tail parameter came.)
usage: cmp_cubins.py KERNEL SUFFIX KDART_REF CACHE_REF KDART_NEW CACHE_NEW OUTDIR"""
import json, subprocess, sys, os, re, struct
kernel, suffix, km, cm, kh, ch, out = sys.argv[1:8]
os.makedirs(out, exist_ok=True)
mangled = r'_Z\d+kdart_%s\w+' % kernel  # kdart_<kernel>'s instances
def ls(k, c):
    return json.loads(subprocess.check_output([k, '--cache', c, 'ls', '--kernel', kernel, '--json']))
def export(k, c, key, f):
    subprocess.check_call([k, '-q', '--cache', c, 'export', key, '-o', f])
    return open(f, 'rb').read()
def show(k, c, key):
    s = subprocess.check_output([k, '--cache', c, 'show', key]).decode()
    g = lambda n: int(re.search(n + r'=(\d+)', s).group(1))
    return g('registers'), g('spill_store_bytes'), g('spill_load_bytes'), g('stack_bytes')
def sass(f):
    s = subprocess.check_output(['nvdisasm', '-c', f]).decode()
    lines = []
    for l in s.splitlines():
        m = re.search(r'/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;?\s*$', l)
        if m and not l.strip().startswith('//'):
            lines.append(m.group(1))
    return s, lines
def sections(path):  # ELF64 section name (mangled names normalized) -> bytes
    b = open(path, 'rb').read()
    shoff, = struct.unpack_from('<Q', b, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', b, 0x3a)
    hdr = [struct.unpack_from('<IIQQQQIIQQ', b, shoff + i * shentsize) for i in range(shnum)]
    so = hdr[shstrndx][4]
    res = {}
    for h in hdr:
        name_off, typ, _, _, off, size = h[:6]
        e = b.index(b'\0', so + name_off)
        name = re.sub(mangled, 'KN', b[so + name_off:e].decode())
        res[name] = b[off:off + size] if typ != 8 else b''  # NOBITS
    return res
def norm(s):
    return re.sub(mangled, 'KNAME', s)
def tag(spec, arch, x):
    return os.path.join(out, (spec + '_' + arch).replace('=', '').replace(',', '_') + x + '.cubin')
f4 = lambda r: '%d/%d/%d/%d' % r
M = {(e['spec'], e['arch']): e['key'] for e in ls(km, cm)}
H = {(e['spec'], e['arch']): e['key'] for e in ls(kh, ch)}
ok_all, rows, secdiff, matched = True, [], [], set()
for (spec, arch), keym in sorted(M.items()):
    if (spec + suffix, arch) not in H:
        print('missing in the new cache: %s %s' % (spec + suffix, arch))
        ok_all = False
        continue
    keyh = H[(spec + suffix, arch)]
    matched.add((spec + suffix, arch))
    fm, fh = tag(spec, arch, '.ref'), tag(spec, arch, '.new')
    bm, bh = export(km, cm, keym, fm), export(kh, ch, keyh, fh)
    sm, lm = sass(fm)
    sh, lh = sass(fh)
    same_sass = norm(sm) == norm(sh) and lm == lh
    ok_all &= same_sass
    a, b = sections(fm), sections(fh)
    secdiff.append('%s %s: %s' % (spec, arch, ' '.join(n for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)) or 'identical'))
    rows.append((spec, arch, bm == bh, same_sass, len(lm), len(lh), show(km, cm, keym), show(kh, ch, keyh)))
print('%-44s %-8s %-6s %-6s %7s %7s %6s  %-16s %-16s' % ('reference spec', 'arch', 'bytes=', 'SASS=', 'n_ref', 'n_new', 'delta', 'ref r/ss/sl/stk', 'new r/ss/sl/stk'))
for spec, arch, sb, ss, nm, nh, r0, r1 in rows:
    print('%-44s %-8s %-6s %-6s %7d %7d %+6d  %-16s %-16s' % (spec, arch, sb, ss, nm, nh, nh - nm, f4(r0), f4(r1)))
print('ELF sections whose bytes differ (reference vs new):')
for l in secdiff:
    print('  ' + l)
print('%d pairs: %s' % (len(rows), 'ALL SASS IDENTICAL' if ok_all else 'SASS DIFFERS'))
print('new specializations (no reference):')
print('%-52s %-8s %7s  %-16s' % ('spec', 'arch', 'n_sass', 'r/ss/sl/stk'))
for (spec, arch), key in sorted(H.items()):
    if (spec, arch) in matched:
        continue
    _, l = sass(export(kh, ch, key, tag(spec, arch, '.new')) and tag(spec, arch, '.new'))
    print('%-52s %-8s %7d  %-16s' % (spec, arch, len(l), f4(show(kh, ch, key))))
