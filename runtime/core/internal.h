/*
 * internal.h: the map of kdart's modules, and the core's one header for
 * the base layer beneath it (rt.h includes it).  Nothing here is API; every
 * name is kdart__ (two underscores) and may change at any time.
 *
 * Layers (docs/design.md, "Layers"); each includes only those below it:
 *   runtime/base/     base.h: alloc.c (the allocator seam), clock.c,
 *                     sha256.c, parse.c (sizes and counts people write),
 *                     env.c (KDART_* variables).  libc and kdart.h only.
 *   cache/            store.c, store.h: the SQLite compile cache.  Base only.
 *   runtime/core/     rt.h (the handle): registry.c (the kernel table),
 *                     stage.h, stage.c (a stage's one description and
 *                     the engine every operation runs through),
 *                     stages/ (one file per stage: registry row,
 *                     launch shape, prewarm rule, operation),
 *                     source.c (kernel_src loading and include closure),
 *                     locate.c (where the kernels are when nobody said),
 *                     prepare.c (kdart_prepare), compile.c (NVRTC +
 *                     nvJitLink behind the compiler seam), cuda.c and
 *                     cuda_api.h (libcuda by dlopen, per-context module
 *                     tables), runtime.c (the handle's open and close),
 *                     error.c (status table, per-handle messages),
 *                     cache_api.c (the public cache calls), jobs.c
 *                     (background compiles).
 *                     Base and store; never the service.
 *   runtime/service/  service.h: client.c (the protocol codec, the client,
 *                     the remote-prepare hook it installs on a handle),
 *                     service.c (`kdart serve`).  Calls down into the core.
 *   runtime/open.c    kdart_open: the core's handle with the service's hook;
 *                     the one file that sees every layer.
 * Above the library, the CLI (tools/), the check harness (tests/check/) and
 * the Python package use only the public header.
 */
#ifndef KDART_INTERNAL_H
#define KDART_INTERNAL_H

#include "base.h"

#endif /* KDART_INTERNAL_H */
