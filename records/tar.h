/*
 * records/tar.h - tar archives as the WebDataset store reads and writes
 * them (records/tar.c): a member-by-member parser over bytes read through
 * a callback or held in memory, and the ustar header of a regular file.
 * Below the store (records/wds.h, wds.c, wds_writer.c), which knows
 * samples, keys and indexes; tar.c knows none of them.
 *
 * Threading: every function is reentrant; an sl_tar_iter belongs to one
 * thread at a time.
 */
#ifndef SL_RECORDS_TAR_H
#define SL_RECORDS_TAR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SL_TAR_BLOCK 512u
#define SL_TAR_NAME_MAX 4096u            /* longest member name kept, NUL included */
#define SL_TAR_MEMBER_MAX ((uint64_t)1 << 40) /* a member larger than 1 TiB is "absurd" */

/* Round n up to the next multiple of SL_TAR_BLOCK. */
static inline uint64_t sl_tar_pad(uint64_t n) { return (n + 511u) & ~(uint64_t)511u; }

/* Reads n bytes at off into buf: all or an error (sl_fail set). */
typedef int (*sl_tar_read_fn)(void *arg, void *buf, size_t n, uint64_t off);

/* One regular-file member (types '0', '\0', '7'; other types are skipped). */
typedef struct sl_tar_member {
    char name[SL_TAR_NAME_MAX]; /* pax path=, GNU 'L', ustar prefix/name, in that order */
    uint64_t header_off;        /* its first header (a GNU 'L' or pax 'x' one included) */
    uint64_t data_off;          /* its data, a multiple of 512 */
    uint64_t size;              /* data bytes (the padding to 512 follows) */
} sl_tar_member;

/* A member-by-member parser over size bytes read through read(arg, ...).
 * span = 0: a whole archive, ending at two zero blocks (the end of the
 * bytes before them is SL_ECORRUPT, "truncated"); span = 1: a run of
 * members that ends exactly at size (a sample's span). what names the
 * bytes in messages (the shard path). Every header's checksum is checked
 * (unsigned or signed sum, as GNU tar accepts). */
typedef struct sl_tar_iter {
    sl_tar_read_fn read;
    void *arg;
    uint64_t size, pos;
    const char *what;
    const uint8_t *mem;  /* sl_tar_iter_mem: the bytes (read is then unused) */
    int span, done;
} sl_tar_iter;

void sl_tar_iter_init(sl_tar_iter *it, sl_tar_read_fn read, void *arg, uint64_t size, int span,
                      const char *what);
/* The next regular member into *m: SL_OK, SL_EOF after the last,
 * SL_ECORRUPT "WHAT: member NAME @ OFF: what" for any malformed header,
 * checksum, number, size past the end or truncation; SL_ENOTSUP for an
 * archive that starts with a gzip, zstd, bzip2 or xz stream (a .tar.gz
 * named .tar: refused by name); read's errors as they are. */
int sl_tar_next(sl_tar_iter *it, sl_tar_member *m);
/* sl_tar_iter_init over memory (buf must outlive the iterator). */
void sl_tar_iter_mem(sl_tar_iter *it, const uint8_t *buf, size_t len, int span, const char *what);

/* A ustar header for a regular file: name (at most 100 bytes, SL_EINVAL
 * otherwise), size, mode 0644, uid/gid 0, mtime 0, empty uname/gname, so
 * equal inputs give equal bytes. */
int sl_tar_header(uint8_t hdr[SL_TAR_BLOCK], const char *name, uint64_t size);

#ifdef __cplusplus
}
#endif
#endif /* SL_RECORDS_TAR_H */
