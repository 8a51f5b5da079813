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

const DLTensor *opt(const c10::optional<at::Tensor> &t, DLTensor &slot) {
    if (!t.has_value() || !t->defined()) return nullptr;
    slot = dl(*t);
    return &slot;
}

// (dq, dk, db, dg), or kdart's status (an int) when it refused the call.
py::object intra(uintptr_t handle, uintptr_t fn, uintptr_t stream, const at::Tensor &q, const at::Tensor &k,
                 const at::Tensor &g, const at::Tensor &beta, const at::Tensor &dAqk, const at::Tensor &dAkk,
                 const at::Tensor &dq, const at::Tensor &dk, const at::Tensor &db, const at::Tensor &dg, bool fold_dg,
                 bool emit_bf16, const c10::optional<at::Tensor> &cu_seqlens,
                 const c10::optional<at::Tensor> &chunk_indices) {
    // outputs have the shapes of dq, dk, db, dg (kdart checks those against q and g)
    at::Tensor oq = emit_bf16 ? at::empty_like(dq, dq.options().dtype(q.scalar_type())) : at::empty_like(dq);
    at::Tensor ok = emit_bf16 ? at::empty_like(dk, dk.options().dtype(q.scalar_type())) : at::empty_like(dk);
    at::Tensor ob = at::empty_like(db), og = at::empty_like(dg);
    DLTensor t[14] = {dl(q), dl(k), dl(g), dl(beta), dl(dAqk), dl(dAkk), dl(dq), dl(dk), dl(dg), dl(db),
                      dl(oq), dl(ok), dl(og), dl(ob)};
    DLTensor cu, ci;
    kdart_bwd_intra_args a{};
    a.struct_size = sizeof a;
    a.q = &t[0], a.k = &t[1], a.g = &t[2], a.beta = &t[3], a.dAqk = &t[4], a.dAkk = &t[5];
    a.dq_in = &t[6], a.dk_in = &t[7], a.dg_in = &t[8], a.db_in = &t[9];
    a.dq = &t[10], a.dk = &t[11], a.dg = &t[12], a.db = &t[13];
    a.fold_dg = fold_dg, a.emit_bf16 = emit_bf16;
    a.cu_seqlens = opt(cu_seqlens, cu);
    a.chunk_indices = opt(chunk_indices, ci);
    int rc = reinterpret_cast<IntraFn>(fn)(reinterpret_cast<kdart_rt *>(handle), &a, reinterpret_cast<void *>(stream));
    if (rc != 0) return py::int_(rc);
    return py::make_tuple(oq, ok, ob, og);
}

// (dh, dh0, dv2), dh0 of shape (0,) without h0, or kdart's status.  nt: dh's chunk rows (fla's NT).
// state_v_first: the state's last two dims are [V, K] (dh here; h0, dht and dh0 = empty_like(h0) as given).
// kdart picks the specialization (K tile, BV, varlen, tail) from these shapes, as for the Python path.
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
    DLTensor t[10] = {dl(q), dl(k), dl(w), dl(gk), dl(d_o), dl(dv), {}, dl(dh), dl(dv2), {}};
    DLTensor cu, ci, co;
    kdart_bwd_dhu_args a{};
    a.struct_size = sizeof a;
    a.qg = &t[0], a.kg = &t[1], a.w = &t[2], a.g = &t[3], a.d_o = &t[4], a.dv = &t[5];
    a.dht = opt(dht, t[6]);
    a.dh = &t[7], a.dv2 = &t[8];
    if (has_h0) {
        t[9] = dl(dh0);
        a.dh0 = &t[9];
    }
    a.scale = std::isnan(scale) ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(K))) : static_cast<float>(scale);
    a.v_tile = 0; // kdart picks (kdart_dhu_v_tile's choice, which the Python path asks for)
    a.state_v_first = state_v_first ? 1 : 0;
    a.cu_seqlens = opt(cu_seqlens, cu);
    a.chunk_indices = opt(chunk_indices, ci);
    a.chunk_offsets = opt(chunk_offsets, co);
    int rc = reinterpret_cast<DhuFn>(fn)(reinterpret_cast<kdart_rt *>(handle), &a, reinterpret_cast<void *>(stream));
    if (rc != 0) return py::int_(rc);
    return py::make_tuple(dh, dh0, dv2);
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "kdart.torch's eager fast path (see kdart/torch_ext.py)";
    m.attr("ABI") = py::int_(KDART_VERSION_MAJOR * 10000 + KDART_VERSION_MINOR * 100 + KDART_VERSION_PATCH);
    m.def("intra", &intra);
    m.def("dhu", &dhu);
}
