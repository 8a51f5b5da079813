# lab/experiments/one-cta/diag_numerics.py: the diagonal block's dq term under the safe gate (lower bound -5), float64
# reference against fp32 direct (today's phase C) and the anchored GEMM (exp2(g_r - m) exp2(m - g_u), m a
# data-independent anchor half the worst-case drop below the block's first row) in tf32, 3xTF32 and bf16x3
# (fla 0.6.0's precision for its safe-gate diagonal).  CPU, numpy: python3 diag_numerics.py
import numpy as np
rng=np.random.default_rng(0)
def tf32(x):
    x=np.asarray(x,np.float32); b=x.view(np.uint32).astype(np.uint64)
    b=((b+0x1000)&0xFFFFE000).astype(np.uint32); return b.view(np.float32)
def bf16(x):
    x=np.asarray(x,np.float32); b=x.view(np.uint32).astype(np.uint64)
    b=((b+0x7FFF+((b>>16)&1))&0xFFFF0000).astype(np.uint32); return b.view(np.float32)
def split(x,f):
    hi=f(x); lo=f(np.float32(x)-hi); return hi,lo
BC,K=16,128; lb=-5.0
res={k:[] for k in ('fp32','tf32','3xtf32','bf16x3')}
for trial in range(200):
    step=lb/np.log(2)*(1/(1+np.exp(-rng.normal(0,2,(BC,K)))))   # per-step log2 gate in (lb/ln2, 0)
    g=np.cumsum(step,0)+rng.normal(0,3,(1,K))                    # chunk-local cumsum offset by earlier blocks
    k=bf16(rng.normal(0,1,(BC,K))/np.sqrt(K)).astype(np.float64)
    dA=np.tril(rng.normal(0,1,(BC,BC)))
    E=np.exp2(g[:,None,:]-g[None,:,:])                            # [r,u,d]
    mask=np.tril(np.ones((BC,BC)))[:,:,None]
    ref=np.einsum('ru,rud,ud->rd',dA,E*mask,k)
    g32=g.astype(np.float32); k32=k.astype(np.float32); dA32=dA.astype(np.float32)
    E32=np.exp2(g32[:,None,:]-g32[None,:,:]).astype(np.float32)
    d32=np.einsum('ru,rud,ud->rd',dA32,(E32*mask).astype(np.float32),k32,dtype=np.float32)
    m=g32[0:1,:]-np.float32(0.5*(BC-1)*(-lb)/np.log(2))           # a data-independent anchor, as fla's
    B=(k32*np.exp2(m-g32)).astype(np.float32); fr=np.exp2(g32-m).astype(np.float32)
    def gemm(f,n):
        if n==1: return (f(dA32).astype(np.float64)@f(B).astype(np.float64)).astype(np.float32)
        ah,al=split(dA32,f); bh,bl=split(B,f)
        return (ah.astype(np.float64)@bh+ah.astype(np.float64)@bl+al.astype(np.float64)@bh).astype(np.float32)
    outs={'fp32':d32,'tf32':gemm(tf32,1)*fr,'3xtf32':gemm(tf32,3)*fr,'bf16x3':gemm(bf16,3)*fr}
    for n,o in outs.items():
        res[n].append(np.linalg.norm(o-ref)/np.linalg.norm(ref))
for n,v in res.items(): print(f"{n:7s} rel err median {np.median(v):.2e}  max {np.max(v):.2e}")
