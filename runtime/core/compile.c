/*
 * compile.c: the default compiler behind the compiler seam: NVRTC turns the
 * generated translation unit into LTO-IR, nvJitLink links it into a cubin
 * for the target arch.
 *
 * Both logs are kept whole in the result (they go into the cache entry), and
 * the ptxas part of nvJitLink's verbose log is parsed into a report of
 * registers, barriers, stack frame, spills, static shared and constant
 * memory, so `kdart show` can answer "does it spill?" without a GPU; the
 * cubin's own headers give the size of its machine code (text_bytes).
 *
 * NVRTC needs no GPU and no driver; nothing here touches libcuda.  NVRTC
 * programs are independent, so compiles may run on several threads at once.
 */
#include <nvJitLink.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

/* Parses ptxas's verbose report (one entry per unit).  Lines look like
 *   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
 *   ptxas info    : Used 18 registers, used 1 barriers, 256 bytes smem, 368 bytes cmem[0]
 * Fields that are absent stay 0, which is what ptxas means by leaving them out. */
static void parse_report(const char *log, kdart__buf *out) {
    long long regs = 0, barriers = 0, smem = 0, cmem = 0, stack = 0, sst = 0, sld = 0;
    const char *p;
    if ((p = strstr(log, "bytes stack frame")) != NULL) {
        const char *q = p;
        while (q > log && q[-1] == ' ') q--;
        while (q > log && q[-1] >= '0' && q[-1] <= '9') q--;
        stack = atoll(q);
        const char *s1 = strstr(p, ", ");
        if (s1) sst = atoll(s1 + 2);
        const char *s2 = s1 ? strstr(s1 + 2, ", ") : NULL;
        if (s2) sld = atoll(s2 + 2);
    }
    if ((p = strstr(log, "Used ")) != NULL) {
        regs = atoll(p + 5);
        const char *eol = strchr(p, '\n');
        const char *b = strstr(p, "used ");
        if (b && (!eol || b < eol)) barriers = atoll(b + 5);
        for (const char *c = p; c && (!eol || c < eol); c = strchr(c + 1, ',')) {
            const char *num = c[0] == ',' ? c + 2 : NULL;
            if (!num) continue;
            if (strncmp(strchr(num, ' ') ? strchr(num, ' ') : num, " bytes smem", 11) == 0) smem = atoll(num);
            if (strncmp(strchr(num, ' ') ? strchr(num, ' ') : num, " bytes cmem[0]", 14) == 0) cmem = atoll(num);
        }
    }
    kdart__buf_fmt(out, "registers=%lld\n", regs);
    kdart__buf_fmt(out, "barriers=%lld\n", barriers);
    kdart__buf_fmt(out, "stack_bytes=%lld\n", stack);
    kdart__buf_fmt(out, "spill_store_bytes=%lld\n", sst);
    kdart__buf_fmt(out, "spill_load_bytes=%lld\n", sld);
    kdart__buf_fmt(out, "smem_static_bytes=%lld\n", smem);
    kdart__buf_fmt(out, "cmem0_bytes=%lld\n", cmem);
}

/* The bytes of machine code in a cubin: the sizes of its executable sections (the kernel's .text and
 * those of any function it calls that was not inlined), from the ELF section headers; -1 where the
 * image is not a 64-bit little-endian ELF whose headers lie inside it.  Why it is reported: a kernel
 * whose hot code outgrows an SM's instruction cache (about 128 KB on sm_90) stalls on instruction
 * fetch, whatever its registers and spills say. */
static long long text_bytes(const unsigned char *e, size_t n) {
#define KDART_U16(o) ((unsigned long long)e[o] | (unsigned long long)e[(o) + 1] << 8)
#define KDART_U32(o) (KDART_U16(o) | KDART_U16((o) + 2) << 16)
#define KDART_U64(o) (KDART_U32(o) | KDART_U32((o) + 4) << 32)
    if (n < 64 || memcmp(e, "\177ELF", 4) != 0 || e[4] != 2 || e[5] != 1) return -1;
    const unsigned long long shoff = KDART_U64(0x28), shentsize = KDART_U16(0x3A), shnum = KDART_U16(0x3C);
    if (shentsize < 64 || shoff > n || shnum > (n - shoff) / shentsize) return -1;
    long long total = 0;
    for (unsigned long long i = 0; i < shnum; i++) {
        const size_t h = (size_t)(shoff + i * shentsize);
        const unsigned long long type = KDART_U32(h + 4), flags = KDART_U64(h + 8);
        if (type == 1 /* SHT_PROGBITS */ && (flags & 4) /* SHF_EXECINSTR */) total += (long long)KDART_U64(h + 0x20);
    }
    return total;
#undef KDART_U64
#undef KDART_U32
#undef KDART_U16
}

static void add_nvrtc_log(nvrtcProgram prog, kdart__buf *log) {
    size_t n = 0;
    if (nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n <= 1) return;
    char *text = kdart__malloc(n);
    if (!text) return;
    if (nvrtcGetProgramLog(prog, text) == NVRTC_SUCCESS) {
        kdart__buf_str(log, "--- nvrtc ---\n");
        kdart__buf_str(log, text);
    }
    kdart__free(text);
}

static void add_link_logs(nvJitLinkHandle h, kdart__buf *log) {
    size_t n = 0;
    if (nvJitLinkGetInfoLogSize(h, &n) == NVJITLINK_SUCCESS && n > 1) {
        char *text = kdart__malloc(n);
        if (text && nvJitLinkGetInfoLog(h, text) == NVJITLINK_SUCCESS) {
            kdart__buf_str(log, "--- nvjitlink info ---\n");
            kdart__buf_str(log, text);
        }
        kdart__free(text);
    }
    if (nvJitLinkGetErrorLogSize(h, &n) == NVJITLINK_SUCCESS && n > 1) {
        char *text = kdart__malloc(n);
        if (text && nvJitLinkGetErrorLog(h, text) == NVJITLINK_SUCCESS) {
            kdart__buf_str(log, "--- nvjitlink error ---\n");
            kdart__buf_str(log, text);
        }
        kdart__free(text);
    }
}

int kdart__compile_nvrtc(void *user, const kdart__compile_in *in, kdart__compile_out *out) {
    (void)user;
    memset(out, 0, sizeof *out);
    double t0 = kdart__now_ms();
    kdart__buf log = {0}, report = {0};
    int rc = KDART_OK;
    nvrtcProgram prog = NULL;
    nvJitLinkHandle link = NULL;
    char *ltoir = NULL;
    const char **hdr_text = NULL, **hdr_name = NULL;
    int nh = in->src->nfiles;

    hdr_text = kdart__calloc((size_t)nh + 1, sizeof *hdr_text);
    hdr_name = kdart__calloc((size_t)nh + 1, sizeof *hdr_name);
    if (!hdr_text || !hdr_name) {
        rc = KDART_ENOMEM;
        goto done;
    }
    for (int i = 0; i < nh; i++) {
        hdr_text[i] = in->src->files[i].text;
        hdr_name[i] = in->src->files[i].name;
    }
    nvrtcResult nr = nvrtcCreateProgram(&prog, in->tu, "kdart_unit.cu", nh, hdr_text, hdr_name);
    if (nr != NVRTC_SUCCESS) {
        rc = nr == NVRTC_ERROR_OUT_OF_MEMORY ? KDART_ENOMEM : KDART_ECOMPILE;
        kdart__buf_str(&log, "nvrtcCreateProgram: ");
        kdart__buf_str(&log, nvrtcGetErrorString(nr));
        goto done;
    }
    if ((nr = nvrtcAddNameExpression(prog, in->entry)) != NVRTC_SUCCESS) {
        rc = KDART_ECOMPILE;
        kdart__buf_str(&log, "nvrtcAddNameExpression: ");
        kdart__buf_str(&log, nvrtcGetErrorString(nr));
        goto done;
    }
    nr = nvrtcCompileProgram(prog, in->n_nvrtc_opts, in->nvrtc_opts);
    add_nvrtc_log(prog, &log);
    if (nr != NVRTC_SUCCESS) {
        rc = nr == NVRTC_ERROR_OUT_OF_MEMORY ? KDART_ENOMEM : KDART_ECOMPILE;
        goto done;
    }
    const char *lowered = NULL;
    if (nvrtcGetLoweredName(prog, in->entry, &lowered) != NVRTC_SUCCESS || !lowered) {
        rc = KDART_ECOMPILE;
        kdart__buf_str(&log, "nvrtcGetLoweredName failed for the entry point\n");
        goto done;
    }
    out->lowered = kdart__strdup(lowered);
    size_t nir = 0;
    if (!out->lowered) {
        rc = KDART_ENOMEM;
        goto done;
    }
    if (nvrtcGetLTOIRSize(prog, &nir) != NVRTC_SUCCESS) {
        rc = KDART_ECOMPILE;
        kdart__buf_str(&log, "nvrtcGetLTOIRSize failed\n");
        goto done;
    }
    if (!(ltoir = kdart__malloc(nir))) {
        rc = KDART_ENOMEM;
        goto done;
    }
    if (nvrtcGetLTOIR(prog, ltoir) != NVRTC_SUCCESS) {
        rc = KDART_ECOMPILE;
        goto done;
    }

    nvJitLinkResult lr = nvJitLinkCreate(&link, (uint32_t)in->n_link_opts, (const char **)in->link_opts);
    if (lr != NVJITLINK_SUCCESS) {
        rc = KDART_ELINK;
        kdart__buf_fmt(&log, "nvJitLinkCreate failed (%lld): bad link options or arch\n", (long long)lr);
        link = NULL;
        goto done;
    }
    lr = nvJitLinkAddData(link, NVJITLINK_INPUT_LTOIR, ltoir, nir, "kdart_unit");
    if (lr == NVJITLINK_SUCCESS) lr = nvJitLinkComplete(link);
    add_link_logs(link, &log);
    if (lr != NVJITLINK_SUCCESS) {
        rc = KDART_ELINK;
        goto done;
    }
    size_t ncubin = 0;
    if (nvJitLinkGetLinkedCubinSize(link, &ncubin) != NVJITLINK_SUCCESS || ncubin == 0) {
        rc = KDART_ELINK;
        goto done;
    }
    out->cubin = kdart__malloc(ncubin);
    if (!out->cubin) {
        rc = KDART_ENOMEM;
        goto done;
    }
    if (nvJitLinkGetLinkedCubin(link, out->cubin) != NVJITLINK_SUCCESS) {
        rc = KDART_ELINK;
        goto done;
    }
    out->cubin_size = ncubin;
    parse_report(log.s ? log.s : "", &report);
    kdart__buf_fmt(&report, "cubin_bytes=%lld\n", (long long)ncubin);
    const long long text = text_bytes(out->cubin, ncubin);
    if (text >= 0) kdart__buf_fmt(&report, "text_bytes=%lld\n", text);
    kdart__buf_fmt(&report, "ltoir_bytes=%lld\n", (long long)nir);
    if (report.oom) rc = KDART_ENOMEM;

done:
    if (!log.s) kdart__buf_str(&log, ""); /* an empty log is "", never NULL */
    if (log.oom && rc == KDART_OK) rc = KDART_ENOMEM;
    out->ms = kdart__now_ms() - t0;
    out->log = log.s;
    out->report = report.s;
    if (link) nvJitLinkDestroy(&link);
    if (prog) nvrtcDestroyProgram(&prog);
    kdart__free(ltoir);
    kdart__free(hdr_text);
    kdart__free(hdr_name);
    if (rc != KDART_OK) {
        kdart__free(out->cubin);
        out->cubin = NULL;
        out->cubin_size = 0;
    }
    return rc;
}

void kdart__compile_out_free(kdart__compile_out *out) {
    kdart__free(out->cubin);
    kdart__free(out->lowered);
    kdart__free(out->log);
    kdart__free(out->report);
    memset(out, 0, sizeof *out);
}

int kdart__nvrtc_build_id(char **out) {
    *out = NULL;
    nvrtcProgram prog;
    if (nvrtcCreateProgram(&prog, "__global__ void kdart_probe() {}\n", "probe.cu", 0, NULL, NULL) != NVRTC_SUCCESS)
        return KDART_ECOMPILE;
    const char *opts[] = {"-arch=compute_80"};
    int rc = KDART_ECOMPILE;
    size_t n = 0;
    char *ptx = NULL;
    if (nvrtcCompileProgram(prog, 1, opts) == NVRTC_SUCCESS && nvrtcGetPTXSize(prog, &n) == NVRTC_SUCCESS &&
        (ptx = kdart__malloc(n + 1)) != NULL && nvrtcGetPTX(prog, ptx) == NVRTC_SUCCESS) {
        ptx[n] = 0;
        /* "// Compiler Build ID: CL-36424714" names the exact NVRTC build,
         * which the major.minor version alone does not. */
        const char *id = strstr(ptx, "Compiler Build ID: ");
        const char *rel = strstr(ptx, "Cuda compilation tools, release ");
        char buf[128] = "unknown";
        if (id) {
            id += strlen("Compiler Build ID: ");
            size_t len = strcspn(id, "\r\n");
            snprintf(buf, sizeof buf, "%.*s", (int)(len < 60 ? len : 60), id);
        }
        if (rel) {
            const char *v = strstr(rel, ", V");
            if (v) {
                size_t len = strcspn(v + 3, "\r\n");
                size_t u = strlen(buf);
                snprintf(buf + u, sizeof buf - u, " V%.*s", (int)(len < 30 ? len : 30), v + 3);
            }
        }
        *out = kdart__strdup(buf);
        rc = *out ? KDART_OK : KDART_ENOMEM;
    } else if (ptx == NULL && n) {
        rc = KDART_ENOMEM;
    }
    kdart__free(ptx);
    nvrtcDestroyProgram(&prog);
    return rc;
}

int kdart__nvrtc_archs_default(int *archs, int max) {
    /* On the stack, not the heap: the answer is cached for the process, so
     * it must not depend on an allocation that may fail once. */
    int all[512], n = 0;
    if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n < 0 || n > (int)(sizeof all / sizeof all[0]) ||
        nvrtcGetSupportedArchs(all) != NVRTC_SUCCESS)
        return KDART_ECOMPILE;
    if (n > max) n = max;
    memcpy(archs, all, (size_t)n * sizeof *archs);
    return n;
}

kdart__archs_fn kdart__nvrtc_archs = kdart__nvrtc_archs_default;

int kdart__toolchain_versions(kdart_rt *rt) {
    if (nvrtcVersion(&rt->nvrtc_major, &rt->nvrtc_minor) != NVRTC_SUCCESS)
        return kdart__err(rt, KDART_ECOMPILE, "nvrtcVersion failed");
    if (nvJitLinkVersion(&rt->jl_major, &rt->jl_minor) != NVJITLINK_SUCCESS)
        return kdart__err(rt, KDART_ELINK, "nvJitLinkVersion failed");
    return KDART_OK;
}
