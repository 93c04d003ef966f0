/*
 * records/convert_inputs.c - enumerate the inputs of a conversion: a class-folder
 * tree, a list file, or MNIST-style IDX files (see records_int.h for the
 * rules of each).
 *
 * Order is deterministic (sorted names, file order), so the converter's
 * seeded shuffle and --resume see the same input numbering every run.
 *
 * IDX format (Yann LeCun's MNIST page; Fashion-MNIST uses it unchanged),
 * all integers big-endian:
 *   images: u32 magic 0x00000803 (u8 data, 3 dims) | u32 n | u32 rows |
 *           u32 cols | n*rows*cols u8 pixels, row-major
 *   labels: u32 magic 0x00000801 (u8 data, 1 dim)  | u32 n | n u8 labels
 * Read through zlib's gzread, which passes plain (uncompressed) files
 * through unchanged.
 *
 * Threading: sl_inputs_load is reentrant; a loaded list is read-only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <zlib.h>

#include "bytesrc.h"
#include "records_int.h"

/* ---------------------------------------------------------------- helpers */

int sl_inputs_push(sl_input_list *l, size_t *cap, const sl_input *it)
{
    if (l->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 1024;
        sl_input *p = realloc(l->items, ncap * sizeof *p);
        if (!p)
            return sl_fail(SL_ENOMEM, "sl_inputs_load: out of memory (%zu inputs)", ncap);
        l->items = p;
        *cap = ncap;
    }
    l->items[l->n++] = *it;
    return SL_OK;
}

static int push_input(sl_input_list *l, size_t *cap, char *path, uint32_t idx, int64_t label,
                      uint64_t size, int url)
{
    sl_input it = {.path = path, .idx = idx, .label = label, .size = size, .url = url};
    return sl_inputs_push(l, cap, &it);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

typedef struct dir_file {
    char *name;
    uint64_t size;
} dir_file;

static int cmp_file(const void *a, const void *b)
{
    return strcmp(((const dir_file *)a)->name, ((const dir_file *)b)->name);
}

/* dir's entries, hidden ones skipped, one stat each (symlinks followed):
 * its regular files with their sizes (files, sizes, nfiles) and its folders
 * (dirs, ndirs; NULL: not wanted), each sorted by strcmp. Other types and
 * dangling links are neither. */
static int list_dir(const char *dir, char ***files, uint64_t **sizes, size_t *nfiles,
                    char ***dirs, size_t *ndirs)
{
    if (files)
        *files = NULL, *sizes = NULL, *nfiles = 0;
    *dirs = NULL;
    *ndirs = 0;
    char **all = NULL;
    size_t nall = 0, nf = 0, nd = 0;
    int rc = sl_bytes_list(dir, &all, &nall); /* a folder's name ends in '/' */
    if (rc)
        return sl_fail(rc, "%s", sl_errmsg());
    dir_file *f = nall ? malloc(nall * sizeof *f) : NULL;
    char **d = nall ? malloc(nall * sizeof *d) : NULL;
    if (nall && (!f || !d)) {
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", dir);
        goto out;
    }
    for (size_t i = 0; i < nall; i++) {
        char *b = all[i];
        size_t l = strlen(b);
        if (l && b[l - 1] == '/')
            b[l - 1] = 0; /* stat below tells the type, links followed */
        if (b[0] == '.')
            continue; /* hidden: skipped (freed with all) */
        char *p = sl_path_join(dir, b);
        struct stat st;
        if (!p) {
            rc = sl_fail(SL_ENOMEM, "%s: out of memory", dir);
            goto out;
        }
        int ok = stat(p, &st) == 0;
        free(p);
        if (ok && S_ISREG(st.st_mode) && files)
            f[nf++] = (dir_file){b, (uint64_t)st.st_size}, all[i] = NULL;
        else if (ok && S_ISDIR(st.st_mode))
            d[nd++] = b, all[i] = NULL;
    }
    if (nf)
        qsort(f, nf, sizeof *f, cmp_file);
    if (nd)
        qsort(d, nd, sizeof *d, cmp_str);
    if (nf && (!(*files = malloc(nf * sizeof **files)) || !(*sizes = malloc(nf * sizeof **sizes)))) {
        free(*files);
        *files = NULL;
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", dir);
        goto out;
    }
    for (size_t i = 0; i < nf; i++)
        (*files)[i] = f[i].name, (*sizes)[i] = f[i].size;
    if (files)
        *nfiles = nf;
    *dirs = d, *ndirs = nd;
    d = NULL;
    nf = 0;
out:
    for (size_t i = 0; i < nf; i++) /* kept but not handed out */
        free(f[i].name);
    if (d)
        free_names(d, nd);
    free(f);
    sl_bytes_names_free(all, nall); /* what was not kept; the kept are NULL */
    return rc;
}

/* ----------------------------------------------------------------- folder */

/* Deepest folder under a class folder read (a class folder is depth 0). */
#define TREE_DEPTH 32

/* The folders being walked, outermost first: a symlink back to one of them
 * (a loop) is not entered again. */
typedef struct tree_path {
    dev_t dev[TREE_DEPTH + 1];
    ino_t ino[TREE_DEPTH + 1];
} tree_path;

/* Every regular file under dir, at any depth, as inputs of label `label`:
 * dir's own files sorted by name, then each subfolder's, in name order
 * (symlinks followed, hidden entries skipped): the files torchvision's
 * ImageFolder takes from a class folder (os.walk, links followed), so the
 * same tree gives the same samples. */
static int add_tree(sl_input_list *l, size_t *cap, const char *dir, int64_t label, int depth,
                    tree_path *tp)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return sl_fail(SL_EIO, "%s: %s", dir, strerror(errno));
    for (int i = 0; i < depth; i++)
        if (tp->dev[i] == st.st_dev && tp->ino[i] == st.st_ino)
            return SL_OK; /* a link to a folder it is inside: walked already */
    if (depth > TREE_DEPTH)
        return sl_fail(SL_EINVAL, "%s: folders nested more than %d deep in a class folder",
                       dir, TREE_DEPTH);
    tp->dev[depth] = st.st_dev;
    tp->ino[depth] = st.st_ino;
    char **files, **subs;
    uint64_t *sizes;
    size_t nfiles, nsubs;
    int rc = list_dir(dir, &files, &sizes, &nfiles, &subs, &nsubs);
    if (rc)
        return rc;
    for (size_t i = 0; i < nfiles && !rc; i++) {
        char *p = sl_path_join(dir, files[i]);
        if (!p)
            rc = sl_fail(SL_ENOMEM, "%s: out of memory", dir);
        else if ((rc = push_input(l, cap, p, 0, label, sizes[i], 0)))
            free(p);
    }
    free_names(files, nfiles);
    free(sizes);
    for (size_t i = 0; i < nsubs && !rc; i++) {
        char *p = sl_path_join(dir, subs[i]);
        rc = p ? add_tree(l, cap, p, label, depth + 1, tp)
               : sl_fail(SL_ENOMEM, "%s: out of memory", dir);
        free(p);
    }
    free_names(subs, nsubs);
    return rc;
}

static int load_folder(const char *dir, sl_input_list *l)
{
    char **classes;
    size_t nclasses, cap = 0;
    int rc = list_dir(dir, NULL, NULL, NULL, &classes, &nclasses);
    if (rc)
        return rc;
    if (nclasses == 0) {
        free(classes);
        return sl_fail(SL_EINVAL, "no class subfolders in %s", dir);
    }
    if (nclasses > UINT32_MAX - 1) {
        free_names(classes, nclasses);
        return sl_fail(SL_EINVAL, "%s: too many class folders", dir);
    }
    l->classes = classes;
    l->nclasses = (uint32_t)nclasses;
    tree_path tp;
    for (size_t c = 0; c < nclasses && !rc; c++) {
        char *cdir = sl_path_join(dir, classes[c]);
        if (!cdir)
            return sl_fail(SL_ENOMEM, "%s: out of memory", dir);
        rc = add_tree(l, &cap, cdir, (int64_t)c, 0, &tp);
        free(cdir);
    }
    return rc;
}

/* ------------------------------------------------------------------- list */

/* Parse a label: decimal digits only, at most 2^31 - 1 (labels become
 * int64 features, but classes are counted in uint32 and offsets in int). */
static int parse_label(const char *s, int64_t *out)
{
    int64_t v = 0;
    while (*s == ' ')
        s++;
    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (*s - '0');
        if (v > INT32_MAX)
            return -1;
    }
    *out = v;
    return 0;
}

static int load_list(const char *file, sl_input_list *l)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return sl_fail(errno == ENOENT ? SL_ENOENT : SL_EIO, "%s: %s", file, strerror(errno));
    /* Relative paths are relative to the list's own directory. */
    const char *slash = strrchr(file, '/');
    char *base = slash ? strndup(file, (size_t)(slash - file) + 1) : strdup("");
    char *line = NULL;
    size_t linecap = 0, cap = 0;
    ssize_t got;
    unsigned long lineno = 0;
    int64_t maxlabel = -1;
    int rc = SL_OK;
    if (!base) {
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", file);
        goto out;
    }
    while ((got = getline(&line, &linecap, f)) >= 0) {
        lineno++;
        size_t n = (size_t)got;
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' ||
                     line[n - 1] == '\t'))
            line[--n] = '\0';
        size_t lead = strspn(line, " \t");
        if (line[lead] == '\0' || line[0] == '#')
            continue;
        if (strlen(line) != n) {
            rc = sl_fail(SL_EINVAL, "%s:%lu: NUL byte in line", file, lineno);
            goto out;
        }
        char *tab = strrchr(line, '\t');
        if (!tab || tab == line) {
            rc = sl_fail(SL_EINVAL, "%s:%lu: expected \"path<TAB>label\"", file, lineno);
            goto out;
        }
        *tab = '\0';
        int64_t label;
        if (parse_label(tab + 1, &label)) {
            rc = sl_fail(SL_EINVAL, "%s:%lu: label \"%s\" is not an integer in 0..%d", file,
                         lineno, tab + 1, INT32_MAX);
            goto out;
        }
        /* A URL (records/bytesrc.h) is taken as it is; its size is not
         * asked for (a HEAD per input): 0, and the shard count estimates. */
        int url = sl_path_is_remote(line);
        char *p = line[0] == '/' || url ? strdup(line) : sl_path_join(base, line);
        if (!p) {
            rc = sl_fail(SL_ENOMEM, "%s: out of memory", file);
            goto out;
        }
        struct stat st;
        uint64_t size = !url && stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
        if ((rc = push_input(l, &cap, p, 0, label, size, url))) {
            free(p);
            goto out;
        }
        if (label > maxlabel)
            maxlabel = label;
    }
    if (ferror(f))
        rc = sl_fail(SL_EIO, "%s: read error", file);
    l->nclasses = (uint32_t)(maxlabel + 1);
out:
    free(line);
    free(base);
    fclose(f);
    return rc;
}

/* -------------------------------------------------------------------- IDX */

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Read up to want bytes; returns bytes read or -1 (message set). A gzip
 * stream that ends early counts as a short read, not an error. */
static int64_t gz_read_all(gzFile g, const char *path, uint8_t *buf, uint64_t want)
{
    uint64_t got = 0;
    while (got < want) {
        uint64_t chunk = want - got;
        if (chunk > (1u << 30))
            chunk = 1u << 30;
        int r = gzread(g, buf + got, (unsigned)chunk);
        if (r < 0) {
            int err;
            const char *msg = gzerror(g, &err);
            sl_fail(SL_ECORRUPT, "%s: gzip data error: %s", path, msg);
            return -1;
        }
        if (r == 0)
            break;
        got += (uint64_t)r;
    }
    return (int64_t)got;
}

/* Open an IDX file and check its header: magic, then ndims u32 sizes. */
static int idx_open(const char *path, uint32_t magic, unsigned ndims, gzFile *g, uint32_t *dims)
{
    errno = 0;
    *g = gzopen(path, "rb");
    if (!*g)
        return sl_fail(errno == ENOENT ? SL_ENOENT : SL_EIO, "%s: %s", path,
                       errno ? strerror(errno) : "gzopen failed");
    /* 256 KiB windows (gzread allocates 3x this) for the real files; a file
     * smaller than that gets windows of its own size (at least 8 KiB, zlib's
     * default): a test's or a fuzzer's few bytes do not map 768 KiB. */
    struct stat st;
    unsigned win = 256 * 1024;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (off_t)win)
        win = st.st_size > 8192 ? (unsigned)st.st_size : 8192;
    gzbuffer(*g, win);
    /* Magic first, so a file of the other kind is named as such even when
     * it is shorter than this kind's header. */
    uint8_t hdr[16];
    size_t hlen = 4 + 4 * (size_t)ndims;
    int64_t got = gz_read_all(*g, path, hdr, 4);
    if (got == 4 && be32(hdr) == magic) {
        int64_t more = gz_read_all(*g, path, hdr + 4, hlen - 4);
        got = more < 0 ? -1 : got + more;
    }
    int rc = SL_OK;
    if (got < 0)
        rc = SL_ECORRUPT;
    else if (got >= 4 && be32(hdr) != magic)
        rc = sl_fail(SL_ECORRUPT, "%s: not an IDX %s file (magic 0x%08x, expected 0x%08x)",
                     path, ndims == 3 ? "image" : "label", be32(hdr), magic);
    else if ((uint64_t)got < hlen)
        rc = sl_fail(SL_ECORRUPT, "%s: truncated IDX header (%lld of %zu bytes)", path,
                     (long long)got, hlen);
    if (rc) {
        gzclose(*g);
        *g = NULL;
        return rc;
    }
    for (unsigned i = 0; i < ndims; i++)
        dims[i] = be32(hdr + 4 + 4 * i);
    return SL_OK;
}

/* Read exactly `want` payload bytes after the header into a malloc'd buffer,
 * growing it as data arrives (a corrupt header cannot make us allocate
 * more than the file holds), then insist on end of file. */
static int idx_payload(gzFile g, const char *path, uint64_t hdr_bytes, uint64_t want,
                       const char *what, uint8_t **out)
{
    uint64_t cap = want < (1u << 20) ? want : (1u << 20), got = 0;
    uint8_t *buf = malloc(cap ? cap : 1);
    if (!buf)
        return sl_fail(SL_ENOMEM, "%s: out of memory", path);
    while (got < want) {
        if (got == cap) {
            uint64_t ncap = cap * 2 < want ? cap * 2 : want;
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                return sl_fail(SL_ENOMEM, "%s: out of memory (%llu bytes)", path,
                               (unsigned long long)ncap);
            }
            buf = nb;
            cap = ncap;
        }
        int64_t r = gz_read_all(g, path, buf + got, cap - got);
        if (r < 0) {
            free(buf);
            return SL_ECORRUPT;
        }
        got += (uint64_t)r;
        if (got < cap)
            break; /* end of data */
    }
    if (got < want) {
        free(buf);
        return sl_fail(SL_ECORRUPT, "%s: truncated: header promises %s (%llu bytes), "
                       "file has %llu", path, what,
                       (unsigned long long)(hdr_bytes + want), (unsigned long long)(hdr_bytes + got));
    }
    uint8_t extra;
    int64_t r = gz_read_all(g, path, &extra, 1);
    if (r != 0) {
        free(buf);
        return r < 0 ? SL_ECORRUPT
                     : sl_fail(SL_ECORRUPT, "%s: data after the %llu bytes the header describes",
                               path, (unsigned long long)(hdr_bytes + want));
    }
    *out = buf;
    return SL_OK;
}

static int load_idx(const char *images, const char *labels, sl_input_list *l)
{
    if (!images || !labels)
        return sl_fail(SL_EINVAL, "IDX source needs both an images and a labels file");
    gzFile gi = NULL, gl = NULL;
    uint8_t *lab = NULL;
    uint32_t di[3] = {0}, dl[1] = {0};
    int rc = idx_open(images, 0x00000803u, 3, &gi, di);
    if (rc)
        return rc;
    if ((rc = idx_open(labels, 0x00000801u, 1, &gl, dl)))
        goto out;
    if (di[0] != dl[0]) {
        rc = sl_fail(SL_ECORRUPT, "%s has %u images but %s has %u labels", images, di[0],
                     labels, dl[0]);
        goto out;
    }
    if (di[1] == 0 || di[2] == 0 || di[1] > SL_IMAGE_MAX_DIM || di[2] > SL_IMAGE_MAX_DIM) {
        rc = sl_fail(SL_ECORRUPT, "%s: bad image size %ux%u", images, di[1], di[2]);
        goto out;
    }
    uint64_t n = di[0], px = (uint64_t)di[1] * di[2];
    char what[96];
    snprintf(what, sizeof what, "%u images of %ux%u", di[0], di[1], di[2]);
    if ((rc = idx_payload(gi, images, 16, n * px, what, &l->idx_pixels)))
        goto out;
    snprintf(what, sizeof what, "%u labels", dl[0]);
    if ((rc = idx_payload(gl, labels, 8, n, what, &lab)))
        goto out;
    l->idx_rows = di[1];
    l->idx_cols = di[2];
    l->items = malloc((n ? n : 1) * sizeof *l->items);
    if (!l->items) {
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", images);
        goto out;
    }
    unsigned maxlabel = 0;
    for (uint64_t i = 0; i < n; i++) {
        l->items[i] = (sl_input){.path = NULL, .idx = (uint32_t)i, .label = lab[i], .size = px};
        if (lab[i] > maxlabel)
            maxlabel = lab[i];
    }
    l->n = (size_t)n;
    l->nclasses = n ? maxlabel + 1 : 0;
out:
    free(lab);
    if (gi)
        gzclose(gi);
    if (gl)
        gzclose(gl);
    return rc;
}

/* ------------------------------------------------------------------ entry */

int sl_inputs_load(const sl_convert_config *cfg, sl_input_list *out)
{
    if (!out)
        return sl_fail(SL_EINVAL, "sl_inputs_load: out is NULL");
    memset(out, 0, sizeof *out);
    if (!cfg)
        return sl_fail(SL_EINVAL, "sl_inputs_load: cfg is NULL");
    int rc;
    switch (cfg->source) {
    case SL_SOURCE_FOLDER:
    case SL_SOURCE_LIST:
        if (!cfg->input)
            return sl_fail(SL_EINVAL, "sl_inputs_load: no input %s given",
                           cfg->source == SL_SOURCE_FOLDER ? "folder" : "list file");
        rc = cfg->source == SL_SOURCE_FOLDER ? load_folder(cfg->input, out)
                                             : load_list(cfg->input, out);
        break;
    case SL_SOURCE_IDX:
        rc = load_idx(cfg->idx_images, cfg->idx_labels, out);
        break;
    case SL_SOURCE_TFRECORD:
        rc = sl_inputs_load_records(cfg, out);
        break;
    default:
        return sl_fail(SL_EINVAL, "sl_inputs_load: unknown source kind %d", (int)cfg->source);
    }
    if (rc) {
        rc = sl_fail(rc, "sl_inputs_load: %s", sl_errmsg());
        sl_inputs_free(out);
    }
    return rc;
}

void sl_inputs_free(sl_input_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i].path);
    free(l->items);
    if (l->classes)
        free_names(l->classes, l->nclasses);
    free(l->idx_pixels);
    memset(l, 0, sizeof *l);
}

int sl_inputs_name_classes(sl_input_list *l, const char *dir, char *const *names, uint32_t n,
                           const char *splits)
{
    if (!l->classes || !names || !n)
        return SL_OK;
    uint32_t *to = malloc((size_t)l->nclasses * sizeof *to);
    char **copy = calloc(n, sizeof *copy);
    int rc = SL_OK;
    if (!to || !copy) {
        rc = sl_fail(SL_ENOMEM, "%s: out of memory", dir);
        goto out;
    }
    for (uint32_t c = 0; c < l->nclasses && !rc; c++) {
        uint32_t j = 0;
        while (j < n && strcmp(names[j] ? names[j] : "", l->classes[c]) != 0)
            j++;
        to[c] = j;
        if (j < n)
            continue;
        char known[512];
        size_t k = 0;
        known[0] = '\0';
        for (uint32_t i = 0; i < n && k + 8 < sizeof known; i++) {
            int w = snprintf(known + k, sizeof known - k, "%s'%s'", i ? ", " : "",
                             names[i] ? names[i] : "");
            k += w > 0 ? (size_t)w : 0;
        }
        if (k >= sizeof known - 8)
            snprintf(known + sizeof known - 8, 8, ", ...");
        rc = sl_fail(SL_EINVAL, "%s: class folder '%s' is not one of the %u classes the "
                     "dataset's other splits (%s) were converted with (%s): a split's class "
                     "folders take the labels of the same names; convert it into a dataset of "
                     "its own", dir, l->classes[c], n,
                     splits, known);
    }
    for (uint32_t i = 0; i < n && !rc; i++)
        if (!(copy[i] = strdup(names[i] ? names[i] : "")))
            rc = sl_fail(SL_ENOMEM, "%s: out of memory", dir);
    if (rc)
        goto out;
    for (size_t i = 0; i < l->n; i++)
        if (l->items[i].label >= 0) /* -1: a record skipped later (convert_records.c) */
            l->items[i].label = (int64_t)to[l->items[i].label];
    free_names(l->classes, l->nclasses);
    l->classes = copy;
    l->nclasses = n;
    copy = NULL;
out:
    if (copy)
        free_names(copy, n);
    free(to);
    return rc;
}
