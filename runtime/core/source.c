/*
 * source.c: reads a kernel's source from kernel_src/ and, transitively,
 * every file it includes with a quoted #include.
 *
 * kdart resolves its own includes instead of handing NVRTC an include
 * path: every file NVRTC sees from us is passed to it by name, with its
 * content, so the cache key can list exactly those files and their SHA-256
 * digests.  Nothing else from the project reaches the compiler, and no
 * absolute path enters the key, so a cache copied to another machine or
 * directory still hits while any edit to an included file misses.
 *
 * Include names must be relative paths inside kernel_src ("a.cuh",
 * "sm90/b.cuh"), without "..": a kernel source cannot pull in files from
 * elsewhere.  Names alone cannot promise that (a symlink in kernel_src may
 * point anywhere), so each file's resolved path (realpath) must also lie
 * inside the resolved kernel directory; a symlink that stays inside works.  Angle-bracket includes are left to NVRTC (the toolkit's
 * headers, covered in the key by the NVRTC version and build).
 *
 * All file reads go through kdart__read_file, the file-system seam.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt.h"

#define KDART__MAX_FILES 64          /* include closure of one unit */
#define KDART__MAX_SOURCE (4u << 20) /* a kernel source larger than this is a mistake */

/* O_NONBLOCK: opening a FIFO for reading waits for a writer, forever if
 * none comes; with it the open returns at once and fstat tells what was
 * opened, so anything but a regular file is refused before a byte is read
 * (a FIFO, a directory, a device: KDART_ESOURCE).  On a regular file the
 * flag changes nothing.  O_NOCTTY: a terminal named as a source must not
 * become the process's controlling terminal. */
int kdart__read_file_default(const char *path, char **text, size_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return errno == ENOENT ? KDART_ENOENT : errno == ENXIO ? KDART_ESOURCE : KDART_EIO;
    struct stat st;
    int rc = fstat(fd, &st) != 0 ? KDART_EIO : !S_ISREG(st.st_mode) ? KDART_ESOURCE : KDART_OK;
    if (rc == KDART_OK && (size_t)st.st_size > KDART__MAX_SOURCE) rc = KDART_EIO;
    if (rc != KDART_OK) {
        close(fd);
        return rc;
    }
    char *buf = kdart__malloc((size_t)st.st_size + 1);
    if (!buf) {
        close(fd);
        return KDART_ENOMEM;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            kdart__free(buf);
            close(fd);
            return KDART_EIO;
        }
        got += (size_t)n;
    }
    close(fd);
    buf[got] = 0;
    *text = buf;
    *size = got;
    return KDART_OK;
}

kdart__read_file_fn kdart__read_file = kdart__read_file_default;

static int name_ok(const char *name) {
    if (!name[0] || name[0] == '/') return 0;
    for (const char *p = name; *p; p++) {
        if (p[0] == '.' && p[1] == '.') return 0;
        if (*p == '\\') return 0;
    }
    return 1;
}

/* Refuses a file whose real path leaves the kernel directory (through a
 * symlink of its own or of a directory on the way).  A path that does not
 * resolve is left to the read, which says why it cannot be read. */
static int check_inside(kdart_rt *rt, const char *path, const char *name, const char *from) {
    char root[PATH_MAX], real[PATH_MAX];
    if (!realpath(rt->kernel_dir, root) || !realpath(path, real)) return KDART_OK;
    size_t n = strlen(root);
    if (strncmp(real, root, n) == 0 && (real[n] == '/' || (n == 1 && root[0] == '/'))) return KDART_OK;
    return kdart__err(rt, KDART_ESOURCE, "kernel source %s%s%s resolves to %s, outside the kernel directory %s",
                      name, from ? ", included from " : "", from ? from : "", real, root);
}

/* What a path that is not a regular file is, for the message (stat: it
 * neither opens nor blocks; ENXIO from open is a socket). */
static const char *file_kind(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return "gone or of no known kind";
    return S_ISFIFO(st.st_mode)  ? "a FIFO"
           : S_ISDIR(st.st_mode) ? "a directory"
           : S_ISCHR(st.st_mode) ? "a character device"
           : S_ISBLK(st.st_mode) ? "a block device"
           : S_ISSOCK(st.st_mode) ? "a socket"
                                  : "of another kind";
}

static int find_file(const kdart__sources *s, const char *name) {
    for (int i = 0; i < s->nfiles; i++)
        if (strcmp(s->files[i].name, name) == 0) return i;
    return -1;
}

static int add_file(kdart_rt *rt, kdart__sources *s, const char *name, const char *from) {
    if (find_file(s, name) >= 0) return KDART_OK;
    if (!name_ok(name))
        return kdart__err(rt, KDART_ESOURCE, "%s includes \"%s\": includes must be relative paths inside %s",
                          from ? from : "kernel", name, rt->kernel_dir);
    if (s->nfiles == KDART__MAX_FILES)
        return kdart__err(rt, KDART_ESOURCE, "more than %d files in the include closure of %s",
                          KDART__MAX_FILES, s->files[0].name);
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", rt->kernel_dir, name) >= sizeof path)
        return kdart__err(rt, KDART_ESOURCE, "kernel source path too long: %s/%s", rt->kernel_dir, name);
    int rc = check_inside(rt, path, name, from);
    if (rc) return rc;
    kdart__file *f = &s->files[s->nfiles];
    memset(f, 0, sizeof *f);
    rc = kdart__read_file(path, &f->text, &f->size);
    if (rc == KDART_ENOMEM) return kdart__err(rt, rc, "reading %s", path);
    if (rc == KDART_ESOURCE)
        return kdart__err(rt, KDART_ESOURCE, "kernel source %s%s%s is %s, not a regular file: refused unread", path,
                          from ? ", included from " : "", from ? from : "", file_kind(path));
    if (rc)
        return kdart__err(rt, KDART_ESOURCE, "cannot read kernel source %s%s%s (%s)", path,
                          from ? ", included from " : "", from ? from : "",
                          rc == KDART_ENOENT ? "no such file" : "read error");
    if (memchr(f->text, 0, f->size)) {
        kdart__free(f->text);
        f->text = NULL;
        return kdart__err(rt, KDART_ESOURCE, "kernel source %s contains NUL bytes", path);
    }
    f->name = kdart__strdup(name);
    if (!f->name) {
        kdart__free(f->text);
        f->text = NULL;
        return kdart__err(rt, KDART_ENOMEM, "reading %s", path);
    }
    kdart__sha256_hex(f->text, f->size, f->sha256);
    s->nfiles++;
    return KDART_OK;
}

/* Scans one file for quoted includes.  Only directives at the start of a
 * line count; a commented-out include is still followed, which at worst
 * adds a file to the key (a harmless extra miss), never drops one. */
static int scan_includes(kdart_rt *rt, kdart__sources *s, int idx) {
    for (const char *p = s->files[idx].text; p && *p;) {
        const char *line = p;
        const char *eol = strchr(p, '\n');
        p = eol ? eol + 1 : NULL;
        while (*line == ' ' || *line == '\t') line++;
        if (*line != '#') continue;
        line++;
        while (*line == ' ' || *line == '\t') line++;
        if (strncmp(line, "include", 7) != 0) continue;
        line += 7;
        while (*line == ' ' || *line == '\t') line++;
        if (*line != '"') continue;
        const char *q = strchr(line + 1, '"');
        if (!q || (eol && q > eol)) continue;
        char name[512];
        size_t n = (size_t)(q - line - 1);
        if (n >= sizeof name) continue;
        memcpy(name, line + 1, n);
        name[n] = 0;
        int rc = add_file(rt, s, name, s->files[idx].name);
        if (rc) return rc;
    }
    return KDART_OK;
}

int kdart__sources_load(kdart_rt *rt, const char *source, kdart__sources *out) {
    memset(out, 0, sizeof *out);
    out->files = kdart__calloc(KDART__MAX_FILES, sizeof *out->files);
    if (!out->files) return kdart__err(rt, KDART_ENOMEM, "loading kernel sources");
    int rc = add_file(rt, out, source, NULL);
    /* The list grows while we walk it: a breadth-first closure. */
    for (int i = 0; rc == KDART_OK && i < out->nfiles; i++) rc = scan_includes(rt, out, i);
    if (rc) kdart__sources_free(out);
    return rc;
}

void kdart__sources_free(kdart__sources *s) {
    if (!s->files) return;
    for (int i = 0; i < s->nfiles; i++) {
        kdart__free(s->files[i].name);
        kdart__free(s->files[i].text);
    }
    kdart__free(s->files);
    memset(s, 0, sizeof *s);
}
