/*
 * records/dataset.c - resolve a dataset PATH into splits and files
 * (records.h, "dataset paths"): a directory with or without dataset.json,
 * a glob, one shard, an LMDB store.
 *
 * Directories are listed through the byte source (sl_bytes_list) and
 * sorted (shard names are zero-padded, so the byte order is the shard
 * order); nothing is read but
 * dataset.json. Each TFRecord shard is stat'ed for its "<shard>.idx" (a
 * WebDataset tar also for DALI's "X.idx" beside "X.tar") so the commands
 * can say once that shards without one will be scanned. What a file is by
 * its name (a shard of which split, compressed, no shard at all) is
 * records/dataset_files.c's.
 * The path enters through sl_path_redact: ds and every name in it are
 * without the URL's password or signature (bytesrc.h).
 *
 * Threading: reentrant; ds belongs to the caller.
 */
#include "records_int.h"
#include "bytesrc.h"
#include "wds.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static const char fn_res[] = "sl_dataset_resolve";

/* Most shard names of a split taken from dataset.json's count alone (when
 * some are missing): the 5-digit NAME-NNNNN-of-NNNNN pattern's range. */
#define SL_DATASET_MAX_LISTED_SHARDS 99999u

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Directory part of p ("." when it has none). */
static char *dir_of(const char *p)
{
    const char *slash = strrchr(p, '/');
    if (!slash)
        return strdup(".");
    if (slash == p)
        return strdup("/");
    return strndup(p, (size_t)(slash - p));
}

static int oom(void) { return sl_fail(SL_ENOMEM, "%s: out of memory", fn_res); }

static int add_split(sl_dataset *ds, const char *name, sl_format fmt, sl_dataset_split **out)
{
    sl_dataset_split *s = realloc(ds->splits, (ds->nsplits + 1) * sizeof *s);
    if (!s)
        return oom();
    ds->splits = s;
    s = &ds->splits[ds->nsplits++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->format = fmt;
    *out = s;
    return SL_OK;
}

static int add_file(sl_dataset_split *s, const char *file)
{
    char **f = realloc(s->files, (s->nfiles + 1) * sizeof *f);
    if (!f)
        return oom();
    s->files = f;
    if (!(f[s->nfiles] = strdup(file)))
        return oom();
    s->nfiles++;
    return SL_OK;
}

static sl_dataset_split *find_split(sl_dataset *ds, const char *name, sl_format fmt)
{
    for (size_t i = 0; i < ds->nsplits; i++)
        if (ds->splits[i].format == fmt && !strcmp(ds->splits[i].name, name))
            return &ds->splits[i];
    return NULL;
}

/* Load dir/dataset.json into ds when it exists; absent is fine. */
static int load_manifest(sl_dataset *ds)
{
    char *mp = sl_path_join(ds->dir, SL_MANIFEST_FILE);
    if (!mp)
        return oom();
    int remote = ds->remote;
    if (!remote && !is_file(mp)) {
        free(mp);
        /* a TensorFlow Datasets folder: its classes, nothing else */
        int rc = sl_tfds_classes(ds->dir, &ds->manifest, &ds->classes_path);
        return rc ? sl_fail(rc, "%s: %s", fn_res, sl_errmsg()) : SL_OK;
    }
    int rc = sl_manifest_load(ds->dir, &ds->manifest);
    if (rc == SL_ENOENT && remote) { /* none beside a remote shard */
        sl_clear_error();
        free(mp);
        return SL_OK;
    }
    if (rc) {
        /* sl_manifest_load's message already names the file */
        rc = sl_fail(rc == SL_ENOENT ? SL_ECORRUPT : rc, "%s", sl_errmsg());
        free(mp);
        return rc;
    }
    ds->manifest_path = mp;
    ds->has_manifest = 1;
    if (!(ds->classes_path = strdup(mp)))
        return oom();
    return SL_OK;
}

/* ------------------------------------------------------------ PATH kinds */

/* Is name one of the first n splits of ds? */
static int is_listed(const sl_dataset *ds, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(ds->splits[i].name, name))
            return 1;
    return 0;
}

static int list_dir(sl_dataset *ds, const char *only, int extra);

/* A directory with dataset.json (loaded into ds): its splits, then shards
 * of splits it does not list. Remote (bytesrc.h): the shards it promises,
 * by name, nothing asked of the server; no LMDB stores (a local memory
 * map), no listing. */
static int open_manifest_dir(sl_dataset *ds, const char *only)
{
    int rc, remote = ds->remote;
    ds->kind = SL_DATASET_MANIFEST;
    ds->counts_listed = 1;
    for (size_t i = 0; i < ds->manifest.nsplits; i++) {
        const sl_manifest_split *ms = &ds->manifest.splits[i];
        sl_dataset_split *s = NULL;
        if (only && strcmp(ms->name, only))
            continue;
        if (remote && ms->format == SL_FORMAT_LMDB)
            continue;
        if ((rc = add_split(ds, ms->name, ms->format, &s)))
            return rc;
        s->listed = ms;
        if (remote) {
            rc = SL_ENOENT; /* as if missing: the names dataset.json promises */
        } else if (ms->format == SL_FORMAT_LMDB) {
            char p[4096];
            if ((rc = sl_lmdb_path(p, sizeof p, ds->dir, ms->name)) || (rc = add_file(s, p)))
                return rc;
        } else {
            rc = sl_dataset_shards(ds->dir, ms->name, &s->files, &s->nfiles);
        }
        if (rc) {
            if (rc != SL_ENOENT)
                return sl_fail(rc, "%s: %s: split %s: %s", fn_res, ds->dir, ms->name,
                               sl_errmsg());
            /* A listed shard is missing (or none are listed). Take the names
             * dataset.json promises, so that a walk reports each missing file
             * where it belongs (for verify a data problem, not a usage error)
             * and still reads the shards that are there; a reader fails on
             * the first missing one, by name. */
            sl_clear_error();
            /* The count comes from the file: a 200-byte dataset.json could
             * otherwise make us list four billion names (found by
             * tests/fuzz/fuzz_manifest.c). Beyond the 5-digit pattern's
             * range they are not taken; the names array is sized once. */
            if (ms->shards > SL_DATASET_MAX_LISTED_SHARDS)
                return sl_fail(SL_ECORRUPT, "%s: %s/%s: split %s lists %u shards (more than %u) "
                               "and some are missing", fn_res, ds->dir, SL_MANIFEST_FILE,
                               ms->name, ms->shards, SL_DATASET_MAX_LISTED_SHARDS);
            if (ms->shards && !(s->files = calloc(ms->shards, sizeof *s->files)))
                return oom();
            for (uint32_t k = 0; k < ms->shards; k++) {
                char p[4096];
                if ((rc = sl_shard_path_fmt(p, sizeof p, ds->dir, ms->name, k, ms->shards,
                                            ms->format)))
                    return rc;
                if (!(s->files[s->nfiles] = strdup(p)))
                    return oom();
                s->nfiles++;
            }
        }
    }
    return remote ? SL_OK : list_dir(ds, only, 1);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* name ends in an image file's extension (convert's inputs). */
static int image_name(const char *name)
{
    static const char *const ext[] = {".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".webp"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        size_t k = strlen(ext[i]);
        if (n > k && !strcasecmp(name + n - k, ext[i]))
            return 1;
    }
    return 0;
}

/* How many of the first entries of the local folder dir name image files
 * (hidden ones skipped); with sub, also the folders among them whose own
 * first entries do, into *folders. */
static int count_images(const char *dir, int sub, int *folders)
{
    DIR *d = opendir(dir);
    int seen = 0, images = 0;
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) && seen < 64) {
        if (e->d_name[0] == '.')
            continue;
        seen++;
        images += image_name(e->d_name);
        if (sub && !image_name(e->d_name)) {
            char *p = sl_path_join(dir, e->d_name);
            struct stat st;
            if (p && !stat(p, &st) && S_ISDIR(st.st_mode) && count_images(p, 0, NULL))
                ++*folders;
            free(p);
        }
    }
    closedir(d);
    return images;
}

/* A user's folder of images where shards were expected (an ImageFolder
 * tree, a camera's folder): the convert command that makes them, as the
 * tail of the error; "" for anything else or a remote dir. */
static void images_hint(const char *dir, char *buf, size_t cap)
{
    int folders = 0;
    if (sl_path_is_remote(dir))
        return;
    int images = count_images(dir, 1, &folders);
    if (folders)
        snprintf(buf, cap, "; it holds folders of images, as `sluice convert --from folder %s "
                 "--out DATA --name train` reads them (DIR/<class>/<image>): convert them into "
                 "shards first", dir);
    else if (images)
        snprintf(buf, cap, "; it holds images: `sluice convert --from folder DIR` takes them in "
                 "class folders (DIR/<class>/<image>), `--from list FILE` from a list of "
                 "\"path<TAB>label\" lines");
}

/* The directory's shards by name, then its NAME.lmdb stores, as splits of
 * ds. extra: ds already holds dataset.json's splits; add only the named
 * groups it does not list (a split converted by another tool beside them),
 * not loose "*" files. */
static int list_dir(sl_dataset *ds, const char *only, int extra)
{
    char **names = NULL, **all = NULL;
    size_t n = 0, nall = 0, listed = ds->nsplits;
    int rc;
    /* sorted bytewise; a folder's name ends in '/' (NAME.lmdb/) */
    if ((rc = sl_bytes_list(ds->dir, &all, &nall)))
        return sl_fail(rc, "%s: %s", fn_res, sl_errmsg());
    if (nall && !(names = calloc(nall, sizeof *names))) {
        rc = oom();
        goto out;
    }
    for (size_t i = 0; i < nall; i++) {
        char *b = all[i];
        size_t l = strlen(b);
        if (l && b[l - 1] == '/')
            b[l - 1] = 0; /* stat below tells a store's folder */
        if (b[0] == '.' || !(sl_dataset_shard_like(b) || sl_name_has_suffix(b, ".lmdb")))
            continue;
        if (sl_dataset_compressed_as(b) && extra)
            continue; /* beside dataset.json's shards: not part of the data */
        if (!(names[n] = sl_path_join(ds->dir, b))) {
            rc = oom();
            goto out;
        }
        n++;
    }
    if (n) /* as joined paths: a store's folder sorts without its '/' */
        qsort(names, n, sizeof *names, cmp_str);
    for (int pass = 0; pass < 2 && !rc; pass++) { /* shards first, then stores */
        for (size_t i = 0; i < n && !rc; i++) {
            struct stat st;
            char name[64];
            sl_dataset_split *s = NULL;
            int lmdb = sl_name_has_suffix(names[i], ".lmdb");
            if (lmdb != pass || stat(names[i], &st) != 0)
                continue;
            if (lmdb) {
                char *mdb = sl_path_join(names[i], "data.mdb");
                if (!mdb) {
                    rc = oom();
                    break;
                }
                int ok = S_ISDIR(st.st_mode) && is_file(mdb);
                free(mdb);
                const char *b = sl_name_base(names[i]);
                snprintf(name, sizeof name, "%.*s", (int)(strlen(b) - 5), b);
                if (!ok || (only && strcmp(name, only)) || (extra && is_listed(ds, listed, name)))
                    continue;
                if (!(rc = add_split(ds, name, SL_FORMAT_LMDB, &s)))
                    rc = add_file(s, names[i]);
                continue;
            }
            if (!S_ISREG(st.st_mode))
                continue;
            const char *z = sl_dataset_compressed_as(names[i]);
            if (z) {
                rc = sl_dataset_refuse_compressed(names[i], z);
                break;
            }
            sl_dataset_split_of(names[i], name, sizeof name);
            if ((only && strcmp(name, only)) ||
                (extra && (!strcmp(name, "*") || is_listed(ds, listed, name))))
                continue;
            sl_format fmt = sl_dataset_file_format(names[i]);
            s = find_split(ds, name, fmt);
            if (!s && (rc = add_split(ds, name, fmt, &s)))
                break;
            rc = add_file(s, names[i]);
        }
    }
out:
    sl_bytes_names_free(all, nall);
    sl_paths_free(names, n);
    if (!rc && ds->nsplits == 0 && !only && !extra) {
        char hint[4400] = "";
        images_hint(ds->dir, hint, sizeof hint);
        rc = sl_fail(SL_ENOENT, "%s: %s: no %s, shards NAME-NNNNN-of-NNNNN[.tfrecord], "
                     "*.tfrecord files or LMDB store%s", fn_res, ds->dir, SL_MANIFEST_FILE,
                     hint);
    }
    return rc;
}

/* A glob pattern: its regular files, less index, temporary and manifest
 * files, as one split. */
static int open_glob(sl_dataset *ds)
{
    glob_t g;
    sl_dataset_split *s = NULL;
    int rc = SL_OK, grc = glob(ds->path, GLOB_ERR, NULL, &g);
    ds->kind = SL_DATASET_GLOB;
    if (grc == GLOB_NOMATCH)
        return sl_fail(SL_ENOENT, "%s: %s: no file matches", fn_res, ds->path);
    if (grc != 0)
        return sl_fail(grc == GLOB_NOSPACE ? SL_ENOMEM : SL_EIO, "%s: %s: glob failed", fn_res,
                       ds->path);
    for (size_t i = 0; i < g.gl_pathc && !rc; i++) {
        const char *p = g.gl_pathv[i], *b = sl_name_base(p);
        char name[64];
        if (sl_name_has_suffix(b, ".idx") || sl_name_has_suffix(b, ".tmp") ||
            !strcmp(b, SL_MANIFEST_FILE))
            continue;
        if (!is_file(p)) {
            rc = sl_fail(SL_EINVAL, "%s: %s: matches %s, which is not a shard file", fn_res,
                         ds->path, p);
            break;
        }
        if (sl_dataset_compressed_as(p)) {
            rc = sl_dataset_refuse_compressed(p, sl_dataset_compressed_as(p));
            break;
        }
        sl_dataset_split_of(p, name, sizeof name);
        if (!s) {
            if (!(ds->dir = dir_of(p))) {
                rc = oom();
                break;
            }
            rc = add_split(ds, name, sl_dataset_file_format(p), &s);
        } else if (strcmp(s->name, name)) {
            snprintf(s->name, sizeof s->name, "*"); /* several splits matched */
        }
        if (!rc)
            rc = add_file(s, p);
    }
    globfree(&g);
    if (!rc && !s)
        rc = sl_fail(SL_ENOENT, "%s: %s: matches only index, temporary or %s files", fn_res,
                     ds->path, SL_MANIFEST_FILE);
    return rc ? rc : load_manifest(ds);
}

/* One shard file or one LMDB directory. */
static int open_single(sl_dataset *ds, sl_format fmt)
{
    char name[64];
    sl_dataset_split *s = NULL;
    int rc;
    ds->kind = fmt == SL_FORMAT_LMDB ? SL_DATASET_LMDB : SL_DATASET_FILE;
    free(ds->dir); /* an LMDB directory comes here with dir set to itself */
    if (!(ds->dir = dir_of(ds->path)))
        return oom();
    if ((rc = load_manifest(ds))) /* class names and label range, not counts */
        return rc;
    if (fmt == SL_FORMAT_LMDB) {
        const char *b = sl_name_base(ds->path);
        size_t n = strlen(b);
        if (n > 5 && !strcmp(b + n - 5, ".lmdb"))
            n -= 5;
        snprintf(name, sizeof name, "%.*s", (int)n, b);
    } else {
        sl_dataset_split_of(ds->path, name, sizeof name);
    }
    if ((rc = add_split(ds, name, fmt, &s)))
        return rc;
    return add_file(s, ds->path);
}

/* ------------------------------------------------------------ braces */

/* The most names a brace pattern may expand to. */
#define SL_DATASET_MAX_BRACE 1000000u

/* The first "{A..B}" of p with A, B decimal and A <= B: its offsets and
 * values, the width of A (zero padding, as WebDataset's and the shell's
 * "{000000..000099}"). 0 when there is none. */
static int find_range(const char *p, size_t *at, size_t *len, uint64_t *a, uint64_t *b,
                      int *width)
{
    for (const char *o = strchr(p, '{'); o; o = strchr(o + 1, '{')) {
        char *e1, *e2;
        if (o[1] < '0' || o[1] > '9')
            continue;
        unsigned long long x = strtoull(o + 1, &e1, 10);
        if (e1[0] != '.' || e1[1] != '.' || e1[2] < '0' || e1[2] > '9')
            continue;
        unsigned long long y = strtoull(e1 + 2, &e2, 10);
        if (*e2 != '}' || y < x)
            continue;
        *at = (size_t)(o - p);
        *len = (size_t)(e2 + 1 - o);
        *a = x;
        *b = y;
        *width = (int)(e1 - o - 1);
        return 1;
    }
    return 0;
}

/* Expand every "{A..B}" of pat into s's files, in order. */
static int expand_braces(const char *pat, sl_dataset_split *s)
{
    size_t at, len;
    uint64_t a, b;
    int width;
    if (!find_range(pat, &at, &len, &a, &b, &width))
        return add_file(s, pat);
    if (b - a >= SL_DATASET_MAX_BRACE || s->nfiles + (b - a) >= SL_DATASET_MAX_BRACE)
        return sl_fail(SL_EINVAL, "%s: %s: expands to more than %u names", fn_res, pat,
                       SL_DATASET_MAX_BRACE);
    size_t n = strlen(pat);
    char *one = malloc(n + 32);
    if (!one)
        return oom();
    int rc = SL_OK;
    for (uint64_t v = a; v <= b && !rc; v++) {
        snprintf(one, n + 32, "%.*s%0*llu%s", (int)at, pat, width, (unsigned long long)v,
                 pat + at + len);
        rc = expand_braces(one, s);
    }
    free(one);
    return rc;
}

/* "DIR/train-{00000..00015}-of-00016.tfrecord", local or remote: the names
 * it spells, as one split (as a glob's matches), whether they exist or
 * not: the readers name a missing one. The way to read shards from a web
 * server without a dataset.json, and WebDataset's own notation. */
static int open_braces(sl_dataset *ds)
{
    sl_dataset_split *s = NULL;
    char name[64];
    int rc;
    ds->kind = SL_DATASET_GLOB;
    if (!(ds->dir = dir_of(ds->path)))
        return oom();
    if ((rc = add_split(ds, "*", sl_dataset_file_format(ds->path), &s)) ||
        (rc = expand_braces(ds->path, s)))
        return rc;
    sl_dataset_split_of(s->files[0], name, sizeof name);
    snprintf(s->name, sizeof s->name, "%s", name);
    for (size_t i = 1; i < s->nfiles; i++) {
        sl_dataset_split_of(s->files[i], name, sizeof name);
        if (strcmp(name, s->name))
            snprintf(s->name, sizeof s->name, "*"); /* several splits */
    }
    return load_manifest(ds);
}

/* ------------------------------------------------------------ remote */

/* Does the last part of url name a shard file rather than a folder? */
static int names_shard_file(const char *url)
{
    return sl_dataset_shard_like(sl_name_base(url));
}

/* Add the listed names (relative to ds->dir) that are shards to ds: one
 * split per name group (glob NULL), or those glob matches as one split. */
static int add_listed(sl_dataset *ds, char **names, size_t n, const char *only, const char *glob)
{
    int rc = SL_OK;
    sl_dataset_split *one = NULL;
    for (size_t i = 0; i < n && !rc; i++) {
        char name[64], *full;
        sl_dataset_split *s;
        if (!names_shard_file(names[i]) || strchr(names[i], '/') ||
            (glob && fnmatch(glob, names[i], FNM_PERIOD) != 0))
            continue;
        if (!(full = sl_path_join(ds->dir, names[i])))
            return oom();
        const char *z = sl_dataset_compressed_as(names[i]);
        if (z) {
            rc = sl_dataset_refuse_compressed(full, z);
            free(full);
            break;
        }
        sl_dataset_split_of(names[i], name, sizeof name);
        if (glob) { /* one split, as a local glob's */
            if (!one)
                rc = add_split(ds, name, sl_dataset_file_format(names[i]), &one);
            else if (strcmp(one->name, name))
                snprintf(one->name, sizeof one->name, "*");
            if (!rc)
                rc = add_file(one, full);
            free(full);
            continue;
        }
        if (only && strcmp(name, only)) {
            free(full);
            continue;
        }
        s = find_split(ds, name, sl_dataset_file_format(names[i]));
        if (s || !(rc = add_split(ds, name, sl_dataset_file_format(names[i]), &s)))
            rc = add_file(s, full);
        free(full);
    }
    return rc;
}

/* List the prefix dir + "/" and add its shards to ds (add_listed). */
static int list_remote(sl_dataset *ds, const char *dir, const char *only, const char *glob)
{
    char **names = NULL, *pre = sl_str_cat(dir, "/");
    size_t n = 0;
    if (!pre)
        return oom();
    int rc = sl_bytes_list(pre, &names, &n);
    free(pre);
    if (rc)
        return sl_fail(rc, "%s: %s", fn_res, sl_errmsg());
    rc = add_listed(ds, names, n, only, glob);
    sl_paths_free(names, n);
    return rc;
}

/* s3://B/P/GLOB: the prefix P listed, its names matched against GLOB (the
 * last part only: a listing is one level deep). */
static int open_remote_glob(sl_dataset *ds)
{
    int rc;
    const char *pat = sl_name_base(ds->path);
    ds->kind = SL_DATASET_GLOB;
    if (strpbrk(ds->path + 5, "*?[") < pat)
        return sl_fail(SL_EINVAL, "%s: %s: a pattern in the last part of the path only (an S3 "
                       "listing is one level deep)", fn_res, ds->path);
    if (!(ds->dir = dir_of(ds->path)))
        return oom();
    rc = list_remote(ds, ds->dir, NULL, pat);
    if (!rc && ds->nsplits == 0)
        rc = sl_fail(SL_ENOENT, "%s: %s: no object matches", fn_res, ds->path);
    return rc ? rc : load_manifest(ds);
}

/* A remote PATH (http(s)://, s3://; bytesrc.h). A folder is read through
 * its dataset.json (the shards it lists, by their names: nothing is
 * fetched but the manifest); an s3:// folder without one is listed
 * (ListObjectsV2), an http(s):// one cannot be (a web server's listing is
 * not a format), so it must have one. A URL whose last part is a shard's
 * name is that one shard; an s3:// one with * ? or [ in its last part is a
 * glob over the listing. */
static int open_remote(sl_dataset *ds, const char *only)
{
    int rc;
    uint64_t size;
    int s3 = !strncmp(ds->path, "s3://", 5);
    if (strpbrk(sl_name_base(ds->path), s3 ? "*?[" : "*[")) {
        if (s3)
            return open_remote_glob(ds);
        return sl_fail(SL_EINVAL, "%s: %s: a glob needs a listing, and a web server's is not a "
                       "format: name the shards with a brace pattern ('%.*s/train-{000000..000099}"
                       ".tar') or read the folder through its %s", fn_res, ds->path,
                       (int)(sl_name_base(ds->path) - ds->path - 1), ds->path, SL_MANIFEST_FILE);
    }
    if (names_shard_file(ds->path)) {
        const char *z = sl_dataset_compressed_as(ds->path);
        if (z)
            return sl_dataset_refuse_compressed(ds->path, z);
        if ((rc = sl_bytes_size(ds->path, &size)))
            return sl_fail(rc, "%s: %s", fn_res, sl_errmsg());
        return open_single(ds, sl_dataset_file_format(ds->path));
    }
    if (!(ds->dir = strdup(ds->path)))
        return oom();
    if ((rc = load_manifest(ds)))
        return rc;
    if (ds->has_manifest)
        return open_manifest_dir(ds, only);
    if (!s3)
        return sl_fail(SL_ENOENT, "%s: %s: no %s there (a folder over HTTP is read through its "
                       "%s, which sluice convert writes; or name its shards: "
                       "'%s/train-{00000..00015}-of-00016.tfrecord')", fn_res, ds->path,
                       SL_MANIFEST_FILE, SL_MANIFEST_FILE, ds->path);
    /* s3:// without a manifest: the prefix's objects named as shards */
    ds->kind = SL_DATASET_DIR;
    rc = list_remote(ds, ds->path, only, NULL);
    if (!rc && ds->nsplits == 0 && !only)
        rc = sl_fail(SL_ENOENT, "%s: %s: no %s and no shards NAME-NNNNN-of-NNNNN[.tfrecord|.tar], "
                     "*.tfrecord or *.tar objects", fn_res, ds->path, SL_MANIFEST_FILE);
    return rc;
}

/* Count the TFRecord shards without an index file beside them. */
static int count_unindexed(sl_dataset *ds)
{
    for (size_t i = 0; i < ds->nsplits; i++) {
        sl_dataset_split *s = &ds->splits[i];
        if ((s->format != SL_FORMAT_TFRECORD && s->format != SL_FORMAT_WDS) || ds->remote)
            continue; /* remote: a HEAD per shard would cost more than it tells */
        for (size_t k = 0; k < s->nfiles; k++) {
            char *idx = sl_str_cat(s->files[k], ".idx"), *dali = NULL;
            if (!idx || (s->format == SL_FORMAT_WDS && !(dali = sl_wds_dali_idx_path(s->files[k])))) {
                free(idx);
                return oom();
            }
            s->unindexed += !is_file(idx) && !(dali && is_file(dali)); /* DALI's X.idx too */
            free(idx);
            free(dali);
        }
    }
    return SL_OK;
}

int sl_dataset_resolve(const char *path, const char *only, sl_dataset *ds)
{
    struct stat st;
    int rc;
    char *mdb = NULL, *mf = NULL;

    if (!ds)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn_res);
    memset(ds, 0, sizeof *ds);
    sl_manifest_init(&ds->manifest);
    if (!path || !*path)
        return sl_fail(SL_EINVAL, "%s: no dataset path", fn_res);
    /* where a path enters: its credentials go to bytesrc's table, and every
     * name from here on (ds->path, ds->dir, the files) is without them */
    if ((rc = sl_path_redact(path, &ds->path)))
        return rc;
    path = ds->path;
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        ds->path[--n] = 0;
    ds->remote = sl_path_is_remote(ds->path); /* the one place a dataset asks */
    size_t b_at, b_len;
    uint64_t b_a, b_b;
    int b_w;
    if (find_range(ds->path, &b_at, &b_len, &b_a, &b_b, &b_w)) {
        rc = open_braces(ds);
        goto out;
    }
    if (ds->remote) {
        rc = open_remote(ds, only);
        goto out;
    }
    if (stat(ds->path, &st) != 0) {
        int e = errno;
        if (strpbrk(ds->path, "*?["))
            rc = open_glob(ds);
        else
            rc = sl_fail(e == ENOENT || e == ENOTDIR ? SL_ENOENT : SL_EIO, "%s: %s", ds->path,
                         strerror(e));
        goto out;
    }
    if (S_ISREG(st.st_mode)) {
        const char *z = sl_dataset_compressed_as(ds->path);
        if (z) {
            rc = sl_dataset_refuse_compressed(ds->path, z);
            goto out;
        }
        sl_format fmt = sl_dataset_file_format(ds->path);
        if (fmt == SL_FORMAT_TFRECORD &&
            (rc = sl_dataset_check_shard_file(ds->path, (uint64_t)st.st_size)))
            goto out;
        rc = open_single(ds, fmt);
        goto out;
    }
    if (!S_ISDIR(st.st_mode)) {
        rc = sl_fail(SL_EINVAL, "%s: not a file or directory", ds->path);
        goto out;
    }
    if (!(ds->dir = strdup(ds->path)) || !(mdb = sl_path_join(ds->path, "data.mdb")) ||
        !(mf = sl_path_join(ds->path, SL_MANIFEST_FILE))) {
        rc = oom();
        goto out;
    }
    if (is_file(mdb))
        rc = open_single(ds, SL_FORMAT_LMDB);
    else if (is_file(mf) && !(rc = load_manifest(ds)))
        rc = open_manifest_dir(ds, only);
    else {
        ds->kind = SL_DATASET_DIR;
        if (!(rc = load_manifest(ds))) /* none: a TensorFlow Datasets folder's classes */
            rc = list_dir(ds, only, 0);
    }
    if (!rc && only && ds->kind != SL_DATASET_LMDB && ds->nsplits == 0) {
        /* name the splits there are */
        sl_dataset all;
        char names[512] = "none";
        if (sl_dataset_resolve(ds->path, NULL, &all) == SL_OK)
            sl_dataset_split_names(&all, names, sizeof names);
        sl_dataset_fini(&all);
        rc = sl_fail(SL_ENOENT, "%s: no split '%s' (%s has: %s)", ds->path, only,
                     ds->has_manifest ? SL_MANIFEST_FILE : "the folder", names);
    }
out:
    free(mdb);
    free(mf);
    if (!rc)
        rc = count_unindexed(ds);
    return rc;
}

void sl_dataset_fini(sl_dataset *ds)
{
    if (!ds)
        return;
    for (size_t i = 0; i < ds->nsplits; i++)
        sl_paths_free(ds->splits[i].files, ds->splits[i].nfiles);
    free(ds->splits);
    free(ds->path);
    free(ds->dir);
    free(ds->manifest_path);
    free(ds->classes_path);
    sl_manifest_fini(&ds->manifest);
    memset(ds, 0, sizeof *ds);
}

const sl_dataset_split *sl_dataset_split_find(const sl_dataset *ds, const char *name)
{
    for (size_t i = 0; ds && name && i < ds->nsplits; i++)
        if (!strcmp(ds->splits[i].name, name))
            return &ds->splits[i];
    return NULL;
}

void sl_dataset_split_names(const sl_dataset *ds, char *buf, size_t cap)
{
    size_t used = 0;
    if (cap == 0)
        return;
    buf[0] = '\0';
    for (size_t i = 0; i < ds->nsplits && used < cap; i++) {
        int w = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", ds->splits[i].name);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

int sl_dataset_reader_split(const sl_dataset *ds, const char *split,
                            const sl_dataset_split **out)
{
    static const char fn[] = "sl_dataset_reader_split";
    const sl_dataset_split *s;
    *out = NULL;
    if (ds->kind == SL_DATASET_GLOB || ds->kind == SL_DATASET_FILE) {
        s = &ds->splits[0]; /* the path chose the files */
    } else if (ds->kind == SL_DATASET_DIR && !ds->has_manifest && ds->nsplits == 1 &&
               !sl_dataset_split_find(ds, split) && !sl_dataset_split_named(ds->splits[0].name)) {
        s = &ds->splits[0]; /* a folder whose files form one set is that set */
    } else if (!(s = sl_dataset_split_find(ds, split))) {
        char names[512];
        sl_dataset_split_names(ds, names, sizeof names);
        return sl_fail(SL_ENOENT, "%s: %s: no split '%s' (%s has: %s)", fn, ds->path,
                       split ? split : "(none)",
                       ds->has_manifest ? SL_MANIFEST_FILE : "the folder", names);
    }
    if (s->format == SL_FORMAT_LMDB)
        return sl_fail(SL_ENOTSUP, "%s: %s: split '%s' is an LMDB store; this reader takes "
                       "TFRecord shards (convert with --format tfrecord)", fn, ds->path, s->name);
    *out = s;
    return SL_OK;
}

int64_t sl_dataset_label_offset(const sl_dataset *ds)
{
    return ds->has_manifest ? ds->manifest.label_offset : 0;
}

const char *sl_dataset_eval_split(const sl_dataset *ds)
{
    static const char *const names[] = {"test", "validation"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (sl_dataset_split_find(ds, names[i]))
            return names[i];
    return NULL;
}
