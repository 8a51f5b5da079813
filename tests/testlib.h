/*
 * testlib.h: helpers shared by kdart's Check suites: temporary
 * directories, a runtime opened on an isolated cache, a log collector, the
 * suite runner, and the GPU skip convention.
 *
 * Every test gets its own mkdtemp directory, so suites never touch the
 * user's cache and can run in parallel under ctest.
 */
#ifndef KDART_TESTLIB_H
#define KDART_TESTLIB_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "kdart.h"

#define TEST_KERNEL_DIR KDART_TEST_SOURCE_DIR "/kernel_src"
#define TEST_SKIP 77 /* ctest's SKIP_RETURN_CODE */

/* A fresh directory under TMPDIR (or /tmp); the path is static storage
 * of the caller's choosing: pass a buffer of at least 256 bytes. */
char *test_tmpdir(char *buf, size_t n);
/* rm -rf of a test directory (best effort). */
void test_rmtree(const char *path);
/* Copies the repository's kernel_src into dir/kernel_src and returns that
 * path in buf. */
char *test_copy_kernels(const char *dir, char *buf, size_t n);

/* Collects log lines: count and the last message per level. */
typedef struct test_log {
    int count[4];
    char last[4][1024];
} test_log;
void test_log_fn(void *user, int level, const char *msg);

/* Opens a runtime on cache_path (NULL: dir/kdart.db style paths are the
 * caller's), kernel_dir (NULL: the repository's), logging into log, with
 * KDART_OPEN_NO_ENV (the suites' environment is not the test's). */
kdart_rt *test_open(const char *cache_path, const char *kernel_dir, test_log *log);
/* The same with the open flags given (0: read the environment). */
kdart_rt *test_open_flags(const char *cache_path, const char *kernel_dir, test_log *log, uint32_t flags);

/* Runs a suite in CK_NORMAL mode and returns the process exit code. */
int test_run(Suite *s);

/* Makes every fcntl() record lock of this process and its children fail
 * with ENOLCK, as on a file system without a lock manager (NFS without
 * lockd), through a seccomp filter that cannot be undone: call it in a
 * forked child.  Returns 0, or TEST_SKIP where seccomp is unavailable. */
int test_deny_locks(void);

/* Writes a file; returns 0 on success. */
int test_write_file(const char *path, const char *text);
/* Appends text to a file; returns 0 on success. */
int test_append_file(const char *path, const char *text);

#endif /* KDART_TESTLIB_H */
