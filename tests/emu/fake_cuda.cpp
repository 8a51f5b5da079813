/*
 * fake_cuda.cpp: libcuda.so.1 for kdart's emulated device (tests/emu/README.md).
 *
 * The runtime and the check harness reach the driver only through dlopen
 * ("libcuda.so.1"), so a directory holding this library, first on
 * LD_LIBRARY_PATH, puts a device that runs on the CPU under them unchanged:
 * NVRTC still compiles and the cache still stores every cubin, and when the
 * runtime asks the library for a kernel by its mangled name, this driver
 * builds that same specialization from KDART_KERNEL_DIR's sources as host C++
 * (emu_rewrite.py, emu_prelude.h, g++), loads it and runs its launches at
 * once, in order, on the calling thread.  Device memory is host memory;
 * streams and events are stand-ins; stream capture records launches and
 * memsets for graph replay.  The device is one GPU of compute capability
 * KDART_EMU_CC (default 100: sm_100a, whose kernels take the portable
 * mma.sync paths; 90: sm_90a, whose kernels take the wgmma, TMA and
 * mbarrier paths) with KDART_EMU_SMS multiprocessors (default 132).
 * Built objects are kept under KDART_EMU_CACHE (default
 * /tmp/kdart-emu-UID), keyed by the sources and the name.
 */
#include <cuda.h>
#include <cxxabi.h>
#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "emu_tma.h"

#ifndef KDART_EMU_DIR
#error "KDART_EMU_DIR: the directory of emu_prelude.h and emu_rewrite.py"
#endif

namespace {

std::recursive_mutex g_lock;

struct Kernel {
    void *so = nullptr;
    size_t (*param_size)() = nullptr;
    void (*launch)(unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void **) = nullptr;
};
struct Op { /* a captured launch (k set) or memset */
    Kernel *k = nullptr;
    unsigned g[3] = {}, b[3] = {};
    std::vector<unsigned char> param;
    CUdeviceptr dst = 0;
    unsigned value = 0;
    size_t n = 0;
};
struct Graph {
    std::vector<Op> ops;
};
struct Stream {
    bool capturing = false;
    Graph *graph = nullptr;
};
std::set<Stream *> g_streams;
std::map<std::string, Kernel *> g_kernels;
int g_ctx_token;

int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}
/* the emulated device's compute capability (KDART_EMU_CC, 100 unless set): 90 builds sm_90a's paths */
int device_cc() { return env_int("KDART_EMU_CC", 100); }
std::string cache_dir() {
    const char *v = getenv("KDART_EMU_CACHE");
    std::string d = v && *v ? v : "/tmp/kdart-emu-" + std::to_string((long)getuid());
    mkdir(d.c_str(), 0755);
    return d;
}
uint64_t fnv(const std::string &s, uint64_t h = 1469598103934665603ull) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}
std::string hex(uint64_t h) {
    char b[17];
    snprintf(b, sizeof b, "%016llx", (unsigned long long)h);
    return b;
}
bool read_file(const std::string &p, std::string &out) {
    FILE *f = fopen(p.c_str(), "rb");
    if (!f) return false;
    char buf[65536];
    size_t n;
    out.clear();
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    fclose(f);
    return true;
}
bool exists(const std::string &p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0;
}
/* a shell command's exit status (0: success) */
int run(const std::string &cmd) { return system(cmd.c_str()); }

/* "void f<A, B>(P)" (any return type before) -> ("f<A, B>", "f", "P") */
bool split_sig(const std::string &d, std::string &tid, std::string &base, std::string &param) {
    size_t close = d.rfind(')');
    if (close == std::string::npos) return false;
    int depth = 0;
    size_t open = close;
    for (;; --open) {
        if (d[open] == ')') depth++;
        else if (d[open] == '(' && --depth == 0) break;
        if (open == 0) return false;
    }
    param = d.substr(open + 1, close - open - 1);
    size_t end = open, start = open;
    if (start > 0 && d[start - 1] == '>') {
        int a = 0;
        for (size_t i = start; i-- > 0;) {
            if (d[i] == '>') a++;
            else if (d[i] == '<' && --a == 0) { start = i; break; }
        }
    }
    size_t nb = start;
    while (nb > 0 && (isalnum((unsigned char)d[nb - 1]) || d[nb - 1] == '_' || d[nb - 1] == ':')) nb--;
    tid = d.substr(nb, end - nb);
    base = d.substr(nb, start - nb);
    int angle = 0; /* one parameter: no comma outside template arguments */
    for (char ch : param) {
        if (ch == '<') angle++;
        else if (ch == '>') angle--;
        else if (ch == ',' && angle == 0) return false;
    }
    return !base.empty();
}

/* the kernel sources, rewritten once per content (returns the directory, or "" with why) */
std::string rewritten(const std::string &kdir, std::string &src_hash, std::string &why) {
    DIR *dp = opendir(kdir.c_str());
    if (!dp) {
        why = "cannot read KDART_KERNEL_DIR " + kdir;
        return "";
    }
    std::vector<std::string> names;
    while (dirent *e = readdir(dp)) names.push_back(e->d_name);
    closedir(dp);
    std::sort(names.begin(), names.end());
    uint64_t h = fnv(KDART_EMU_DIR);
    std::string t;
    for (auto &n : names) {
        if (n[0] == '.' || !read_file(kdir + "/" + n, t)) continue;
        h = fnv(n, h), h = fnv(t, h);
    }
    std::string pre, rw;
    read_file(std::string(KDART_EMU_DIR) + "/emu_prelude.h", pre);
    read_file(std::string(KDART_EMU_DIR) + "/emu_rewrite.py", rw);
    h = fnv(pre, fnv(rw, h));
    src_hash = hex(h);
    std::string out = cache_dir() + "/src-" + src_hash;
    if (exists(out)) return out;
    std::string tmp = out + ".tmp" + std::to_string((long)getpid());
    std::string cmd = "python3 '" + std::string(KDART_EMU_DIR) + "/emu_rewrite.py' '" + kdir + "' '" + tmp + "' 2>/dev/null";
    if (run(cmd) != 0 || rename(tmp.c_str(), out.c_str()) != 0) {
        run("rm -rf '" + tmp + "'"); /* (another process's copy won the rename) */
        if (!exists(out)) {
            why = "emu_rewrite.py failed: " + cmd;
            return "";
        }
    }
    return out;
}

/* the .cuh under dir that defines __global__ base(...): an occurrence of "base(" with __global__ in the 300
 * characters before it */
std::string source_of(const std::string &dir, const std::string &base) {
    DIR *dp = opendir(dir.c_str());
    if (!dp) return "";
    std::string found, t;
    while (dirent *e = readdir(dp)) {
        std::string n = e->d_name;
        if (n.size() < 4 || n.compare(n.size() - 4, 4, ".cuh") != 0 || !read_file(dir + "/" + n, t)) continue;
        for (size_t at = t.find(base); at != std::string::npos && found.empty(); at = t.find(base, at + 1)) {
            size_t e2 = at + base.size();
            while (e2 < t.size() && isspace((unsigned char)t[e2])) e2++;
            const bool ident = at > 0 && (isalnum((unsigned char)t[at - 1]) || t[at - 1] == '_');
            if (ident || e2 >= t.size() || t[e2] != '(') continue;
            const size_t from = at > 300 ? at - 300 : 0;
            if (t.substr(from, at - from).find("__global__") != std::string::npos) found = n;
        }
    }
    closedir(dp);
    return found;
}

Kernel *build(const char *mangled, std::string &why) {
    auto it = g_kernels.find(mangled);
    if (it != g_kernels.end()) return it->second;
    int st = 0;
    char *dm = abi::__cxa_demangle(mangled, nullptr, nullptr, &st);
    if (!dm) {
        why = std::string("cannot demangle ") + mangled;
        return nullptr;
    }
    std::string d = dm, tid, base, param;
    free(dm);
    if (!split_sig(d, tid, base, param)) {
        why = "unexpected kernel signature " + d;
        return nullptr;
    }
    const char *kd = getenv("KDART_KERNEL_DIR");
    if (!kd || !*kd) {
        why = "KDART_KERNEL_DIR is not set (the emulated device builds kernels from it)";
        return nullptr;
    }
    std::string sh, dir = rewritten(kd, sh, why);
    if (dir.empty()) return nullptr;
    std::string file = source_of(dir, base);
    if (file.empty()) {
        why = "no source in " + std::string(kd) + " defines " + base;
        return nullptr;
    }
    /* KDART_EMU_CC 90: the sm_90a paths (wgmma, TMA), as the runtime's sm_90a cubins take them */
    const bool sm90 = device_cc() == 90;
    std::string key = hex(fnv(d + (sm90 ? " sm_90a" : ""), fnv(sh)));
    std::string so = cache_dir() + "/k-" + key + ".so";
    if (!exists(so)) {
        std::string cpp = cache_dir() + "/k-" + key + ".cpp", tmp = so + ".tmp" + std::to_string((long)getpid());
        FILE *f = fopen(cpp.c_str(), "w");
        if (!f) {
            why = "cannot write " + cpp;
            return nullptr;
        }
        fprintf(f,
                "/* %s */\n#include \"%s\"\n"
                "static void emu_body(void *a) { %s(*reinterpret_cast<%s *>(static_cast<void **>(a)[0])); }\n"
                "extern \"C\" size_t emu_param_size() { return sizeof(%s); }\n"
                "extern \"C\" void emu_launch(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, "
                "unsigned bz, void **args) {\n"
                "  dim3 g, b; g.x = gx, g.y = gy, g.z = gz; b.x = bx, b.y = by, b.z = bz;\n"
                "  ::emu::run_grid(g, b, emu_body, args);\n}\n",
                d.c_str(), file.c_str(), tid.c_str(), param.c_str(), param.c_str());
        fclose(f);
        const char *cxx = getenv("KDART_EMU_CXX");
        std::string cmd = std::string(cxx && *cxx ? cxx : "g++") +
                          " -std=c++17 -O1 -fno-strict-aliasing -fPIC -shared -w" +
                          (sm90 ? " -D__CUDA_ARCH_FEAT_SM90_ALL" : "") + " -include '" KDART_EMU_DIR
                          "/emu_prelude.h' -I'" + dir + "' '" + cpp + "' -o '" + tmp + "' > '" + cpp + ".log' 2>&1";
        if (run(cmd) != 0 || rename(tmp.c_str(), so.c_str()) != 0) {
            why = "building the emulated kernel failed: " + cmd;
            return nullptr;
        }
    }
    void *h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        why = std::string("dlopen: ") + dlerror();
        return nullptr;
    }
    Kernel *k = new Kernel;
    k->so = h;
    *(void **)&k->param_size = dlsym(h, "emu_param_size");
    *(void **)&k->launch = dlsym(h, "emu_launch");
    if (!k->param_size || !k->launch) {
        why = "emulated kernel lacks its entry points";
        delete k;
        return nullptr;
    }
    g_kernels[mangled] = k;
    return k;
}

void memset32(CUdeviceptr p, unsigned v, size_t n) {
    unsigned *q = (unsigned *)(uintptr_t)p;
    for (size_t i = 0; i < n; ++i) q[i] = v;
}
void run_op(const Op &o) {
    if (o.k) {
        void *args[1] = {(void *)o.param.data()};
        o.k->launch(o.g[0], o.g[1], o.g[2], o.b[0], o.b[1], o.b[2], args);
    } else {
        memset32(o.dst, o.value, o.n);
    }
}
Stream *capturing(CUstream s) {
    Stream *st = (Stream *)s;
    return g_streams.count(st) && st->capturing ? st : nullptr;
}
double now_ms() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

} /* namespace */

extern "C" {

CUresult cuInit(unsigned) { return CUDA_SUCCESS; }
/* NVRTC opens libcuda too and asks it for its private tables: none here */
CUresult cuGetExportTable(const void **t, const CUuuid *) {
    *t = nullptr;
    return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuGetErrorName(CUresult r, const char **s) {
    *s = r == CUDA_SUCCESS ? "CUDA_SUCCESS" : r == CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE"
       : r == CUDA_ERROR_NOT_FOUND ? "CUDA_ERROR_NOT_FOUND" : r == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY"
       : "CUDA_ERROR_UNKNOWN (emulated device)";
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetCount(int *n) { *n = 1; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice *d, int i) {
    if (i != 0) return CUDA_ERROR_INVALID_DEVICE;
    *d = 0;
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice) {
    const int cc = device_cc();
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = cc / 10; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = cc % 10; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = env_int("KDART_EMU_SMS", 132); break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = 233472; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 50 << 20; break;
    default: *v = 0;
    }
    return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice) { *c = (CUcontext)&g_ctx_token; return CUDA_SUCCESS; }
static thread_local CUcontext tl_ctx;
CUresult cuCtxGetCurrent(CUcontext *c) { *c = tl_ctx; return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext c) { tl_ctx = c; return CUDA_SUCCESS; }
CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; return CUDA_SUCCESS; }
CUresult cuCtxSynchronize(void) { return CUDA_SUCCESS; }
CUresult cuCtxCreate_v4(CUcontext *c, CUctxCreateParams *, unsigned, CUdevice) {
    *c = (CUcontext) new int(0);
    tl_ctx = *c;
    return CUDA_SUCCESS;
}
CUresult cuCtxDestroy_v2(CUcontext c) {
    if (c != (CUcontext)&g_ctx_token) delete (int *)c;
    if (tl_ctx == c) tl_ctx = nullptr;
    return CUDA_SUCCESS;
}

CUresult cuLibraryLoadData(CUlibrary *lib, const void *, CUjit_option *, void **, unsigned, CUlibraryOption *, void **,
                           unsigned) {
    *lib = (CUlibrary) new int(0);
    return CUDA_SUCCESS;
}
CUresult cuLibraryUnload(CUlibrary lib) {
    delete (int *)lib;
    return CUDA_SUCCESS;
}
CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary, const char *name) {
    std::lock_guard<std::recursive_mutex> g(g_lock);
    std::string why;
    Kernel *kk = build(name, why);
    if (!kk) {
        fprintf(stderr, "kdart emulated device: %s\n", why.c_str());
        return CUDA_ERROR_NOT_FOUND;
    }
    *k = (CUkernel)kk;
    return CUDA_SUCCESS;
}
CUresult cuKernelGetFunction(CUfunction *f, CUkernel k) { *f = (CUfunction)k; return CUDA_SUCCESS; }
CUresult cuFuncSetAttribute(CUfunction, CUfunction_attribute, int) { return CUDA_SUCCESS; }
CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction) {
    *v = a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : a == CU_FUNC_ATTRIBUTE_NUM_REGS ? 128 : 0;
    return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, CUstream s, void **params, void **extra) {
    std::lock_guard<std::recursive_mutex> g(g_lock);
    Kernel *k = (Kernel *)f;
    if (!k || !params || extra || smem > 232448 || (size_t)bx * by * bz > 1024 || !gx || !gy || !gz)
        return CUDA_ERROR_INVALID_VALUE;
    Op o;
    o.k = k;
    o.g[0] = gx, o.g[1] = gy, o.g[2] = gz, o.b[0] = bx, o.b[1] = by, o.b[2] = bz;
    o.param.assign((unsigned char *)params[0], (unsigned char *)params[0] + k->param_size());
    if (Stream *st = capturing(s)) st->graph->ops.push_back(o);
    else run_op(o);
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    void *q = aligned_alloc(256, (n + 255) / 256 * 256);
    if (!q) return CUDA_ERROR_OUT_OF_MEMORY;
    /* never zeros: as a GPU's fresh memory, nothing to count on; KDART_EMU_FILL (a byte) picks the pattern
     * (0x7f: about 3.4e38 in every float type, so that a read of memory nothing wrote shows) */
    static const int fill = [] {
        const char *e = getenv("KDART_EMU_FILL");
        return e && *e ? (int)(strtol(e, nullptr, 0) & 0xff) : 0xa5;
    }();
    memset(q, fill, (n + 255) / 256 * 256);
    *p = (CUdeviceptr)(uintptr_t)q;
    return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); return CUDA_SUCCESS; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) { memmove((void *)(uintptr_t)d, h, n); return CUDA_SUCCESS; }
CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) { memmove(h, (void *)(uintptr_t)d, n); return CUDA_SUCCESS; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) {
    memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n);
    return CUDA_SUCCESS;
}
CUresult cuMemsetD32_v2(CUdeviceptr p, unsigned v, size_t n) { memset32(p, v, n); return CUDA_SUCCESS; }
CUresult cuMemsetD32Async(CUdeviceptr p, unsigned v, size_t n, CUstream s) {
    std::lock_guard<std::recursive_mutex> g(g_lock);
    if (Stream *st = capturing(s)) {
        Op o;
        o.dst = p, o.value = v, o.n = n;
        st->graph->ops.push_back(o);
    } else {
        memset32(p, v, n);
    }
    return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *s, unsigned) {
    std::lock_guard<std::recursive_mutex> g(g_lock);
    Stream *st = new Stream;
    g_streams.insert(st);
    *s = (CUstream)st;
    return CUDA_SUCCESS;
}
CUresult cuStreamDestroy_v2(CUstream s) {
    std::lock_guard<std::recursive_mutex> g(g_lock);
    Stream *st = (Stream *)s;
    if (g_streams.erase(st)) delete st;
    return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode) {
    std::lock_guard<std::recursive_mutex> g(g_lock);
    Stream *st = (Stream *)s;
    if (!g_streams.count(st) || st->capturing) return CUDA_ERROR_INVALID_VALUE;
    st->capturing = true;
    st->graph = new Graph;
    return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(CUstream s, CUgraph *out) {
    std::lock_guard<std::recursive_mutex> g(g_lock);
    Stream *st = (Stream *)s;
    if (!g_streams.count(st) || !st->capturing) return CUDA_ERROR_INVALID_VALUE;
    st->capturing = false;
    *out = (CUgraph)st->graph;
    st->graph = nullptr;
    return CUDA_SUCCESS;
}
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph gr, unsigned long long) {
    *e = (CUgraphExec) new Graph(*(Graph *)gr);
    return CUDA_SUCCESS;
}
CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
    std::lock_guard<std::recursive_mutex> g(g_lock);
    Graph *gr = (Graph *)e;
    if (Stream *st = capturing(s)) {
        for (auto &o : gr->ops) st->graph->ops.push_back(o);
    } else {
        for (auto &o : gr->ops) run_op(o);
    }
    return CUDA_SUCCESS;
}
CUresult cuGraphExecDestroy(CUgraphExec e) { delete (Graph *)e; return CUDA_SUCCESS; }
CUresult cuGraphDestroy(CUgraph gr) { delete (Graph *)gr; return CUDA_SUCCESS; }

CUresult cuEventCreate(CUevent *e, unsigned) { *e = (CUevent) new double(now_ms()); return CUDA_SUCCESS; }
CUresult cuEventRecord(CUevent e, CUstream) { *(double *)e = now_ms(); return CUDA_SUCCESS; }
CUresult cuEventSynchronize(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) {
    *ms = (float)(*(double *)b - *(double *)a);
    return CUDA_SUCCESS;
}
CUresult cuEventDestroy_v2(CUevent e) { delete (double *)e; return CUDA_SUCCESS; }
/* The map in the emulator's own form (emu_prelude.h's TmaMap: what its TMA copies need), in the 128 bytes
 * of the driver's opaque one.  Only what kdart encodes is taken: 16-bit elements, rank 2 or 3, unit
 * element strides, no interleave, the 128-byte swizzle (a box's inner extent is 128 bytes). */
CUresult cuTensorMapEncodeTiled(CUtensorMap *m, CUtensorMapDataType t, cuuint32_t rank, void *base,
                                const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                                const cuuint32_t *estr, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
    if ((t != CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 && t != CU_TENSOR_MAP_DATA_TYPE_FLOAT16) || rank < 2 || rank > 3 ||
        il != CU_TENSOR_MAP_INTERLEAVE_NONE || sw != CU_TENSOR_MAP_SWIZZLE_128B || box[0] * 2 != 128)
        return CUDA_ERROR_INVALID_VALUE;
    for (cuuint32_t i = 0; i < rank; ++i)
        if (estr[i] != 1 || box[i] == 0 || box[i] > 256 || box[i] > dims[i]) /* (a box within its tensor) */
            return CUDA_ERROR_INVALID_VALUE;
    static_assert(sizeof(emu::TmaMap) <= sizeof(CUtensorMap), "the emulator's map fits the driver's");
    emu::TmaMap e = {};
    e.base = (uintptr_t)base;
    e.rank = (int)rank;
    for (cuuint32_t i = 0; i < rank; ++i) e.dim[i] = dims[i], e.box[i] = box[i];
    for (cuuint32_t i = 0; i + 1 < rank; ++i) e.stride[i + 1] = strides[i];
    e.stride[0] = 2;
    memset(m, 0, sizeof *m);
    memcpy(m, &e, sizeof e);
    return CUDA_SUCCESS;
}

} /* extern "C" */
