# lab/calls/bisect_gd.py: writes lab/bisect-gd/k{G,A,B,C,D,E}, copies of kernel_src with parts of the intra
# body's POST code (the last step's gate part in the fused wy_dqkg launch) switched off: G all of them, A the
# gate loads, math and partial sums (the io dtype store and the db step kept), B the partial sums, C the db
# step, D the gate loads, E the gate math.  For timing the post = 1 kernels part by part (call a of the
# twentieth session used them to look for a wrong result, which had gone by then).  Run from the repository
# root; the folder is untracked and travels with a device call as it is.
import os
import shutil

src = open("kernel_src/bwd_intra_body.inc").read()
L = "if (pp.g_raw) {\n                        const unsigned short *gr"
M = "if constexpr (POST) { /* bwd_post's gate backward"
P = "if constexpr (POST) {\n                    if (pp.g_raw) {\n                        /* the pass's partial sums"
D = "if constexpr (POST) { /* bwd_post's beta-sigmoid"
for k in (L, M, P, D):
    assert src.count(k) == 1, k
off = {L: L.replace("if (pp.g_raw)", "if (false)", 1), M: M.replace("(POST)", "(false)", 1),
       P: P.replace("(POST)", "(false)", 1), D: D.replace("(POST)", "(false)", 1)}
MATH = "                        if (pp.g_raw) {\n                            float y[4]"
variants = {"G": [L, M, P, D], "B": [P], "C": [D], "D": [L], "E": [M]}
shutil.rmtree("lab/bisect-gd", ignore_errors=True)
os.makedirs("lab/bisect-gd")
for name, keys in list(variants.items()) + [("A", None)]:
    s = src
    if keys is None:
        s = s.replace(L, off[L]).replace(MATH, MATH.replace("if (pp.g_raw)", "if (false)")).replace(P, off[P])
    else:
        for k in keys:
            s = s.replace(k, off[k])
    assert s != src
    d = f"lab/bisect-gd/k{name}"
    shutil.copytree("kernel_src", d)
    open(f"{d}/bwd_intra_body.inc", "w").write(s)
