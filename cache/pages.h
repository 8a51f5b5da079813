/*
 * pages.h: the records of an SQLite database file, read page by page
 * without SQLite, for salvage.
 *
 * SQLite reaches a table's rows only down its b-tree, so one damaged
 * interior page (or page 1, where the schema lives) hides every row
 * below it although the leaf pages that hold the rows are intact.  This
 * reader walks every page of the file instead and decodes the cells of
 * each table b-tree leaf page (type 0x0d, SQLite's documented file
 * format), following overflow chains, so that salvage loses at most the
 * rows of the pages that are themselves damaged.  The committed frames
 * of the database's WAL are laid over the file as SQLite would read them
 * (the newest committed version of each page wins), and pages on the
 * free list are skipped when the list can be read, so rows deleted long
 * ago do not come back.
 *
 * It knows nothing of kdart's schema: callers recognise their rows by
 * their shape and check them (kdart's rows carry a SHA-256 of their
 * blob), since a leaf page of another table, or a damaged one, yields
 * records too.
 */
#ifndef KDART_CACHE_PAGES_H
#define KDART_CACHE_PAGES_H

#include <stddef.h>
#include <stdint.h>

/* One column of a record.  type is SQLite's fundamental type code
 * (SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_BLOB, SQLITE_NULL);
 * text and blobs point into the reader's buffer (valid during the
 * callback, not NUL-terminated). */
typedef struct kdart__field {
    int type;
    int64_t i;
    double d;
    const unsigned char *p;
    size_t n;
} kdart__field;

/* Called for each record that decodes whole, of table leaf pages with
 * its rowid, of index leaf pages with rowid -1 (an index record ends with
 * the rowid of its table row); nonzero stops the walk. */
typedef int (*kdart__record_fn)(void *user, int64_t rowid, const kdart__field *fields, int nfields);

/* Walks the database file at path, with the WAL file at wal laid over it
 * (NULL, absent, empty or not matching: none), calling fn for every
 * record of every leaf page.  *leaves (may be NULL) counts the leaf
 * pages read.  Returns 0 (also when fn stopped it), or -1 with errno set
 * when the file cannot be read at all. */
int kdart__pages_each_record(const char *path, const char *wal, kdart__record_fn fn, void *user, int64_t *leaves);

#endif /* KDART_CACHE_PAGES_H */
