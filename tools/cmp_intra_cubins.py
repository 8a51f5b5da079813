#!/usr/bin/env python3
"""tools/cmp_intra_cubins.py: bwd_intra's cubins of a reference cache (built before the
varlen parameter existed) against a newer cache's varlen=0 entries, matched by (spec, arch):
whole nvdisasm listing (mangled kernel name normalized), ELF sections that differ, and the
ptxas report (registers / spill store / spill load / stack bytes) and SASS instruction
counts of both and of the matching varlen=1 entry.  nvdisasm must be on PATH.
A reference cache that has varlen entries itself (a build of main, say) is matched spec for
spec instead: its varlen=0 entries against the new varlen=0 ones (SASS identity, as above),
its varlen=1 entries against the new varlen=1 ones (ptxas report and SASS counts of both,
with the counts of a few opcode classes).
usage: cmp_intra_cubins.py KDART_REF CACHE_REF KDART_NEW CACHE_NEW OUTDIR"""
import json, subprocess, sys, os, re, struct
km, cm, kh, ch, out = sys.argv[1:6]
os.makedirs(out, exist_ok=True)
def ls(k, c):
    return json.loads(subprocess.check_output([k, '--cache', c, 'ls', '--kernel', 'bwd_intra', '--json']))
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
    out = {}
    for h in hdr:
        name_off, typ, _, _, off, size = h[:6]
        e = b.index(b'\0', so + name_off)
        name = re.sub(r'_Z15kdart_bwd_intra\w+', 'KN', b[so + name_off:e].decode())
        out[name] = b[off:off + size] if typ != 8 else b''  # NOBITS
    return out
def norm(s):  # the mangled name differs by the extra template argument
    s = re.sub(r'_Z15kdart_bwd_intra\w+', 'KNAME', s)
    return s
M = {(e['spec'], e['arch']): e['key'] for e in ls(km, cm)}
H = {(e['spec'], e['arch']): e['key'] for e in ls(kh, ch)}
if any('varlen=' in spec for spec, _ in M):  # both caches have varlen entries
    OPS = ('HMMA', 'MUFU', 'LDGSTS', 'LDG', 'STG', 'LDS', 'STS', 'BAR', 'BRA', 'BSSY', 'SHFL')
    def opcount(lines):
        n = dict.fromkeys(OPS, 0)
        for l in lines:
            op = re.sub(r'^@!?U?P\w+\s+', '', l).split(' ')[0].split('.')[0]
            if op in n: n[op] += 1
        return n
    ok_all = True
    v1 = []
    print('%-40s %-8s %-6s %-9s %7s %7s  %-16s %-16s' % ('spec', 'arch', 'bytes=', 'SASS=', 'n_ref', 'n_new', 'ref r/ss/sl/stk', 'new r/ss/sl/stk'))
    for (spec, arch), keym in sorted(M.items()):
        keyh = H[(spec, arch)]
        tag = (spec + '_' + arch).replace('=', '').replace(',', '_')
        fm, fh = (os.path.join(out, tag + x + '.cubin') for x in ('.ref', '.new'))
        bm, bh = export(km, cm, keym, fm), export(kh, ch, keyh, fh)
        sm, lm = sass(fm); sh, lh = sass(fh)
        r0, r1 = show(km, cm, keym), show(kh, ch, keyh)
        f = lambda r: '%d/%d/%d/%d' % r
        if spec.endswith('varlen=0'):
            ss = norm(sm) == norm(sh) and lm == lh
            ok_all &= ss
            print('%-40s %-8s %-6s %-9s %7d %7d  %-16s %-16s' % (spec, arch, bm == bh, ss, len(lm), len(lh), f(r0), f(r1)))
        else:
            v1.append((spec, arch, len(lm), len(lh), f(r0), f(r1), opcount(lm), opcount(lh)))
    print('varlen=1: reference -> new (static SASS instructions, ptxas report, opcode classes ref/new)')
    for spec, arch, nm, nh, a, b, om, oh in v1:
        print('%-40s %-8s n %5d -> %5d (%+5d)  r/ss/sl/stk %s -> %s  ' % (spec, arch, nm, nh, nh - nm, a, b) +
              ' '.join('%s %d/%d' % (o, om[o], oh[o]) for o in OPS))
    print('ALL varlen=0 SASS IDENTICAL' if ok_all else 'varlen=0 SASS DIFFERS')
    sys.exit(0 if ok_all else 1)
ok_all = True
rows = []
secdiff = []
for (spec, arch), keym in sorted(M.items()):
    keyh = H[(spec + ',varlen=0', arch)]
    keyv = H[(spec + ',varlen=1', arch)]
    tag = (spec + '_' + arch).replace('=', '').replace(',', '_')
    fm, fh, fv = (os.path.join(out, tag + x + '.cubin') for x in ('.main', '.v0', '.v1'))
    bm, bh, bv = export(km, cm, keym, fm), export(kh, ch, keyh, fh), export(kh, ch, keyv, fv)
    sm, lm = sass(fm); sh, lh = sass(fh); sv, lv = sass(fv)
    same_bytes = bm == bh
    same_sass = norm(sm) == norm(sh)
    same_instr = lm == lh
    ok_all &= same_sass and same_instr
    r0 = show(km, cm, keym); r1 = show(kh, ch, keyh); rv = show(kh, ch, keyv)
    a, b = sections(fm), sections(fh)
    secdiff.append('%s %s: %s' % (spec, arch, ' '.join(n for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)) or 'identical'))
    rows.append((spec, arch, same_bytes, same_sass, len(lm), len(lh), r0, r1, rv, len(lv)))
print('%-40s %-8s %-6s %-9s %7s %7s  %-16s %-16s %-16s %7s %6s' % ('spec', 'arch', 'bytes=', 'SASS=', 'n_main', 'n_v0', 'main r/ss/sl/stk', 'v0 r/ss/sl/stk', 'v1 r/ss/sl/stk', 'n_v1', 'extra'))
for spec, arch, sb, ss, nm, nh, r0, r1, rv, nv in rows:
    f = lambda r: '%d/%d/%d/%d' % r
    print('%-40s %-8s %-6s %-9s %7d %7d  %-16s %-16s %-16s %7d %+6d' % (spec, arch, sb, ss, nm, nh, f(r0), f(r1), f(rv), nv, nv - nh))
print('ELF sections whose bytes differ (reference vs varlen=0):')
for l in secdiff: print('  ' + l)
print('ALL SASS IDENTICAL' if ok_all else 'SASS DIFFERS')
