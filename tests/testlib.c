/*
 * testlib.c: implementation of the shared test helpers (see testlib.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "testlib.h"

char *test_tmpdir(char *buf, size_t n) {
    const char *base = getenv("TMPDIR");
    snprintf(buf, n, "%s/kdart-test-XXXXXX", base && base[0] ? base : "/tmp");
    if (!mkdtemp(buf)) {
        perror("mkdtemp");
        abort();
    }
    return buf;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    chmod(path, 0700);
    return remove(path);
}

void test_rmtree(const char *path) {
    if (path && path[0]) nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb");
    if (!in) return -1;
    FILE *out = fopen(to, "wb");
    if (!out) {
        fclose(in);
        return -1;
    }
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
    fclose(in);
    return fclose(out);
}

static const char *copy_dst;
static const char *copy_src;

static int copy_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)ftw;
    char dst[4096];
    snprintf(dst, sizeof dst, "%s%s", copy_dst, path + strlen(copy_src));
    if (flag == FTW_D) return mkdir(dst, 0755) == 0 || errno == EEXIST ? 0 : -1;
    if (S_ISREG(st->st_mode)) return copy_file(path, dst);
    return 0;
}

char *test_copy_kernels(const char *dir, char *buf, size_t n) {
    snprintf(buf, n, "%s/kernel_src", dir);
    copy_src = TEST_KERNEL_DIR;
    copy_dst = buf;
    if (nftw(TEST_KERNEL_DIR, copy_one, 16, FTW_PHYS) != 0) {
        perror("copying kernel_src");
        abort();
    }
    return buf;
}

void test_log_fn(void *user, int level, const char *msg) {
    test_log *log = user;
    if (level < 0 || level > 3) return;
    log->count[level]++;
    snprintf(log->last[level], sizeof log->last[level], "%s", msg);
}

kdart_rt *test_open(const char *cache_path, const char *kernel_dir, test_log *log) {
    return test_open_flags(cache_path, kernel_dir, log, KDART_OPEN_NO_ENV);
}

kdart_rt *test_open_flags(const char *cache_path, const char *kernel_dir, test_log *log, uint32_t flags) {
    kdart_options o;
    kdart_options_init(&o);
    o.cache_path = cache_path ? cache_path : "";
    o.kernel_dir = kernel_dir ? kernel_dir : TEST_KERNEL_DIR;
    o.flags = flags;
    if (log) {
        memset(log, 0, sizeof *log);
        o.log = test_log_fn;
        o.log_user = log;
        o.log_level = KDART_LOG_DEBUG;
    }
    kdart_rt *rt = NULL;
    int rc = kdart_open(&rt, &o);
    if (rc) {
        fprintf(stderr, "kdart_open: %s\n", kdart_strerror(rc));
        return NULL;
    }
    return rt;
}

int test_run(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

int test_write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

int test_append_file(const char *path, const char *text) {
    FILE *f = fopen(path, "ab");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

int test_deny_locks(void) {
#if defined(__x86_64__)
    enum { ARCH = AUDIT_ARCH_X86_64 };
#elif defined(__aarch64__)
    enum { ARCH = AUDIT_ARCH_AARCH64 };
#else
    enum { ARCH = 0 };
    return TEST_SKIP;
#endif
    /* fcntl(fd, cmd, ...) with cmd one of the record-lock commands (the
     * low word of the second argument) fails with ENOLCK; all else runs. */
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fcntl, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_GETLK, 6, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_SETLK, 5, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_SETLKW, 4, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_OFD_GETLK, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_OFD_SETLK, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_OFD_SETLKW, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOLCK & SECCOMP_RET_DATA)),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof code / sizeof code[0]), code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return TEST_SKIP;
    if (syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) return TEST_SKIP;
    struct flock probe = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = fcntl(fd, F_OFD_SETLK, &probe) == -1 && errno == ENOLCK ? 0 : TEST_SKIP;
    close(fd);
    return rc;
}
