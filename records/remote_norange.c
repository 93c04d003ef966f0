/*
 * records/remote_norange.c - objects on servers that ignore Range: a 200
 * with the whole object in answer to a ranged GET (Python's http.server,
 * nginx with max_ranges 0, some CDNs and proxies).
 *
 * DESIGN
 *   Why: a reader asks for a shard block by block. Taking each block out of
 *   a whole-object 200 and dropping the connection after it (what the
 *   transfer did alone) costs the object's bytes up to the block for every
 *   block: a 31 MB shard read in 64 KiB blocks moved 739 MB. Here the first
 *   200 to a ranged GET of an object is kept whole in a temporary file
 *   (mkstemp in $TMPDIR, else /tmp, unlinked at once: nothing is left
 *   behind, whatever ends the process), and every later range of that
 *   object is a pread of it: the object crosses the network once.
 *   States: an entry is FETCHING while one transfer writes it (other
 *   requests for the object wait for it rather than fetch it again: 2 from
 *   sl_norange_read), HELD once complete, and gone when that transfer fails
 *   (the next request fetches again, and so retries).
 *   Bounds: at most NR_MAX_HELD objects are held; a new one evicts the
 *   least recently read that no pread is using. So a reader cycling over a
 *   few shards at a time fetches each once; a global shuffle over more
 *   shards than that fetches some again (correct, only slower: that server
 *   leaves no better choice).
 *   Hot path: servers that honour Range never create an entry, and
 *   sl_norange_read then costs one relaxed atomic load.
 *
 * Threading: one mutex over the table; the preads run outside it (an
 * entry in use is not evicted); an entry's file is written by its fetching
 * transfer only.
 */
#include "records/remote_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NR_MAX_HELD 16

enum { NR_FETCHING = 1, NR_HELD };

struct sl_norange {
    struct sl_norange *next;
    char *url;          /* the request URL: the key */
    int fd;             /* the unlinked temporary file */
    int state;
    uint64_t size;      /* HELD: the object's size */
    unsigned users;     /* preads in progress */
    uint64_t last_use;  /* for eviction */
};

static pthread_mutex_t nr_mu = PTHREAD_MUTEX_INITIALIZER;
static sl_norange *nr_head;
static int nr_count; /* entries in the table; read unlocked as a hint */
static uint64_t nr_clock;

static sl_norange *find_locked(const char *url)
{
    for (sl_norange *e = nr_head; e; e = e->next)
        if (!strcmp(e->url, url))
            return e;
    return NULL;
}

static void unlink_locked(sl_norange *e)
{
    for (sl_norange **pp = &nr_head; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    __atomic_store_n(&nr_count, nr_count - 1, __ATOMIC_RELAXED);
}

static void entry_free(sl_norange *e)
{
    if (e->fd >= 0)
        close(e->fd);
    free(e->url);
    free(e);
}

/* Make room for one more held object (mu held). */
static void evict_locked(void)
{
    int held = 0;
    sl_norange *old = NULL;
    for (sl_norange *e = nr_head; e; e = e->next)
        if (e->state == NR_HELD) {
            held++;
            if (!e->users && (!old || e->last_use < old->last_use))
                old = e;
        }
    if (held >= NR_MAX_HELD && old) {
        unlink_locked(old);
        entry_free(old);
    }
}

int sl_norange_read(const char *url, const char *name, void *dst, size_t n, uint64_t off,
                    int *rc)
{
    if (!__atomic_load_n(&nr_count, __ATOMIC_RELAXED))
        return 0;
    pthread_mutex_lock(&nr_mu);
    sl_norange *e = find_locked(url);
    if (!e || e->state != NR_HELD) {
        pthread_mutex_unlock(&nr_mu);
        return e ? 2 : 0;
    }
    e->users++;
    e->last_use = ++nr_clock;
    uint64_t size = e->size;
    int fd = e->fd;
    pthread_mutex_unlock(&nr_mu);

    if (off > size || n > size - off) {
        *rc = sl_fail(SL_ECORRUPT, "%s: bytes %llu-%llu: the object ends before byte %llu "
                      "(size %llu)", name, (unsigned long long)off,
                      (unsigned long long)(off + n - 1), (unsigned long long)(off + n - 1),
                      (unsigned long long)size);
    } else {
        size_t got = 0;
        *rc = SL_OK;
        while (got < n) {
            ssize_t r = pread(fd, (char *)dst + got, n - got, (off_t)(off + got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                *rc = sl_fail(SL_EIO, "%s: bytes %llu-%llu: reading the local copy of an object "
                              "whose server ignores Range: %s", name, (unsigned long long)off,
                              (unsigned long long)(off + n - 1),
                              r < 0 ? strerror(errno) : "short file");
                break;
            }
            got += (size_t)r;
        }
    }
    pthread_mutex_lock(&nr_mu);
    e->users--;
    pthread_mutex_unlock(&nr_mu);
    return 1;
}

/* An unlinked temporary file, or -1. */
static int temp_file(void)
{
    const char *dir = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/sluice-norange-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    unlink(path);
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
}

sl_norange *sl_norange_begin(const char *url)
{
    sl_norange *e = NULL;
    pthread_mutex_lock(&nr_mu);
    if (find_locked(url))
        goto out; /* fetching or held already: this transfer takes its slice only */
    if (!(e = calloc(1, sizeof *e)) || !(e->url = strdup(url))) {
        free(e);
        e = NULL;
        goto out;
    }
    if ((e->fd = temp_file()) < 0) {
        free(e->url);
        free(e);
        e = NULL;
        goto out;
    }
    e->state = NR_FETCHING;
    e->next = nr_head;
    nr_head = e;
    __atomic_store_n(&nr_count, nr_count + 1, __ATOMIC_RELAXED);
out:
    pthread_mutex_unlock(&nr_mu);
    return e;
}

int sl_norange_put(sl_norange *e, const void *p, size_t len, uint64_t pos)
{
    size_t done = 0;
    while (done < len) { /* the fetching transfer's file: no lock */
        ssize_t w = pwrite(e->fd, (const char *)p + done, len - done, (off_t)(pos + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        done += (size_t)w;
    }
    return 0;
}

void sl_norange_done(sl_norange *e, int ok, uint64_t size)
{
    if (!e)
        return;
    pthread_mutex_lock(&nr_mu);
    if (ok) {
        evict_locked();
        e->state = NR_HELD;
        e->size = size;
        e->last_use = ++nr_clock;
    } else {
        unlink_locked(e); /* the next request fetches it again */
        entry_free(e);
    }
    pthread_mutex_unlock(&nr_mu);
}

void sl_norange_drop_all(void)
{
    pthread_mutex_lock(&nr_mu);
    for (sl_norange **pp = &nr_head; *pp;) {
        sl_norange *e = *pp;
        if (e->state == NR_HELD && !e->users) {
            *pp = e->next;
            __atomic_store_n(&nr_count, nr_count - 1, __ATOMIC_RELAXED);
            entry_free(e);
        } else {
            pp = &e->next;
        }
    }
    pthread_mutex_unlock(&nr_mu);
}
