# bank-conflict emulation of the swizzled fp32 tiles (bwd_intra body: KP = 72 floats a row; wy: swz32)
KP=72
def fsw(R): return (R & 4) << 1
def wavefronts(addrs_words, width):
    """addrs: per active lane (word address); width: words per lane access. Hardware splits a warp's
    request into phases of 128 bytes: 32 lanes for 4 B, 16 for 8 B, 8 for 16 B.  Per phase, wavefronts =
    max over banks of distinct 4-byte words... (distinct words on the same bank)."""
    per = 32 // width
    total = 0
    for ph in range(0, 32, per):
        banks = {}
        for a in addrs_words[ph:ph+per]:
            if a is None: continue
            for w in range(width):
                banks.setdefault((a + w) % 32, set()).add(a + w)
        total += max((len(v) for v in banks.values()), default=0)
    return total
def rows_cols(fn, swz):
    out=[]
    for lane in range(32):
        R, c = fn(lane)
        out.append(R*KP + (c ^ (fsw(R) if swz else 0)))
    return out
for swz in (False, True):
    res={}
    for i in (1,2,3):
        for warp in range(8):
            n0=8*warp
            # row side ga (float2): rows 16i+gid, cols colc
            res.setdefault('rowside ga',[]).append(wavefronts(rows_cols(lambda l:(16*i+(l>>2), n0+2*(l&3)), swz),2))
            res.setdefault('rowside gb',[]).append(wavefronts(rows_cols(lambda l:(16*i+8+(l>>2), n0+2*(l&3)), swz),2))
    for i in (0,1,2):
        for warp in range(8):
            n0=8*warp
            res.setdefault('colside ga',[]).append(wavefronts(rows_cols(lambda l:(16*i+2*(l>>2), n0+2*(l&3)), swz),2))
            res.setdefault('colside gb',[]).append(wavefronts(rows_cols(lambda l:(16*i+2*(l>>2)+1, n0+2*(l&3)), swz),2))
    for kk in range(6):
        for warp in range(8):
            n0=8*warp
            res.setdefault('rowside kbv s0 (scalar)',[]).append(wavefronts(rows_cols(lambda l:(8*kk+(l&3), n0+(l>>2)), swz),1))
            res.setdefault('rowside kbv s1 (scalar)',[]).append(wavefronts(rows_cols(lambda l:(8*kk+(l&3)+4, n0+(l>>2)), swz),1))
    # phase C: warp = 32 consecutive d of block i, row R0+s
    for i in range(4):
        for half in range(2):
            for s_ in range(16):
                res.setdefault('phase C row read',[]).append(wavefronts(rows_cols(lambda l:(16*i+s_, 32*half+l), swz),1))
    # phase D / phase A: warp = rows tid>>4 (2 rows) x 16 chunks of 4 floats
    for w in range(8):
        res.setdefault('phase D/A float4',[]).append(wavefronts(rows_cols(lambda l:((32*w+l)>>4, ((32*w+l)&15)*4), swz),4))
    print("swizzled" if swz else "main", {k:(min(v),max(v)) for k,v in res.items()})
# bijection / chunk integrity
for R in range(64):
    cols=[c ^ fsw(R) for c in range(64)]
    assert sorted(cols)==list(range(64))
    for c in range(0,64,4): assert all(((c+e) ^ fsw(R)) == (c ^ fsw(R)) + e for e in range(4))
for R in range(64): assert fsw(R)==fsw(R-16 if R>=16 else R) and fsw(R)==fsw(R%16)
# wy swz32
def swz32(row,col,new): 
    x = (row<<1) if new else row
    return row*64 + ((((col>>2) ^ x) & 7) << 2) + (((col>>2)&8)<<2) + (col&3)
for new in (False, True):
    r=[]
    for m0 in (0,16,32,48):
        for n0 in (0,32):
            for j in range(4):
                for h2 in (0,8):
                    r.append(wavefronts([swz32(m0+(l>>2)+h2, n0+8*j+2*(l&3), new) for l in range(32)],2))
    # load_tile32: 16-byte chunks: row (tid>>4)+16j, chunk tid&15
    wr=[wavefronts([swz32(((32*w+l)>>4), ((32*w+l)&15)*4, new) for l in range(32)],4) for w in range(8)]
    for row in range(64):
        assert sorted(swz32(row,c,new)-row*64 for c in range(64))==list(range(64))
    print("swz32", "new" if new else "main", "epilogue g2", (min(r),max(r)), "load_tile32", (min(wr),max(wr)))
