/*
 * locate.c: where the kernel sources are when nobody said (no
 * kdart_options.kernel_dir, no KDART_KERNEL_DIR).
 *
 * The answer depends on where the code that asks lives, found at run time
 * (dladdr on this file's own function; /proc/self/exe when kdart is linked
 * statically into the program), not on a path fixed at configure time:
 *   - a build tree of kdart (the directory, or its parent, holds kdart's
 *     CMakeCache.txt):
 *     the source tree's kernel_src/ (the path compiled in, else the one the
 *     cache file names, else ../kernel_src, for a build folder carried to
 *     another machine inside its checkout);
 *   - anywhere else, an install: DIR/<libdir-to-datadir>/kdart/kernel_src,
 *     the same from a bindir, so a prefix moved as a whole still works;
 *     a program linked statically outside any prefix falls back to the
 *     configure-time install path.
 * An installed library never reads a build or source tree.  When no
 * candidate exists the first install candidate is returned, so that the
 * warning at open names a place the user can check.
 */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt.h"

int kdart__is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The directory holding the object this code is in, resolved; 0 on failure. */
static int self_dir(char *out, size_t n) {
    Dl_info info;
    struct link_map *map = NULL;
    char path[PATH_MAX];
    path[0] = '\0';
    if (dladdr1((void *)&self_dir, &info, (void **)&map, RTLD_DL_LINKMAP) && map && map->l_name &&
        map->l_name[0]) {
        if (!realpath(map->l_name, path)) return 0;
    } else {
        /* The main program: the link map names it "" and dli_fname is only
         * argv[0], so ask the kernel. */
        ssize_t len = readlink("/proc/self/exe", path, sizeof path - 1);
        if (len <= 0) return 0;
        path[len] = '\0';
    }
    char *slash = strrchr(path, '/');
    if (!slash) return 0;
    *slash = '\0';
    if ((size_t)snprintf(out, n, "%s", path[0] ? path : "/") >= n) return 0;
    return 1;
}

/* If dir is a build tree of kdart, the value of CMAKE_HOME_DIRECTORY in its
 * CMakeCache.txt (the source tree it was configured from) into src. */
static int kdart_build_tree(const char *dir, char *src, size_t n) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/CMakeCache.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[PATH_MAX + 64];
    int ours = 0;
    src[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (strcmp(line, "CMAKE_PROJECT_NAME:STATIC=kdart") == 0) ours = 1;
        size_t len = strlen(line + 30);
        if (strncmp(line, "CMAKE_HOME_DIRECTORY:INTERNAL=", 30) == 0 && len < n) memcpy(src, line + 30, len + 1);
    }
    fclose(f);
    return ours;
}

char *kdart__default_kernel_dir(void) {
    char dir[PATH_MAX], cand[PATH_MAX + 64], src[PATH_MAX];
    if (!self_dir(dir, sizeof dir)) return kdart__strdup(KDART_INSTALL_KERNEL_DIR);
    /* The build folder itself (the CLI, libkdart.so) or one below it (tests/). */
    snprintf(cand, sizeof cand, "%s/..", dir);
    if (kdart_build_tree(dir, src, sizeof src) || kdart_build_tree(cand, src, sizeof src)) {
        if (kdart__is_dir(KDART_SOURCE_KERNEL_DIR)) return kdart__strdup(KDART_SOURCE_KERNEL_DIR);
        snprintf(cand, sizeof cand, "%s/kernel_src", src);
        if (src[0] && kdart__is_dir(cand)) return kdart__strdup(cand);
        snprintf(cand, sizeof cand, "%s/../kernel_src", dir);
        if (kdart__is_dir(cand)) return kdart__strdup(cand);
    }
    const char *rel[] = {KDART_KERNELS_FROM_LIBDIR, KDART_KERNELS_FROM_BINDIR};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        snprintf(cand, sizeof cand, "%s/%s", dir, rel[i]);
        char real[PATH_MAX];
        if (kdart__is_dir(cand) && realpath(cand, real)) return kdart__strdup(real);
    }
    if (kdart__is_dir(KDART_INSTALL_KERNEL_DIR)) return kdart__strdup(KDART_INSTALL_KERNEL_DIR);
    snprintf(cand, sizeof cand, "%s/%s", dir, rel[0]);
    return kdart__strdup(cand);
}
