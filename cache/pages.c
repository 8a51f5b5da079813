/*
 * pages.c: the records of an SQLite database file, page by page (see
 * pages.h).  Everything here follows SQLite's documented file format
 * (https://www.sqlite.org/fileformat2.html): the 100-byte header, b-tree
 * pages and cells, varints, records and serial types, overflow chains,
 * the free list, and the WAL's header, frames and checksums.  Every
 * offset and length read from the file is checked before use, since the
 * file is damaged by assumption.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "base.h"
#include "pages.h"

#define MAX_FIELDS 64
#define MAX_PAYLOAD ((int64_t)1 << 31) /* SQLite's own limit on a row is 1e9 bytes */

typedef struct source {
    int fd, wal_fd;
    uint32_t psize, usable;
    int64_t npages;       /* pages of the database as committed */
    int64_t file_pages;   /* pages the main file holds */
    int64_t *wal_at;      /* [pgno]: offset of the page's newest committed frame data, 0: none */
    int64_t wal_n;        /* entries of wal_at */
    unsigned char *free;  /* [pgno]: on the free list */
} source;

static uint32_t be16(const unsigned char *p) { return (uint32_t)p[0] << 8 | p[1]; }
static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

static int valid_page_size(uint32_t n) { return n >= 512 && n <= 65536 && (n & (n - 1)) == 0; }

static int read_all(int fd, void *buf, size_t n, int64_t at) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)at + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

static int read_page(const source *s, int64_t pgno, unsigned char *out) {
    if (pgno < 1 || pgno > s->npages) return -1;
    if (pgno < s->wal_n && s->wal_at[pgno]) return read_all(s->wal_fd, out, s->psize, s->wal_at[pgno]);
    if (pgno > s->file_pages) return -1;
    return read_all(s->fd, out, s->psize, (pgno - 1) * (int64_t)s->psize);
}

/* ------------------------------------------------------------------ WAL */

/* SQLite's WAL checksum over n bytes (a multiple of 8), continuing s. */
static void wal_sum(int big, const unsigned char *p, size_t n, uint32_t s[2]) {
    for (size_t i = 0; i + 8 <= n; i += 8) {
        s[0] += (big ? be32(p + i) : le32(p + i)) + s[1];
        s[1] += (big ? be32(p + i + 4) : le32(p + i + 4)) + s[0];
    }
}

/* Lays the WAL's committed frames over the file: the frames whose salts
 * match the header and whose checksums chain, up to the last commit
 * frame, as SQLite's recovery reads them.  Sets psize when the file's
 * own header could not give it.  A WAL that does not fit leaves nothing. */
static void wal_load(source *s, const char *wal, int header_ok) {
    unsigned char h[32], fh[24];
    struct stat sb;
    int fd = wal ? open(wal, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0) return;
    if (fstat(fd, &sb) != 0 || sb.st_size < 32 || read_all(fd, h, sizeof h, 0) != 0) goto none;
    uint32_t magic = be32(h), psize = be32(h + 8);
    if ((magic != 0x377f0682 && magic != 0x377f0683) || !valid_page_size(psize)) goto none;
    if (header_ok && psize != s->psize) goto none; /* another database's WAL */
    int big = magic & 1;
    uint32_t sum[2] = {0, 0};
    wal_sum(big, h, 24, sum);
    if (sum[0] != be32(h + 24) || sum[1] != be32(h + 28)) goto none;
    unsigned char *page = kdart__malloc(psize);
    int64_t *pend = NULL, npend = 0, capend = 0, commit_pages = 0;
    if (!page) goto none;
    for (int64_t at = 32; at + 24 + psize <= sb.st_size; at += 24 + psize) {
        if (read_all(fd, fh, sizeof fh, at) != 0 || read_all(fd, page, psize, at + 24) != 0) break;
        if (memcmp(fh + 8, h + 16, 8) != 0) break; /* a frame of an earlier WAL generation */
        wal_sum(big, fh, 8, sum);
        wal_sum(big, page, psize, sum);
        if (sum[0] != be32(fh + 16) || sum[1] != be32(fh + 20)) break;
        uint32_t pgno = be32(fh), size_after = be32(fh + 4);
        if (pgno == 0) break;
        if (npend == capend) {
            int64_t cap = capend ? 2 * capend : 256;
            int64_t *v = kdart__realloc(pend, (size_t)cap * 2 * sizeof *v);
            if (!v) break;
            pend = v;
            capend = cap;
        }
        pend[2 * npend] = pgno;
        pend[2 * npend + 1] = at + 24;
        npend++;
        if (size_after == 0) continue;
        /* A commit: the frames so far are the database now. */
        for (int64_t i = 0; i < npend; i++) {
            int64_t p = pend[2 * i];
            if (p >= s->wal_n) {
                int64_t n = p + 1 > 2 * s->wal_n ? p + 1 : 2 * s->wal_n;
                int64_t *v = kdart__realloc(s->wal_at, (size_t)n * sizeof *v);
                if (!v) continue;
                memset(v + s->wal_n, 0, (size_t)(n - s->wal_n) * sizeof *v);
                s->wal_at = v;
                s->wal_n = n;
            }
            s->wal_at[p] = pend[2 * i + 1];
        }
        npend = 0;
        commit_pages = size_after;
    }
    kdart__free(pend);
    kdart__free(page);
    if (!commit_pages) goto none;
    s->psize = psize;
    s->npages = commit_pages;
    s->wal_fd = fd;
    return;
none:
    kdart__free(s->wal_at);
    s->wal_at = NULL;
    s->wal_n = 0;
    close(fd);
}

/* ------------------------------------------------------------ free list */

/* Marks the pages on the free list (trunk and leaf pages), as far as the
 * list can be followed: their old contents are deleted rows. */
static void free_list_load(source *s, unsigned char *buf) {
    if (read_page(s, 1, buf) != 0 || memcmp(buf, "SQLite format 3", 16) != 0) return;
    s->free = kdart__calloc((size_t)s->npages + 1, 1);
    if (!s->free) return;
    int64_t trunk = be32(buf + 32);
    for (int64_t hops = 0; trunk > 1 && trunk <= s->npages && hops < s->npages && !s->free[trunk]; hops++) {
        s->free[trunk] = 1;
        if (read_page(s, trunk, buf) != 0) return;
        uint32_t n = be32(buf + 4);
        if (n > (s->usable - 8) / 4) return;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t leaf = be32(buf + 8 + 4 * i);
            if (leaf > 1 && leaf <= s->npages) s->free[leaf] = 1;
        }
        trunk = be32(buf);
    }
}

/* -------------------------------------------------------------- records */

/* SQLite's varint at p (at most 9 bytes, none past end): its length, or
 * 0 when it runs past end. */
static int varint(const unsigned char *p, const unsigned char *end, uint64_t *v) {
    uint64_t x = 0;
    for (int i = 0; i < 9; i++) {
        if (p + i >= end) return 0;
        if (i == 8) {
            *v = x << 8 | p[i];
            return 9;
        }
        x = x << 7 | (p[i] & 0x7f);
        if (!(p[i] & 0x80)) {
            *v = x;
            return i + 1;
        }
    }
    return 0;
}

/* Decodes a record into f: the number of fields, or -1 when it does not
 * decode exactly (header and body must use the payload to its end). */
static int record(const unsigned char *p, size_t n, kdart__field *f) {
    const unsigned char *end = p + n;
    uint64_t hsize;
    int k = varint(p, end, &hsize);
    if (!k || hsize < (uint64_t)k || hsize > n) return -1;
    const unsigned char *h = p + k, *hend = p + hsize, *body = hend;
    int nf = 0;
    while (h < hend) {
        uint64_t t;
        int m = varint(h, hend, &t);
        if (!m || nf == MAX_FIELDS) return -1;
        h += m;
        static const int int_len[] = {0, 1, 2, 3, 4, 6, 8};
        kdart__field *x = &f[nf++];
        memset(x, 0, sizeof *x);
        uint64_t len;
        if (t == 0) {
            x->type = SQLITE_NULL;
            continue;
        } else if (t <= 6) {
            len = (uint64_t)int_len[t];
            if (len > (uint64_t)(end - body)) return -1;
            int64_t v = (int8_t)body[0]; /* sign from the first byte */
            for (uint64_t i = 1; i < len; i++) v = (int64_t)((uint64_t)v << 8 | body[i]);
            x->type = SQLITE_INTEGER;
            x->i = v;
        } else if (t == 7) {
            len = 8;
            if (len > (uint64_t)(end - body)) return -1;
            uint64_t bits = 0;
            for (int i = 0; i < 8; i++) bits = bits << 8 | body[i];
            memcpy(&x->d, &bits, sizeof x->d);
            x->type = SQLITE_FLOAT;
        } else if (t == 8 || t == 9) {
            x->type = SQLITE_INTEGER;
            x->i = (int64_t)(t - 8);
            continue;
        } else if (t < 12) {
            return -1; /* reserved serial types */
        } else {
            len = (t - 12) / 2;
            if (len > (uint64_t)(end - body)) return -1;
            x->type = t & 1 ? SQLITE_TEXT : SQLITE_BLOB;
            x->p = body;
            x->n = (size_t)len;
        }
        body += len;
    }
    return body == end ? nf : -1;
}

/* The records of one leaf page (table: 0x0d, index: 0x0a, whose records
 * are passed with rowid -1); 1 when fn asked to stop. */
static int leaf_records(const source *s, int64_t pgno, const unsigned char *pg, unsigned char *ovfl,
                        kdart__record_fn fn, void *user) {
    uint32_t hdr = pgno == 1 ? 100 : 0, U = s->usable;
    uint32_t ncells = be16(pg + hdr + 3), first = hdr + 8;
    int table = pg[hdr] == 0x0d;
    if (first + 2 * ncells > U) return 0;
    /* Payload that stays on the page, from the file format's formulas. */
    const uint32_t X = table ? U - 35 : ((U - 12) * 64 / 255) - 23, M = ((U - 12) * 32 / 255) - 23;
    kdart__field fields[MAX_FIELDS];
    for (uint32_t c = 0; c < ncells; c++) {
        uint32_t off = be16(pg + first + 2 * c);
        if (off < first + 2 * ncells || off >= U) continue;
        const unsigned char *p = pg + off, *end = pg + U;
        uint64_t size, rowid = (uint64_t)-1;
        int k1 = varint(p, end, &size), k2 = !k1 ? 0 : table ? varint(p + k1, end, &rowid) : 0;
        if (!k1 || (table && !k2) || size == 0 || size > (uint64_t)MAX_PAYLOAD || size > (uint64_t)s->npages * U)
            continue;
        p += k1 + k2;
        uint64_t local = size;
        if (size > X) {
            uint64_t K = M + (size - M) % (U - 4);
            local = K <= X ? K : M;
        }
        if (local + (local < size ? 4 : 0) > (uint64_t)(end - p)) continue;
        unsigned char *payload = kdart__malloc((size_t)size);
        if (!payload) continue;
        memcpy(payload, p, (size_t)local);
        uint64_t have = local;
        int64_t next = local < size ? be32(p + local) : 0;
        for (int64_t hops = 0; have < size && hops <= s->npages; hops++) {
            if (next < 2 || read_page(s, next, ovfl) != 0) break;
            uint64_t n = size - have < U - 4 ? size - have : U - 4;
            memcpy(payload + have, ovfl + 4, (size_t)n);
            have += n;
            next = be32(ovfl);
        }
        int nf = have == size ? record(payload, (size_t)size, fields) : -1;
        int stop = nf > 0 && fn(user, (int64_t)rowid, fields, nf);
        kdart__free(payload);
        if (stop) return 1;
    }
    return 0;
}

int kdart__pages_each_record(const char *path, const char *wal, kdart__record_fn fn, void *user, int64_t *leaves) {
    source s = {.fd = -1, .wal_fd = -1};
    unsigned char h[100];
    struct stat sb;
    if (leaves) *leaves = 0;
    s.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s.fd < 0) return -1;
    if (fstat(s.fd, &sb) != 0) {
        int e = errno;
        close(s.fd);
        errno = e;
        return -1;
    }
    /* The header's page size when it is sane; else the WAL's; else
     * SQLite's default, which is what kdart creates. */
    int header_ok = read_all(s.fd, h, sizeof h, 0) == 0 && memcmp(h, "SQLite format 3", 16) == 0;
    uint32_t reserved = 0;
    if (header_ok) {
        s.psize = be16(h + 16) == 1 ? 65536 : be16(h + 16);
        reserved = h[20];
        header_ok = valid_page_size(s.psize) && reserved < s.psize / 2;
    }
    if (!header_ok) {
        s.psize = 4096;
        reserved = 0;
    }
    s.file_pages = sb.st_size / s.psize;
    s.npages = s.file_pages;
    wal_load(&s, wal, header_ok);
    s.file_pages = sb.st_size / s.psize;
    if (!s.wal_at) {
        s.npages = s.file_pages;
        /* Pages past the header's count (when that count is valid) are
         * not part of the database. */
        uint32_t counted = header_ok && be32(h + 24) == be32(h + 92) ? be32(h + 28) : 0;
        if (counted && counted < s.npages) s.npages = counted;
    }
    s.usable = s.psize - reserved;
    unsigned char *pg = kdart__malloc(s.psize), *ovfl = kdart__malloc(s.psize);
    if (!pg || !ovfl) {
        kdart__free(pg);
        kdart__free(ovfl);
        close(s.fd);
        if (s.wal_fd >= 0) close(s.wal_fd);
        kdart__free(s.wal_at);
        errno = ENOMEM;
        return -1;
    }
    free_list_load(&s, pg);
    for (int64_t pgno = 1; pgno <= s.npages; pgno++) {
        if (s.free && s.free[pgno]) continue;
        if (read_page(&s, pgno, pg) != 0) continue;
        unsigned char type = pg[pgno == 1 ? 100 : 0];
        if (type != 0x0d && type != 0x0a) continue;
        if (leaves) ++*leaves;
        if (leaf_records(&s, pgno, pg, ovfl, fn, user)) break;
    }
    kdart__free(pg);
    kdart__free(ovfl);
    kdart__free(s.free);
    kdart__free(s.wal_at);
    close(s.fd);
    if (s.wal_fd >= 0) close(s.wal_fd);
    return 0;
}
