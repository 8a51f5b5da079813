/*
 * cuda_api.h: the CUDA Driver API entry points kdart uses, resolved from
 * libcuda with dlopen/dlsym at first use (cuda.c).  This table is also the
 * loader seam: nothing in kdart calls libcuda except through it.
 *
 * Only cuda.h's types are used; libcuda itself is never linked, so the
 * library, the CLI and the tests start on machines without a driver.
 */
#ifndef KDART_CUDA_API_H
#define KDART_CUDA_API_H

#include <cuda.h>

#define KDART__CUDA_FUNCS(X)                                                                       \
    X(cuInit, CUresult, (unsigned))                                                                \
    X(cuGetErrorName, CUresult, (CUresult, const char **))                                        \
    X(cuDeviceGetCount, CUresult, (int *))                                                         \
    X(cuDeviceGet, CUresult, (CUdevice *, int))                                                    \
    X(cuDeviceGetAttribute, CUresult, (int *, CUdevice_attribute, CUdevice))                       \
    X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext *, CUdevice))                                 \
    X(cuCtxGetCurrent, CUresult, (CUcontext *))                                                    \
    X(cuCtxSetCurrent, CUresult, (CUcontext))                                                      \
    X(cuCtxGetDevice, CUresult, (CUdevice *))                                                      \
    X(cuCtxSynchronize, CUresult, (void))                                                          \
    X(cuLibraryLoadData, CUresult,                                                                 \
      (CUlibrary *, const void *, CUjit_option *, void **, unsigned, CUlibraryOption *, void **,    \
       unsigned))                                                                                  \
    X(cuLibraryUnload, CUresult, (CUlibrary))                                                      \
    X(cuLibraryGetKernel, CUresult, (CUkernel *, CUlibrary, const char *))                         \
    X(cuKernelGetFunction, CUresult, (CUfunction *, CUkernel))                                     \
    X(cuFuncSetAttribute, CUresult, (CUfunction, CUfunction_attribute, int))                       \
    X(cuFuncGetAttribute, CUresult, (int *, CUfunction_attribute, CUfunction))                     \
    X(cuLaunchKernel, CUresult,                                                                    \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, \
       void **, void **))                                                                          \
    X(cuMemAlloc_v2, CUresult, (CUdeviceptr *, size_t))                                            \
    X(cuMemFree_v2, CUresult, (CUdeviceptr))                                                       \
    X(cuMemcpyHtoD_v2, CUresult, (CUdeviceptr, const void *, size_t))                              \
    X(cuMemcpyDtoH_v2, CUresult, (void *, CUdeviceptr, size_t))                                    \
    X(cuMemcpyDtoD_v2, CUresult, (CUdeviceptr, CUdeviceptr, size_t))                               \
    X(cuMemsetD32_v2, CUresult, (CUdeviceptr, unsigned, size_t))                                   \
    X(cuMemsetD32Async, CUresult, (CUdeviceptr, unsigned, size_t, CUstream))                       \
    X(cuStreamCreate, CUresult, (CUstream *, unsigned))                                            \
    X(cuStreamDestroy_v2, CUresult, (CUstream))                                                    \
    X(cuStreamSynchronize, CUresult, (CUstream))                                                   \
    X(cuStreamBeginCapture_v2, CUresult, (CUstream, CUstreamCaptureMode))                          \
    X(cuStreamEndCapture, CUresult, (CUstream, CUgraph *))                                         \
    X(cuGraphInstantiateWithFlags, CUresult, (CUgraphExec *, CUgraph, unsigned long long))         \
    X(cuGraphLaunch, CUresult, (CUgraphExec, CUstream))                                            \
    X(cuGraphExecDestroy, CUresult, (CUgraphExec))                                                 \
    X(cuGraphDestroy, CUresult, (CUgraph))                                                         \
    X(cuEventCreate, CUresult, (CUevent *, unsigned))                                              \
    X(cuEventRecord, CUresult, (CUevent, CUstream))                                                \
    X(cuEventSynchronize, CUresult, (CUevent))                                                     \
    X(cuEventElapsedTime_v2, CUresult, (float *, CUevent, CUevent))                                \
    X(cuEventDestroy_v2, CUresult, (CUevent))                                                      \
    X(cuTensorMapEncodeTiled, CUresult,                                                            \
      (CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *, const cuuint64_t *, \
       const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,           \
       CUtensorMapL2promotion, CUtensorMapFloatOOBfill))

struct kdart__cuda {
#define KDART__CUDA_FIELD(name, ret, args) ret(*name) args;
    KDART__CUDA_FUNCS(KDART__CUDA_FIELD)
#undef KDART__CUDA_FIELD
};

#endif /* KDART_CUDA_API_H */
