/*
 * common/fileio.h - the file-system steps every writer of sluice needs:
 * write a whole buffer, make a rename durable, replace a file atomically
 * (in one call, or streamed through an sl_atomic_file), create a directory
 * and its parents, build a path. Served to records/ (shards, index files,
 * the manifest, the LMDB store), pipeline/ (the Chrome trace) and train/
 * (safetensors, checkpoints, summaries, the trainer's directories); none of
 * them writes these steps again.
 *
 * Durability (POSIX, and Linux fsync(2)): a renamed file survives a crash
 * only once both the file and the directory holding the new name are
 * fsync'ed. Some file systems answer fsync on a directory with EINVAL (there
 * is nothing to sync); that is not an error.
 *
 * Errors: every action returns an sl_status. fn names the public function
 * the caller is in, for messages, which read "fn: file: what: strerror"
 * (STYLE.md). Allocation failure is SL_ENOMEM; an operating-system failure
 * is SL_EIO.
 *
 * Threading: all functions are reentrant; an sl_atomic_file belongs to one
 * thread at a time.
 */
#ifndef SL_FILEIO_H
#define SL_FILEIO_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Write all n bytes of p to fd, retrying short writes and EINTR. SL_EIO
 * "fn: path: write: ..." on failure (path only names the file). n = 0 is
 * SL_OK without a write. */
int sl_write_all(int fd, const void *p, size_t n, const char *fn, const char *path);

/* fsync the directory dir, so renames and creations in it are durable.
 * EINVAL from fsync (a file system that cannot sync directories) is not an
 * error. SL_EIO "fn: dir: open directory: ..." / "fsync directory: ...". */
int sl_fsync_dir(const char *dir, const char *fn);

/* sl_fsync_dir on the directory holding path ("." when path has no slash,
 * "/" for "/name"). */
int sl_fsync_parent(const char *path, const char *fn);

/* mkdir -p: create path and its missing parents (0755); existing ones are
 * fine. SL_EIO "fn: dir: mkdir: ..." or "fn: path: not a directory";
 * SL_EINVAL for "". */
int sl_mkdir_p(const char *path, const char *fn);

/* ------------------------------------------------ atomic replacement */
/* A file written under "path.tmp" and renamed over path by commit: readers
 * see the old file or the whole new one, never a mix, and a crash leaves at
 * most a stale "path.tmp" (which the next open truncates).
 *
 *     sl_atomic_file af;
 *     if ((rc = sl_atomic_open(&af, path, fn)))
 *         return rc;
 *     rc = sl_atomic_write(&af, header, hlen);
 *     if (!rc)
 *         rc = sl_atomic_write(&af, body, blen);
 *     return rc ? (sl_atomic_abort(&af), rc) : sl_atomic_commit(&af, 1);
 *
 * fd may also be written directly (or through fdopen(dup(fd))), as long as
 * everything is flushed to it before commit. Every open ends in exactly one
 * commit or abort, which free what open made. */
typedef struct sl_atomic_file {
    int fd;           /* the open temp file; -1 after commit / abort */
    char *tmp;        /* malloc'd "path.tmp" */
    const char *path; /* the caller's final name; borrowed until commit / abort */
    const char *fn;   /* borrowed, for messages */
} sl_atomic_file;

/* Create (or truncate) "path.tmp" for writing (0644). On error af->fd is -1,
 * nothing is left to free and no abort is needed. SL_EIO "fn: path.tmp:
 * create: ...". */
int sl_atomic_open(sl_atomic_file *af, const char *path, const char *fn);
/* sl_write_all to the temp file (its name in the message). */
int sl_atomic_write(sl_atomic_file *af, const void *p, size_t n);
/* fsync the temp file if do_sync, close it, rename it over path, and fsync
 * the parent directory if do_sync. On failure before the rename the temp
 * file is removed and path is untouched; a failing directory fsync leaves
 * the new file in place and returns SL_EIO. Frees af's allocations either
 * way. */
int sl_atomic_commit(sl_atomic_file *af, int do_sync);
/* Close and remove the temp file; path is untouched. Safe after a failed
 * open (a no-op then). */
void sl_atomic_abort(sl_atomic_file *af);

/* Replace path with data[0..len) atomically: open, one write, commit. */
int sl_write_file_atomic(const char *path, const void *data, size_t len, int do_sync,
                         const char *fn);

/* ------------------------------------------------------------- paths */
/* malloc'd a + b; NULL when out of memory. */
char *sl_str_cat(const char *a, const char *b);
/* malloc'd "a/b" (no slash added when a is empty or already ends in one);
 * NULL when out of memory. */
char *sl_path_join(const char *a, const char *b);

#ifdef __cplusplus
}
#endif
#endif /* SL_FILEIO_H */
