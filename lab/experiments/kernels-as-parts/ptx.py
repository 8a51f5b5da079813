#!/usr/bin/env python3
"""ptx.py KERNEL_DIR SOURCE ARCH OUTDIR ENTRY...: the PTX that NVRTC makes of each entry
(a kernel_src name expression, e.g. 'kdart_bwd_dhu<kdart::bf16, 128, 32, false, 0>'),
with the runtime's NVRTC options except -dlto (-arch=ARCH -std=c++17 -default-device),
one file per entry in OUTDIR.  A second opinion beside tools/cmp_cubins.py when a kernel
source is reorganized: about a second per entry instead of a full compile, and it tells a
real change of the code (the PTX differs) from ptxas differing with itself (the PTX is the
same, the SASS is not).  Needs libnvrtc (CUDA_HOME, default /usr/local/cuda)."""
import ctypes, os, sys

cuda = os.environ.get('CUDA_HOME', '/usr/local/cuda')
nv = ctypes.CDLL(os.path.join(cuda, 'lib64', 'libnvrtc.so'))
kdir, src, arch, out = sys.argv[1:5]
os.makedirs(out, exist_ok=True)


def check(rc, prog=None):
    if rc == 0:
        return
    if prog is not None:
        n = ctypes.c_size_t()
        nv.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        nv.nvrtcGetProgramLog(prog, log)
        sys.stderr.write(log.value.decode())
    raise SystemExit('nvrtc error %d' % rc)


for entry in sys.argv[5:]:
    prog = ctypes.c_void_p()
    check(nv.nvrtcCreateProgram(ctypes.byref(prog), ('#include "%s"\n' % src).encode(), b'kdart_unit.cu', 0,
                                None, None))
    check(nv.nvrtcAddNameExpression(prog, entry.encode()))
    opts = [('-arch=' + arch).encode(), b'-std=c++17', b'-default-device', ('-I' + kdir).encode()]
    check(nv.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)), prog)
    n = ctypes.c_size_t()
    check(nv.nvrtcGetPTXSize(prog, ctypes.byref(n)))
    ptx = ctypes.create_string_buffer(n.value)
    check(nv.nvrtcGetPTX(prog, ptx))
    name = entry.replace('kdart::', '').replace('<', '_').replace('>', '').replace(',', '_').replace(' ', '')
    with open(os.path.join(out, name + '.ptx'), 'wb') as f:
        f.write(ptx.value)
    nv.nvrtcDestroyProgram(ctypes.byref(prog))
