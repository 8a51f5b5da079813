// _torch_ext.cpp: kdart.torch's eager fast path, one C++ call per op (built on the user's machine by
// kdart/torch_ext.py against the installed torch; optional: without it kdart.torch runs its Python path).
//
// The Python path pays for every tensor attribute it reads and for torch.empty's argument parsing, which
// together cost several times the C call on a slow host.  Here the tensors arrive as at::Tensor, their
// DLTensor descriptors are written on the stack straight from sizes()/strides()/data_ptr() (no copies),
// the outputs are allocated with at::empty_like / at::empty, and kdart's C function is called through the
// address Python hands in, so this file links nothing of kdart and includes only kdart.h for the layouts.
// kdart's own validation (every shape, dtype, stride, device, alignment, overlap) runs on every call, as
// for any C caller; on failure the call returns kdart's status as an int (Python raises with kdart's
// message) and the freshly allocated outputs are dropped: nothing the caller passed is written.
#include <torch/extension.h>
#ifdef KDART_EXT_CUDA
#include <ATen/EmptyTensor.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <cmath>
#include <cstdint>
#include <vector>

extern "C" {
#include "kdart.h"
}

namespace {

using IntraFn = int (*)(kdart_rt *, const kdart_bwd_intra_args *, void *);
using DhuFn = int (*)(kdart_rt *, const kdart_bwd_dhu_args *, void *);

DLDataType dl_dtype(at::ScalarType s) {
    switch (s) {
    case at::kBFloat16: return {kDLBfloat, 16, 1};
    case at::kHalf: return {kDLFloat, 16, 1};
    case at::kFloat: return {kDLFloat, 32, 1};
    case at::kInt: return {kDLInt, 32, 1};
    case at::kLong: return {kDLInt, 64, 1};
    default: return {kDLOpaqueHandle, 0, 0}; // kdart refuses it with EDTYPE, naming the argument
    }
}

// A descriptor of t, valid while t lives (shape and strides point into the tensor's own metadata).
DLTensor dl(const at::Tensor &t) {
    DLTensor d{};
    d.data = t.data_ptr();
    d.device = t.is_cuda() ? DLDevice{kDLCUDA, static_cast<int32_t>(t.get_device())} : DLDevice{kDLCPU, 0};
    d.ndim = static_cast<int32_t>(t.dim());
    d.dtype = dl_dtype(t.scalar_type());
    d.shape = const_cast<int64_t *>(t.sizes().data());
    d.strides = const_cast<int64_t *>(t.strides().data());
    d.byte_offset = 0; // data_ptr() already includes the storage offset
    return d;
}

const at::Tensor *opt(const c10::optional<at::Tensor> &t) {
    return t.has_value() && t->defined() ? &*t : nullptr;
}

// kdart's bwd_intra on in = (q, k, g, beta, dAqk, dAkk, dq, dk, db, dg) into out = (dq, dk, db, dg)
// (cu, ci: nullptr when absent): kdart's status.
int run_intra(kdart_rt *rt, IntraFn fn, void *stream, const at::Tensor *const in[10], const at::Tensor out[4],
              bool fold_dg, bool emit_bf16, const at::Tensor *cu, const at::Tensor *ci) {
    DLTensor t[14] = {dl(*in[0]), dl(*in[1]), dl(*in[2]), dl(*in[3]), dl(*in[4]), dl(*in[5]), dl(*in[6]),
                      dl(*in[7]), dl(*in[9]), dl(*in[8]), dl(out[0]), dl(out[1]), dl(out[3]), dl(out[2])};
    DLTensor dcu, dci;
    kdart_bwd_intra_args a{};
    a.struct_size = sizeof a;
    a.q = &t[0], a.k = &t[1], a.g = &t[2], a.beta = &t[3], a.dAqk = &t[4], a.dAkk = &t[5];
    a.dq_in = &t[6], a.dk_in = &t[7], a.dg_in = &t[8], a.db_in = &t[9];
    a.dq = &t[10], a.dk = &t[11], a.dg = &t[12], a.db = &t[13];
    a.fold_dg = fold_dg, a.emit_bf16 = emit_bf16;
    if (cu) dcu = dl(*cu), a.cu_seqlens = &dcu;
    if (ci) dci = dl(*ci), a.chunk_indices = &dci;
    return fn(rt, &a, stream);
}

// kdart's bwd_dhu on in = (q, k, w, do, dv, gk) into dh, dh0 (nullptr without h0), dv2; scale NaN: K^-0.5;
// state_v_first: dh, dht, dh0 (and h0) in fla's transposed [.., V, K] layout.
int run_dhu(kdart_rt *rt, DhuFn fn, void *stream, const at::Tensor *const in[6], const at::Tensor *dht,
            const at::Tensor &dh, const at::Tensor *dh0, const at::Tensor &dv2, double scale, const at::Tensor *cu,
            const at::Tensor *ci, const at::Tensor *co, bool state_v_first) {
    DLTensor t[10] = {dl(*in[0]), dl(*in[1]), dl(*in[2]), dl(*in[5]), dl(*in[3]), dl(*in[4]), {}, dl(dh), dl(dv2), {}};
    DLTensor dcu, dci, dco;
    kdart_bwd_dhu_args a{};
    a.struct_size = sizeof a;
    a.qg = &t[0], a.kg = &t[1], a.w = &t[2], a.g = &t[3], a.d_o = &t[4], a.dv = &t[5];
    if (dht) t[6] = dl(*dht), a.dht = &t[6];
    a.dh = &t[7], a.dv2 = &t[8];
    if (dh0) t[9] = dl(*dh0), a.dh0 = &t[9];
    const double K = static_cast<double>(in[0]->size(in[0]->dim() - 1));
    a.scale = std::isnan(scale) ? static_cast<float>(1.0 / std::sqrt(K)) : static_cast<float>(scale);
    a.v_tile = 0; // kdart picks (kdart_dhu_v_tile's choice, which the Python path asks for)
    a.state_v_first = state_v_first ? 1 : 0;
    if (cu) dcu = dl(*cu), a.cu_seqlens = &dcu;
    if (ci) dci = dl(*ci), a.chunk_indices = &dci;
    if (co) dco = dl(*co), a.chunk_offsets = &dco;
    return fn(rt, &a, stream);
}

// (dq, dk, db, dg), or kdart's status (an int) when it refused the call.
py::object intra(uintptr_t handle, uintptr_t fn, uintptr_t stream, const at::Tensor &q, const at::Tensor &k,
                 const at::Tensor &g, const at::Tensor &beta, const at::Tensor &dAqk, const at::Tensor &dAkk,
                 const at::Tensor &dq, const at::Tensor &dk, const at::Tensor &db, const at::Tensor &dg, bool fold_dg,
                 bool emit_bf16, const c10::optional<at::Tensor> &cu_seqlens,
                 const c10::optional<at::Tensor> &chunk_indices) {
    // outputs have the shapes of dq, dk, db, dg (kdart checks those against q and g)
    const at::Tensor out[4] = {
        emit_bf16 ? at::empty_like(dq, dq.options().dtype(q.scalar_type())) : at::empty_like(dq),
        emit_bf16 ? at::empty_like(dk, dk.options().dtype(q.scalar_type())) : at::empty_like(dk), at::empty_like(db),
        at::empty_like(dg)};
    const at::Tensor *in[10] = {&q, &k, &g, &beta, &dAqk, &dAkk, &dq, &dk, &db, &dg};
    const int rc = run_intra(reinterpret_cast<kdart_rt *>(handle), reinterpret_cast<IntraFn>(fn),
                             reinterpret_cast<void *>(stream), in, out, fold_dg, emit_bf16, opt(cu_seqlens),
                             opt(chunk_indices));
    if (rc != 0) return py::int_(rc);
    return py::make_tuple(out[0], out[1], out[2], out[3]);
}

// (dh, dh0, dv2), dh0 of shape (0,) without h0, or kdart's status.  nt: dh's chunk rows (fla's NT).
// state_v_first: the state's last two dims are [V, K] (dh here; h0, dht and dh0 = empty_like(h0) as given).
py::object dhu(uintptr_t handle, uintptr_t fn, uintptr_t stream, const at::Tensor &q, const at::Tensor &k,
               const at::Tensor &w, const at::Tensor &d_o, const at::Tensor &dv, const at::Tensor &gk,
               const c10::optional<at::Tensor> &h0, const c10::optional<at::Tensor> &dht, double scale, int64_t nt,
               const c10::optional<at::Tensor> &cu_seqlens, const c10::optional<at::Tensor> &chunk_indices,
               const c10::optional<at::Tensor> &chunk_offsets, bool state_v_first) {
    if (q.dim() != 4 || d_o.dim() != 4) return py::int_(static_cast<int>(KDART_ESHAPE)); // Python says why
    const int64_t B = q.size(0), HV = q.size(2), K = q.size(3), V = d_o.size(3);
    const bool has_h0 = h0.has_value() && h0->defined();
    at::Tensor dh = state_v_first ? at::empty({B, nt, HV, V, K}, q.options()) : at::empty({B, nt, HV, K, V}, q.options());
    at::Tensor dh0 = has_h0 ? at::empty_like(*h0) : at::empty({0}, q.options().dtype(at::kFloat));
    at::Tensor dv2 = at::empty_like(dv);
    const at::Tensor *in[6] = {&q, &k, &w, &d_o, &dv, &gk};
    const int rc = run_dhu(reinterpret_cast<kdart_rt *>(handle), reinterpret_cast<DhuFn>(fn),
                           reinterpret_cast<void *>(stream), in, opt(dht), dh, has_h0 ? &dh0 : nullptr, dv2, scale,
                           opt(cu_seqlens), opt(chunk_indices), opt(chunk_offsets), state_v_first);
    if (rc != 0) return py::int_(rc);
    return py::make_tuple(dh, dh0, dv2);
}

#ifdef KDART_EXT_CUDA
// ---------------------------------------------------------------- the direct entries (built with c10_cuda)
//
// intra_fast / dhu_fast take kdart.torch.bwd_intra's and bwd_dhu's positional arguments as they are and do
// everything between Python and kdart's C function here: no pybind argument casting (METH_FASTCALL, the
// tensors unpacked in place), the device and current stream from c10::cuda instead of two Python calls,
// the outputs from the CUDA caching allocator without a trip through the dispatcher (what at::empty_like
// ends in for a contiguous CUDA tensor).  They return None for every call they do not take (a tensor not
// on the current CUDA device, a varlen dh without chunk_indices, no dh rows) and for every call kdart
// refuses: kdart.torch's Python path then serves it or raises with kdart's message, so none of the
// Python path's behaviour moves here.  bind() hands them the runtime and the two function addresses once.

kdart_rt *g_rt;
IntraFn g_intra;
DhuFn g_dhu;

PyObject *bind(PyObject *, PyObject *const *args, Py_ssize_t n) {
    if (n != 3) {
        PyErr_SetString(PyExc_TypeError, "bind(handle, intra_addr, dhu_addr)");
        return nullptr;
    }
    void *v[3];
    for (int i = 0; i < 3; i++) {
        v[i] = PyLong_AsVoidPtr(args[i]);
        if (v[i] == nullptr && PyErr_Occurred()) return nullptr;
    }
    g_rt = static_cast<kdart_rt *>(v[0]);
    g_intra = reinterpret_cast<IntraFn>(v[1]);
    g_dhu = reinterpret_cast<DhuFn>(v[2]);
    Py_RETURN_NONE;
}

// The tensor in o, or nullptr (o is not a torch.Tensor; None where `none_ok`, which sets *none).
const at::Tensor *tensor_arg(PyObject *o, bool none_ok = false, bool *none = nullptr) {
    if (none_ok && o == Py_None) {
        *none = true;
        return nullptr;
    }
    if (!THPVariable_Check(o)) return nullptr;
    return &THPVariable_Unpack(o);
}

at::Tensor out_like(const at::Tensor &t, at::ScalarType dtype) {
    return at::detail::empty_generic(t.sizes(), c10::cuda::CUDACachingAllocator::get(),
                                     c10::DispatchKeySet(c10::DispatchKey::CUDA), dtype, c10::MemoryFormat::Contiguous);
}

at::Tensor out_of(at::IntArrayRef sizes, at::ScalarType dtype) {
    return at::detail::empty_generic(sizes, c10::cuda::CUDACachingAllocator::get(),
                                     c10::DispatchKeySet(c10::DispatchKey::CUDA), dtype, c10::MemoryFormat::Contiguous);
}

// q's device when it is the current CUDA device and kdart is bound, else -1 (the Python path takes it).
int current_device_of(const at::Tensor &q) {
    if (g_rt == nullptr || !q.is_cuda()) return -1;
    const int dev = q.get_device();
    return dev == c10::cuda::current_device() ? dev : -1;
}

PyObject *intra_fast(PyObject *, PyObject *const *a, Py_ssize_t n) {
    if (n != 14) Py_RETURN_NONE;
    const at::Tensor *t[10];
    for (int i = 0; i < 10; i++)
        if ((t[i] = tensor_arg(a[i])) == nullptr) Py_RETURN_NONE;
    bool no_cu = false, no_ci = false;
    const at::Tensor *cu = tensor_arg(a[12], true, &no_cu), *ci = tensor_arg(a[13], true, &no_ci);
    if ((!cu && !no_cu) || (!ci && !no_ci)) Py_RETURN_NONE;
    const int fold = PyObject_IsTrue(a[10]), emit = PyObject_IsTrue(a[11]);
    if (fold < 0 || emit < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    const at::Tensor &q = *t[0], &dq = *t[6], &dk = *t[7], &db = *t[8], &dg = *t[9];
    const int dev = current_device_of(q);
    if (dev < 0) Py_RETURN_NONE;
    const at::Tensor out[4] = {out_like(dq, emit ? q.scalar_type() : dq.scalar_type()),
                               out_like(dk, emit ? q.scalar_type() : dk.scalar_type()),
                               out_like(db, db.scalar_type()), out_like(dg, dg.scalar_type())};
    const at::Tensor *in[10] = {t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9]};
    if (run_intra(g_rt, g_intra, c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(dev)).stream(), in,
                  out, fold, emit, cu, ci) != 0)
        Py_RETURN_NONE;
    PyObject *r = PyTuple_New(4);
    if (!r) return nullptr;
    for (int i = 0; i < 4; i++) PyTuple_SET_ITEM(r, i, THPVariable_Wrap(out[i]));
    return r;
}

// (q, k, w, do, dv, gk, h0, dht, scale, cu_seqlens, chunk_indices, chunk_offsets, state_v_first)
// -> (dh, dh0 or None, dv2)
PyObject *dhu_fast(PyObject *, PyObject *const *a, Py_ssize_t n) {
    if (n != 13) Py_RETURN_NONE;
    const at::Tensor *t[6];
    for (int i = 0; i < 6; i++)
        if ((t[i] = tensor_arg(a[i])) == nullptr) Py_RETURN_NONE;
    bool none[5] = {};
    const at::Tensor *h0 = tensor_arg(a[6], true, &none[0]), *dht = tensor_arg(a[7], true, &none[1]);
    const at::Tensor *cu = tensor_arg(a[9], true, &none[2]), *ci = tensor_arg(a[10], true, &none[3]);
    const at::Tensor *co = tensor_arg(a[11], true, &none[4]);
    if ((!h0 && !none[0]) || (!dht && !none[1]) || (!cu && !none[2]) || (!ci && !none[3]) || (!co && !none[4]))
        Py_RETURN_NONE;
    const at::Tensor &q = *t[0], &d_o = *t[3], &dv = *t[4];
    if (q.dim() != 4 || d_o.dim() != 4 || (cu && !ci)) Py_RETURN_NONE; // dh's rows need a count: Python path
    double scale = NAN;
    if (a[8] != Py_None) {
        scale = PyFloat_AsDouble(a[8]);
        if (scale == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    const int vfirst = PyObject_IsTrue(a[12]);
    if (vfirst < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    const int64_t B = q.size(0), T = q.size(1), HV = q.size(2), K = q.size(3), V = d_o.size(3);
    const int64_t nt = ci ? ci->size(0) : (T + 63) / 64; // fla's NT: len(chunk_indices), or ceil(T / 64)
    if (nt < 1) Py_RETURN_NONE;
    const int dev = current_device_of(q);
    if (dev < 0) Py_RETURN_NONE;
    at::Tensor dh = vfirst ? out_of({B, nt, HV, V, K}, q.scalar_type()) : out_of({B, nt, HV, K, V}, q.scalar_type());
    at::Tensor dh0 = h0 ? out_like(*h0, h0->scalar_type()) : at::Tensor();
    at::Tensor dv2 = out_like(dv, dv.scalar_type());
    if (run_dhu(g_rt, g_dhu, c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(dev)).stream(), t, dht, dh,
                h0 ? &dh0 : nullptr, dv2, scale, cu, ci, co, vfirst) != 0)
        Py_RETURN_NONE;
    PyObject *r = PyTuple_New(3);
    if (!r) return nullptr;
    PyTuple_SET_ITEM(r, 0, THPVariable_Wrap(std::move(dh)));
    if (h0) {
        PyTuple_SET_ITEM(r, 1, THPVariable_Wrap(std::move(dh0)));
    } else {
        Py_INCREF(Py_None);
        PyTuple_SET_ITEM(r, 1, Py_None);
    }
    PyTuple_SET_ITEM(r, 2, THPVariable_Wrap(std::move(dv2)));
    return r;
}

PyObject *bound(PyObject *, PyObject *) { return PyLong_FromVoidPtr(g_rt); }

PyMethodDef g_direct[] = {
    {"bound", bound, METH_NOARGS, "the runtime handle bind() gave the direct entries (0: none)"},
    {"bind", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(bind)), METH_FASTCALL,
     "bind(handle, intra_addr, dhu_addr): the runtime the direct entries call"},
    {"intra_fast", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(intra_fast)), METH_FASTCALL,
     "bwd_intra's 14 positional arguments -> (dq, dk, db, dg), or None (the Python path takes the call)"},
    {"dhu_fast", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(dhu_fast)), METH_FASTCALL,
     "bwd_dhu's 13 positional arguments -> (dh, dh0 or None, dv2), or None (the Python path takes the call)"},
};
#endif

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "kdart.torch's eager fast path (see kdart/torch_ext.py)";
    m.attr("ABI") = py::int_(KDART_VERSION_MAJOR * 10000 + KDART_VERSION_MINOR * 100 + KDART_VERSION_PATCH);
    m.def("intra", &intra);
    m.def("dhu", &dhu);
#ifdef KDART_EXT_CUDA
    for (PyMethodDef &d : g_direct) {
        PyObject *f = PyCFunction_NewEx(&d, nullptr, m.ptr());
        if (f == nullptr || PyModule_AddObject(m.ptr(), d.ml_name, f) < 0) throw py::error_already_set();
    }
#endif
}
