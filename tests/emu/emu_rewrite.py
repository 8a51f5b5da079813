#!/usr/bin/env python3
"""emu_rewrite.py SRC_DIR OUT_DIR: kdart's kernel sources made host C++ for the emulated device.

Every inline-asm statement becomes a call of the emu_prelude.h function that does what its PTX does, with
the operands in PTX order (outputs as typed pointers, inputs as values of their constraint's type); a
template this table does not know becomes emu::unsupported(...), which compiles and aborts only if reached
(none in today's kernels).  The dynamic
shared-memory declaration becomes a reference to the emulator's arena.  Nothing else changes, so the
emulated kernels are the sources the GPU runs.  Prints one line per unknown template (stderr)."""
import os
import re
import sys

# normalized template (regex) -> handler; the operands follow in %-order
TABLE = [
    (r"\{ \.reg \.u64 a; cvta\.to\.shared\.u64 a, %1; cvt\.u32\.u64 %0, a; \}", "cvta_shared"),
    (r"cp\.async\.cg\.shared\.global \[%0\], \[%1\], 16;", "cp_async16"),
    (r"cp\.async\.cg\.shared\.global \[%0\], \[%1\], 16, %2;", "cp_async16z"),
    (r"cp\.async\.cg\.shared\.global\.L2::cache_hint \[%0\], \[%1\], 16, %2, %3;", "cp_async16zh"),
    (r"cp\.async\.ca\.shared\.global \[%0\], \[%1\], %2, %3;", "cp_asyncgz"),
    (r"cp\.async\.ca\.shared\.global \[%0\], \[%1\], 8, %2;", "cp_async8z"),
    (r"cp\.async\.ca\.shared\.global \[%0\], \[%1\], 4, %2;", "cp_async4z"),
    (r"cp\.async\.commit_group;", "cp_commit"),
    (r"cp\.async\.wait_group %0;", "cp_wait_group"),
    (r"cp\.async\.wait_all;", "cp_wait_all"),
    (r"prefetch\.global\.L2(::evict_\w+)? \[%0\];", "nop"),
    (r"discard\.global\.L2 \[%0\], 128;", "discard_l2"),
    (r"applypriority\.global\.L2::evict_normal \[%0\], 128;", "nop"),
    (r"createpolicy\.fractional\.L2::evict_\w+\.b64 %0, 1\.0;", "policy"),
    (r"", "nop"),
    (r"fence\.proxy\.async\.shared::cta;", "nop"),
    (r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16 \{%0, ?%1, ?%2, ?%3\}, \[%4\];", "ldsm4"),
    (r"ldmatrix\.sync\.aligned\.m8n8\.x4\.trans\.shared\.b16 \{%0, ?%1, ?%2, ?%3\}, \[%4\];", "ldsm4t"),
    (r"stmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16 \[%0\], \{%1, ?%2, ?%3, ?%4\};", "stsm4"),
    (r"ld\.shared\.v4\.b32 \{%0, ?%1, ?%2, ?%3\}, \[%4\];", "ld_sh_v4"),
    (r"ld\.shared\.v2\.b32 \{%0, ?%1\}, \[%2\];", "ld_sh_v2"),
    (r"ld\.shared\.b32 %0, \[%1\];", "ld_sh_b32"),
    (r"ld\.shared\.u16 %0, \[%1\];", "ld_sh_u16"),
    (r"st\.shared\.u16 \[%0\], %1;", "st_sh_u16"),
    (r"st\.global(\.cs|\.cg|\.wb)?\.L2::cache_hint(\.v[24])?\.[bf](16|32) \[%0\], \{?%1(, ?%\d)*\}?, %\d;",
     "st_global_hint"),
    (r"st\.global(\.cs|\.cg|\.wb)?(\.v[24])?\.[bf](16|32) \[%0\], \{?%1(, ?%\d)*\}?;", "st_global"),
    # a store with an L2 policy made in the same statement (the policy register local to it): the store
    (r"\{ \.reg \.b64 (\w+); createpolicy\.fractional\.L2::evict_\w+\.b64 \1, 1\.0; "
     r"st\.global(\.cs|\.cg|\.wb)?\.L2::cache_hint(\.v[24])?\.[bf](16|32) \[%0\], \{?%1(, ?%\d)*\}?, \1; \}",
     "st_global"),
    (r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32 \{%0, ?%1, ?%2, ?%3\}, \{%4, ?%5, ?%6, ?%7\}, "
     r"\{%8, ?%9\}, \{%0, ?%1, ?%2, ?%3\};", "mma_bf16"),
    (r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32 \{%0, ?%1, ?%2, ?%3\}, \{%4, ?%5, ?%6, ?%7\}, "
     r"\{%8, ?%9\}, \{%0, ?%1, ?%2, ?%3\};", "mma_f16"),
    (r"mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32\.f32 ?\{%0, ?%1, ?%2, ?%3\}, \{%4, ?%5, ?%6, ?%7\}, "
     r"\{%8, ?%9\}, \{%0, ?%1, ?%2, ?%3\};", "mma_tf32"),
    (r"cvt\.rn\.bf16x2\.f32 %0, %1, %2;", "cvt_rn_bf16x2"),
    (r"cvt\.rn\.f16x2\.f32 %0, %1, %2;", "cvt_rn_f16x2"),
    (r"\{ \.reg \.b16 h; mov\.b16 h, %1; cvt\.f32\.f16 %0, h; \}", "cvt_f32_f16"),
    (r"\{ \.reg \.b16 r; cvt\.rn\.bf16\.f32 r, %1; mov\.b16 %0, r; \}", "cvt_bf16"),
    (r"\{ \.reg \.b16 r; cvt\.rn\.f16\.f32 r, %1; mov\.b16 %0, r; \}", "cvt_f16"),
    (r"cvt\.rn\.tf32\.f32 %0, %1;", "cvt_tf32_rn"),
    (r"cvt\.rna\.tf32\.f32 %0, %1;", "cvt_tf32_rna"),
    (r"ex2\.approx(\.ftz)?\.f32 %0, %1;", "ex2"),
    (r"lg2\.approx(\.ftz)?\.f32 %0, %1;", "lg2"),
    (r"rcp\.approx(\.ftz)?\.f32 %0, %1;", "rcp"),
    (r"mov\.u32 %0, %%tid\.x;", "tid_x"),
    (r"mov\.u32 %0, %%ctaid\.x;", "ctaid_x"),
    (r"mov\.u32 %0, %%ctaid\.y;", "ctaid_y"),
    (r"mov\.u32 %0, %%nctaid\.x;", "nctaid_x"),
    (r"bar\.sync %0, (\d+);", "named_bar"),
    # sm_90a (KDART_EMU_CC 90)
    (r"wgmma\.fence\.sync\.aligned;", "nop"),
    (r"wgmma\.commit_group\.sync\.aligned;", "nop"),
    (r"wgmma\.wait_group\.sync\.aligned (%0|\d+);", "nop"),
    (r"fence\.mbarrier_init\.release\.cluster;", "nop"),
    (r"mbarrier\.init\.shared::cta\.b64 \[%0\], 1;", "mbar_init"),
    (r"mbarrier\.inval\.shared::cta\.b64 \[%0\];", "mbar_inval"),
    (r"mbarrier\.arrive\.expect_tx\.shared::cta\.b64 _, \[%0\], %1;", "mbar_expect"),
    (r"\{ \.reg \.pred (\w+); (\w+): mbarrier\.try_wait\.parity\.shared::cta\.b64 \1, \[%0\], %1; @\1 bra (\w+); "
     r"bra \2; \3: \}", "mbar_wait"),
    (r"cp\.async\.bulk\.tensor\.3d\.shared::cluster\.global\.mbarrier::complete_tx::bytes\.L2::cache_hint "
     r"\[%0\], \[%1, \{%2, %3, %4\}\], \[%5\], %6;", "tma3"),
    (r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.mbarrier::complete_tx::bytes\.L2::cache_hint "
     r"\[%0\], \[%1, \{%2, %3\}\], \[%4\], %5;", "tma2"),
]
# wgmma.mma_async statements are written inside macros (their shape and types pasted in), so their templates
# are not literals: recognized by their operand lists, each becomes emu::wgmma_op(N, type, accumulators, da,
# db, scale-d, scale-a, tnspA, tnspB) in the macro's own names
WGMMA = [
    # wy_dqkg's KDART_WY_WGMMA(NP, N, TY, ...): "{..}, da, db, 1, 1, 1, AT, BT", accumulators c[2 NP][4]
    (r'"l"\(da\), "l"\(db\), "n"\(AT\), "n"\(BT\)', "::emu::wgmma_op(N, #TY, &c[0][0], da, db, 1, 1, AT, BT)"),
    # bwd_dhu's KDART_WG_DEF(IOT, TY, N, R, ...): "{..}, da, db, p (acc != 0), SA_, 1, TA_, 1", accumulators d[R]
    (r'"l"\(da\), "l"\(db\), "r"\(acc\), "n"\(SA_\), "n"\(TA_\)', "::emu::wgmma_op(N, TY, &d[0], da, db, acc, SA_, TA_, 1)"),
]
OUT_T = {"r": "unsigned", "h": "unsigned short", "f": "float", "l": "unsigned long long", "d": "double"}
IN_T = {"r": "(unsigned)", "h": "(unsigned short)", "f": "(float)", "l": "", "n": "(int)", "d": "(double)"}
SMEM = re.compile(r"extern\s+__shared__\s+(__align__\s*\(\s*\d+\s*\)\s+)?unsigned\s+char\s+smem\s*\[\s*\]\s*;")
ASM = re.compile(r"\b(asm|__asm__)\s*(volatile|__volatile__)?\s*\(")


def close_paren(s, i):
    """index just past the ')' matching the '(' before s[i]"""
    depth = 1
    while depth:
        c = s[i]
        if c == '"':
            i += 1
            while s[i] != '"':
                i += 2 if s[i] == "\\" else 1
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        i += 1
    return i


def split_top(s, sep):
    """s split at sep outside strings and brackets"""
    out, depth, cur, i = [], 0, "", 0
    while i < len(s):
        c = s[i]
        if c == '"':
            j = i + 1
            while s[j] != '"':
                j += 2 if s[j] == "\\" else 1
            cur += s[i:j + 1]
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if depth == 0 and s.startswith(sep, i):
            out.append(cur)
            cur = ""
            i += len(sep)
            continue
        cur += c
        i += 1
    out.append(cur)
    return out


def template_of(part):
    """the concatenated string literals of the template part, or None where anything else is in it"""
    part = re.sub(r"\\\n", " ", part)
    lits = re.findall(r'"((?:[^"\\]|\\.)*)"', part)
    rest = re.sub(r'"((?:[^"\\]|\\.)*)"', "", part).strip()
    if rest:
        return None
    t = "".join(lits).replace("\\n", " ").replace("\\t", " ")
    return re.sub(r"\s+", " ", t).strip()


def operands(part):
    ops = []
    for o in split_top(part, ","):
        o = re.sub(r"\\\n", " ", o).strip()
        if not o:
            continue
        m = re.match(r'"([=+&]*)([a-z])"\s*\((.*)\)\s*$', o, re.S)
        if not m:
            raise ValueError(o)
        ops.append((m.group(1), m.group(2), m.group(3).strip()))
    return ops


def rewrite_asm(body, where, unknown):
    parts = split_top(body, ":")
    # "::" separates an empty operand list: split_top on ":" gives an empty part for it
    tpl = template_of(parts[0])
    try:
        outs = operands(parts[1]) if len(parts) > 1 else []
        ins = operands(parts[2]) if len(parts) > 2 else []
    except ValueError:
        tpl = None
    if tpl is None and "wgmma.mma_async" in body:
        for pat, call in WGMMA:
            if re.search(pat, re.sub(r"\\\n", " ", body)):
                return call
    if tpl is None:
        unknown.append(where + ": (not a literal template)")
        return '::emu::unsupported("%s")' % where
    for pat, h in TABLE:
        m = re.fullmatch(pat, tpl)
        if m:
            break
    else:
        unknown.append(where + ": " + tpl)
        return '::emu::unsupported("%s: %s")' % (where, tpl.replace('"', "'").replace("\\", "/"))
    args = ["(%s*)&(%s)" % (OUT_T[c], e) for _, c, e in outs]
    args += ["%s(%s)" % (IN_T[c], e) for _, c, e in ins]
    if h == "named_bar":
        args.append(m.group(1))
    return "::emu::%s(%s)" % (h, ", ".join(args))


def rewrite(text, name, unknown):
    text = SMEM.sub("unsigned char (&smem)[::emu::kSmemBytes] = ::emu::g_smem;", text)
    out, i = [], 0
    for m in ASM.finditer(text):
        if m.start() < i:
            continue
        j = close_paren(text, m.end())
        line = text.count("\n", 0, m.start()) + 1
        out.append(text[i:m.start()])
        out.append(rewrite_asm(text[m.end():j - 1], "%s:%d" % (name, line), unknown))
        i = j
    out.append(text[i:])
    return "".join(out)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    os.makedirs(dst, exist_ok=True)
    unknown = []
    for f in sorted(os.listdir(src)):
        p = os.path.join(src, f)
        if not os.path.isfile(p) or not re.search(r"\.(cuh|inc|h)$", f):
            continue
        with open(p) as fh:
            t = rewrite(fh.read(), f, unknown)
        with open(os.path.join(dst, f), "w") as fh:
            fh.write(t)
    for u in unknown:
        print("emu_rewrite: not emulated: " + u, file=sys.stderr)


if __name__ == "__main__":
    main()
