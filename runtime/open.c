/*
 * open.c: kdart_open, where the library's layers are put together.  The
 * core builds the handle (kdart__open, runtime/core/runtime.c); the service
 * client then installs its remote-prepare hook on it (KDART_SERVICE,
 * runtime/service/client.c).  Doing that here, above both, is what lets
 * the core call the service without knowing it exists: this is the one
 * file that includes every layer (runtime/core/internal.h has the map).
 */
#include "rt.h"
#include "service.h"

int kdart_open(kdart_rt **out, const kdart_options *opts) {
    int rc = kdart__open(out, opts);
    if (rc == KDART_OK) kdart__client_install(*out);
    return rc;
}
