/*
 * train/io/safetensors.c - the safetensors format: write atomically, open and
 * validate strictly.
 *
 * Format (https://huggingface.co/docs/safetensors, and the reference
 * implementation github.com/huggingface/safetensors, safetensors/src/tensor.rs):
 *   u64 LE N | N bytes of UTF-8 JSON | the byte buffer
 * The JSON maps each tensor name to {"dtype": "F32", "shape": [...],
 * "data_offsets": [begin, end]} (offsets relative to the buffer's start,
 * little-endian C-order data), plus an optional "__metadata__" object of
 * string -> string. Like the reference writer we pad the JSON with spaces
 * so the buffer starts 8-byte aligned, and lay the data out by element size,
 * largest first (the reference sorts by dtype alignment too), back to back:
 * every element is then aligned in a mapping of the file. The header lists
 * the tensors in the caller's order; the data order only shows in the
 * offsets.
 *
 * The reader maps the file and trusts nothing in it: the header length is
 * checked against the file and a cap (the reference's 100 MB), the JSON
 * must be valid UTF-8 and parse as one object followed only by white space,
 * every dtype must be one safetensors defines, every shape's byte size
 * (overflow-checked) must equal end - begin, every range must lie in the
 * buffer, and ranges must not overlap. Bytes of the buffer that no tensor
 * covers are allowed (the reference rejects them; nothing here needs to).
 * Any failure is SL_ECORRUPT "sl_safetensors_open: FILE: tensor NAME: what".
 *
 * Threading: a handle is used by one thread at a time; the write is
 * reentrant.
 */
#include "train/train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fileio.h" /* sl_atomic_file */
#include "common/json.h"

/* The reference implementation's cap on the header (MAX_HEADER_SIZE). */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)
/* Dimensions the reader accepts; sl_st_tensor holds 4 (enough for convs). */
#define ST_MAX_DIMS 8
/* Offsets are JSON numbers, doubles to cJSON: exact below 2^53. */
#define ST_MAX_OFFSET ((int64_t)1 << 53)

/* Every dtype safetensors defines, with its element size in bits
 * (the reference's Dtype enum). Only F32 and I64 are handed out. */
static const struct st_dtype {
    const char *name;
    unsigned bits;
} st_dtypes[] = {
    {"BOOL", 8}, {"U8", 8},   {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"I16", 16},
    {"U16", 16}, {"F16", 16}, {"BF16", 16}, {"I32", 32},   {"U32", 32},   {"F32", 32},
    {"F64", 64}, {"I64", 64}, {"U64", 64},
};
#define ST_NDTYPES (int)(sizeof st_dtypes / sizeof st_dtypes[0])

typedef struct st_entry {
    const char *name;      /* the cJSON item's key, owned by f->json */
    int dtype;             /* index into st_dtypes */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;   /* in the buffer */
} st_entry;

struct sl_safetensors {
    char *path;
    uint8_t *map;          /* the whole file, read-only */
    size_t size;
    const uint8_t *buf;    /* the byte buffer after the header */
    uint64_t buf_len;
    cJSON *json;
    const cJSON *meta;     /* "__metadata__" or NULL */
    st_entry *t;
    int count;
    int *by_name;          /* indices of t in name order (sl_safetensors_find's bsearch) */
};

/* ------------------------------------------------------------------ write */

static const char *tag_name(sl_dtype_tag d)
{
    return d == SL_T_I64 ? "I64" : "F32";
}

static size_t tag_size(sl_dtype_tag d)
{
    return d == SL_T_I64 ? 8 : 4;
}

static uint64_t tensor_bytes(const sl_st_tensor *x)
{
    uint64_t n = tag_size(x->dtype);
    for (int d = 0; d < x->ndim; d++)
        n *= (uint64_t)x->shape[d];
    return n;
}

/* Data layout: I64 tensors first, then F32, each group in the caller's
 * order. off[i] gets tensor i's offset in the buffer. */
static void st_layout(const sl_st_tensor *t, int count, uint64_t *off)
{
    uint64_t pos = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < count; i++)
            if ((t[i].dtype == SL_T_I64) == (pass == 0)) {
                off[i] = pos;
                pos += tensor_bytes(&t[i]);
            }
}

/* Names in byte order, for the duplicate checks and the lookup: sorting
 * is O(n log n) where comparing each name with all before it was O(n^2)
 * (100,000 tensors: 57 s). */
static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A name that occurs twice among names[0..n) (the array is sorted in
 * place), or NULL. */
static const char *first_dup(const char **names, size_t n)
{
    qsort(names, n, sizeof *names, cmp_name);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(names[i - 1], names[i]))
            return names[i];
    return NULL;
}

/* Check the caller's tensors and metadata. */
static int st_check_args(const char *path, const sl_st_tensor *t, int count,
                         const char *const *meta_kv, int meta_count)
{
    static const char fn[] = "sl_safetensors_write";

    if (!path || !*path)
        return sl_fail(SL_EINVAL, "%s: empty path", fn);
    if (count < 0 || (count > 0 && !t) || meta_count < 0 || (meta_count > 0 && !meta_kv))
        return sl_fail(SL_EINVAL, "%s: %s: bad tensor or metadata arguments", fn, path);
    for (int i = 0; i < count; i++) {
        const sl_st_tensor *x = &t[i];
        if (!x->name || !*x->name || !strcmp(x->name, "__metadata__"))
            return sl_fail(SL_EINVAL, "%s: %s: tensor %d: bad name '%s'", fn, path, i,
                           x->name ? x->name : "(null)");
        if (x->dtype != SL_T_F32 && x->dtype != SL_T_I64)
            return sl_fail(SL_EINVAL, "%s: %s: tensor %s: unknown dtype %d", fn, path, x->name,
                           (int)x->dtype);
        if (x->ndim < 0 || x->ndim > 4)
            return sl_fail(SL_EINVAL, "%s: %s: tensor %s: ndim %d (0..4)", fn, path, x->name,
                           x->ndim);
        uint64_t n = tag_size(x->dtype);
        for (int d = 0; d < x->ndim; d++) {
            if (x->shape[d] < 0 || x->shape[d] > ((int64_t)1 << 40))
                return sl_fail(SL_EINVAL, "%s: %s: tensor %s: dimension %d is %lld", fn, path,
                               x->name, d, (long long)x->shape[d]);
            n *= (uint64_t)x->shape[d];
            if (n > ((uint64_t)1 << 50))
                return sl_fail(SL_EINVAL, "%s: %s: tensor %s: too large", fn, path, x->name);
        }
        if (n && !x->data)
            return sl_fail(SL_EINVAL, "%s: %s: tensor %s: no data", fn, path, x->name);
    }
    for (int i = 0; i < meta_count; i++)
        if (!meta_kv[2 * i] || !meta_kv[2 * i + 1])
            return sl_fail(SL_EINVAL, "%s: %s: metadata %d: NULL key or value", fn, path, i);
    size_t most = (size_t)(count > meta_count ? count : meta_count);
    const char **names = malloc((most ? most : 1) * sizeof *names), *dup;
    if (!names)
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
    for (int i = 0; i < count; i++)
        names[i] = t[i].name;
    if ((dup = first_dup(names, (size_t)count))) {
        free(names);
        return sl_fail(SL_EINVAL, "%s: %s: tensor %s: name given twice", fn, path, dup);
    }
    for (int i = 0; i < meta_count; i++)
        names[i] = meta_kv[2 * i];
    if ((dup = first_dup(names, (size_t)meta_count))) {
        free(names);
        return sl_fail(SL_EINVAL, "%s: %s: metadata key %s given twice", fn, path, dup);
    }
    free(names);
    return SL_OK;
}

/* The header JSON, compact, "__metadata__" first (as the reference writes
 * it), padded with spaces to a multiple of 8 bytes. malloc'd; NULL when out
 * of memory. */
static char *st_header(const sl_st_tensor *t, int count, const uint64_t *off,
                       const char *const *meta_kv, int meta_count, size_t *len)
{
    cJSON *root = cJSON_CreateObject();
    char *text = NULL, *out = NULL;

    if (!root)
        return NULL;
    if (meta_count > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        if (!m)
            goto done;
        for (int i = 0; i < meta_count; i++)
            if (!cJSON_AddStringToObject(m, meta_kv[2 * i], meta_kv[2 * i + 1]))
                goto done;
    }
    for (int i = 0; i < count; i++) {
        const sl_st_tensor *x = &t[i];
        cJSON *e = cJSON_AddObjectToObject(root, x->name);
        cJSON *shape = e ? cJSON_CreateArray() : NULL;
        if (!shape)
            goto done;
        cJSON_AddItemToObject(e, "dtype", cJSON_CreateString(tag_name(x->dtype)));
        cJSON_AddItemToObject(e, "shape", shape);
        for (int d = 0; d < x->ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)x->shape[d]));
        double offs[2] = {(double)off[i], (double)(off[i] + tensor_bytes(x))};
        cJSON_AddItemToObject(e, "data_offsets", cJSON_CreateDoubleArray(offs, 2));
        /* cJSON's add functions fail silently: check the entry is whole. */
        if (cJSON_GetArraySize(e) != 3 || cJSON_GetArraySize(shape) != x->ndim ||
            cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(e, "data_offsets")) != 2)
            goto done;
    }
    text = cJSON_PrintUnformatted(root);
    if (!text)
        goto done;
    size_t n = strlen(text), padded = (n + 7) / 8 * 8;
    out = malloc(padded + 1);
    if (out) {
        memcpy(out, text, n);
        memset(out + n, ' ', padded - n);
        out[padded] = '\0';
        *len = padded;
    }
done:
    cJSON_free(text);
    cJSON_Delete(root);
    return out;
}

int sl_safetensors_write(const char *path, const sl_st_tensor *t, int count,
                         const char *const *meta_kv, int meta_count)
{
    static const char fn[] = "sl_safetensors_write";
    uint64_t *off = NULL;
    size_t hlen = 0;
    char *header = NULL;
    sl_atomic_file af;
    int rc;

    rc = st_check_args(path, t, count, meta_kv, meta_count);
    if (rc)
        return rc;
    off = malloc((size_t)(count ? count : 1) * sizeof *off);
    if (off) {
        st_layout(t, count, off);
        header = st_header(t, count, off, meta_kv, meta_count, &hlen);
    }
    if (!header) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
        goto out;
    }
    /* "path.tmp", fsync'ed and renamed over path (common/fileio.h). */
    if ((rc = sl_atomic_open(&af, path, fn)))
        goto out;
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    rc = sl_atomic_write(&af, le, 8);
    if (!rc)
        rc = sl_atomic_write(&af, header, hlen);
    /* Data in st_layout's order; x86/ARM hosts are little-endian like the
     * file. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; !rc && i < count; i++)
            if ((t[i].dtype == SL_T_I64) == (pass == 0))
                rc = sl_atomic_write(&af, t[i].data, (size_t)tensor_bytes(&t[i]));
    if (rc)
        sl_atomic_abort(&af);
    else
        rc = sl_atomic_commit(&af, 1);
out:
    free(header);
    free(off);
    return rc;
}

/* ------------------------------------------------------------------- read */

/* Strict UTF-8 (RFC 3629: no overlongs, no surrogates, <= U+10FFFF), as
 * the reference's std::str::from_utf8. */
static int utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            k = 1, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            k = 2, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            k = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (n - i <= k)
            return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* A JSON number that is a non-negative integer below limit (common/json.h
 * checks it before it is converted). */
static int json_uint(const cJSON *v, int64_t limit, uint64_t *out)
{
    int64_t x;
    if (!sl_json_is_int(v, 0, limit - 1, &x))
        return 0;
    *out = (uint64_t)x;
    return 1;
}

/* Parse one tensor entry of the header into e. NULL on success, else what
 * is wrong. */
static const char *st_parse_entry(const cJSON *item, uint64_t buf_len, st_entry *e)
{
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    const cJSON *v;
    uint64_t bits, numel = 1;

    if (!cJSON_IsObject(item))
        return "entry is not an object";
    if (!cJSON_IsString(dt))
        return "dtype missing or not a string";
    e->dtype = -1;
    for (int i = 0; i < ST_NDTYPES; i++)
        if (!strcmp(dt->valuestring, st_dtypes[i].name))
            e->dtype = i;
    if (e->dtype < 0)
        return "unknown dtype";
    if (!cJSON_IsArray(shape))
        return "shape missing or not an array";
    e->ndim = cJSON_GetArraySize(shape);
    if (e->ndim > ST_MAX_DIMS)
        return "more than 8 dimensions";
    int d = 0;
    cJSON_ArrayForEach(v, shape) {
        uint64_t x;
        /* 2^40 per dimension keeps the product's overflow check simple. */
        if (!json_uint(v, (int64_t)1 << 40, &x))
            return "shape entry not a non-negative integer";
        e->shape[d++] = (int64_t)x;
        /* numel * 64 bits must not wrap below. */
        if (numel && x > UINT64_MAX / 64 / numel)
            return "shape too large";
        numel *= x;
    }
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !json_uint(cJSON_GetArrayItem(offs, 0), ST_MAX_OFFSET, &e->begin) ||
        !json_uint(cJSON_GetArrayItem(offs, 1), ST_MAX_OFFSET, &e->end))
        return "data_offsets missing or not two non-negative integers";
    if (e->begin > e->end)
        return "data_offsets begin after end";
    if (e->end > buf_len)
        return "data_offsets past the end of the file";
    bits = st_dtypes[e->dtype].bits;
    if (numel * bits != (e->end - e->begin) * 8)
        return "shape and dtype do not match the data_offsets' byte count";
    return NULL;
}

static int cmp_begin(const void *a, const void *b)
{
    const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* f->by_name sorted by the names of f->t (qsort_r: the entries are the
 * comparison's context). */
static int cmp_index_name(const void *a, const void *b, void *ctx)
{
    const st_entry *t = ctx;
    return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

static void st_sort_by_name(sl_safetensors *f)
{
    qsort_r(f->by_name, (size_t)f->count, sizeof *f->by_name, cmp_index_name, f->t);
}

/* Everything after the file is mapped: header, JSON, entries, overlaps. */
static int st_validate(sl_safetensors *f)
{
    static const char fn[] = "sl_safetensors_open";
    const char *p = f->path;
    uint64_t n = 0;

    if (f->size < 8)
        return sl_fail(SL_ECORRUPT, "%s: %s: truncated: %zu bytes, less than the 8-byte "
                       "header length", fn, p, f->size);
    for (int i = 7; i >= 0; i--)
        n = n << 8 | f->map[i];
    if (n > ST_MAX_HEADER || n > f->size - 8)
        return sl_fail(SL_ECORRUPT, "%s: %s: header length %llu does not fit in the %zu-byte "
                       "file (limit %llu)", fn, p, (unsigned long long)n, f->size,
                       (unsigned long long)ST_MAX_HEADER);
    if (n < 2 || f->map[8] != '{')
        return sl_fail(SL_ECORRUPT, "%s: %s: header is not a JSON object", fn, p);
    const char *h = (const char *)f->map + 8;
    if (!utf8_valid((const uint8_t *)h, (size_t)n))
        return sl_fail(SL_ECORRUPT, "%s: %s: header is not valid UTF-8", fn, p);
    const char *end = NULL;
    f->json = cJSON_ParseWithLengthOpts(h, (size_t)n, &end, 0);
    if (!f->json || !cJSON_IsObject(f->json))
        return sl_fail(SL_ECORRUPT, "%s: %s: header JSON does not parse (near byte %lld)", fn,
                       p, (long long)(end ? end - h : 0) + 8);
    /* Only the reference's space padding (or other white space) may follow. */
    for (; end < h + n; end++)
        if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')
            return sl_fail(SL_ECORRUPT, "%s: %s: bytes after the header JSON", fn, p);
    f->buf = f->map + 8 + n;
    f->buf_len = f->size - 8 - n;

    int items = cJSON_GetArraySize(f->json);
    f->t = calloc((size_t)(items ? items : 1), sizeof *f->t);
    if (!f->t)
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, p);
    const cJSON *item;
    cJSON_ArrayForEach(item, f->json) {
        if (!item->string)
            return sl_fail(SL_ECORRUPT, "%s: %s: header member without a name", fn, p);
        if (!strcmp(item->string, "__metadata__")) {
            const cJSON *kv;
            if (f->meta || !cJSON_IsObject(item))
                return sl_fail(SL_ECORRUPT, "%s: %s: __metadata__ repeated or not an object",
                               fn, p);
            cJSON_ArrayForEach(kv, item) if (!cJSON_IsString(kv))
                return sl_fail(SL_ECORRUPT, "%s: %s: __metadata__ %s: value is not a string",
                               fn, p, kv->string ? kv->string : "?");
            f->meta = item;
            continue;
        }
        st_entry *e = &f->t[f->count];
        e->name = item->string;
        const char *what = st_parse_entry(item, f->buf_len, e);
        if (what)
            return sl_fail(SL_ECORRUPT, "%s: %s: tensor %s: %s", fn, p, e->name, what);
        f->count++;
    }

    /* Names: each once (sorted: the lookup's order too). */
    if (!(f->by_name = malloc((size_t)(f->count ? f->count : 1) * sizeof *f->by_name)))
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, p);
    for (int i = 0; i < f->count; i++)
        f->by_name[i] = i;
    st_sort_by_name(f);
    for (int i = 1; i < f->count; i++)
        if (!strcmp(f->t[f->by_name[i - 1]].name, f->t[f->by_name[i]].name))
            return sl_fail(SL_ECORRUPT, "%s: %s: tensor %s: named twice", fn, p,
                           f->t[f->by_name[i]].name);

    /* Overlaps: sort views by begin; each must start at or after the end of
     * the one before (empty tensors overlap nothing). */
    if (f->count > 1) {
        st_entry **v = malloc((size_t)f->count * sizeof *v);
        if (!v)
            return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, p);
        for (int i = 0; i < f->count; i++)
            v[i] = &f->t[i];
        qsort(v, (size_t)f->count, sizeof *v, cmp_begin);
        const st_entry *prev = NULL;
        for (int i = 0; i < f->count; i++) {
            if (v[i]->begin == v[i]->end)
                continue;
            if (prev && v[i]->begin < prev->end) {
                int rc = sl_fail(SL_ECORRUPT, "%s: %s: tensor %s: data_offsets overlap tensor %s",
                                 fn, p, v[i]->name, prev->name);
                free(v);
                return rc;
            }
            prev = v[i];
        }
        free(v);
    }
    return SL_OK;
}

int sl_safetensors_open(const char *path, sl_safetensors **out)
{
    static const char fn[] = "sl_safetensors_open";
    struct stat st;
    int fd = -1, rc;

    *out = NULL;
    if (!path || !*path)
        return sl_fail(SL_EINVAL, "%s: empty path", fn);
    sl_safetensors *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = sl_fail(errno == ENOENT ? SL_ENOENT : SL_EIO, "%s: %s: open: %s", fn, path,
                     strerror(errno));
        goto fail;
    }
    if (fstat(fd, &st) != 0) {
        rc = sl_fail(SL_EIO, "%s: %s: fstat: %s", fn, path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = sl_fail(SL_EINVAL, "%s: %s: not a regular file", fn, path);
        goto fail;
    }
    f->size = (size_t)st.st_size;
    /* A mapping: tensors are views, pages are read when first touched.
     * Files are replaced by rename, never rewritten in place, so the
     * mapping cannot shrink under us. */
    if (f->size >= 8) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            rc = sl_fail(SL_EIO, "%s: %s: mmap: %s", fn, path, strerror(errno));
            goto fail;
        }
        f->map = m;
    }
    close(fd);
    fd = -1;
    rc = st_validate(f);
    if (rc)
        goto fail;
    *out = f;
    return SL_OK;

fail:
    if (fd >= 0)
        close(fd);
    sl_safetensors_close(f);
    return rc;
}

void sl_safetensors_close(sl_safetensors *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->size);
    cJSON_Delete(f->json);
    free(f->t);
    free(f->by_name);
    free(f->path);
    free(f);
}

int sl_safetensors_count(const sl_safetensors *f)
{
    return f->count;
}

int sl_safetensors_at(const sl_safetensors *f, int i, sl_st_tensor *out)
{
    static const char fn[] = "sl_safetensors_at";
    if (i < 0 || i >= f->count)
        return sl_fail(SL_EINVAL, "%s: %s: index %d of %d tensors", fn, f->path, i, f->count);
    const st_entry *e = &f->t[i];
    const char *dt = st_dtypes[e->dtype].name;
    if (strcmp(dt, "F32") && strcmp(dt, "I64"))
        return sl_fail(SL_ENOTSUP, "%s: %s: tensor %s: dtype %s (only F32 and I64 are read)",
                       fn, f->path, e->name, dt);
    if (e->ndim > 4)
        return sl_fail(SL_ENOTSUP, "%s: %s: tensor %s: %d dimensions (at most 4 are read)", fn,
                       f->path, e->name, e->ndim);
    memset(out, 0, sizeof *out);
    out->name = e->name;
    out->dtype = strcmp(dt, "F32") ? SL_T_I64 : SL_T_F32;
    out->ndim = e->ndim;
    for (int d = 0; d < e->ndim; d++)
        out->shape[d] = e->shape[d];
    out->data = f->buf + e->begin;
    return SL_OK;
}

int sl_safetensors_find(const sl_safetensors *f, const char *name, sl_st_tensor *out)
{
    int lo = 0, hi = f->count; /* binary search of by_name */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(f->t[f->by_name[mid]].name, name);
        if (c == 0)
            return sl_safetensors_at(f, f->by_name[mid], out);
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return sl_fail(SL_ENOENT, "sl_safetensors_find: %s: tensor %s: not in the file", f->path,
                   name);
}

const char *sl_safetensors_meta(const sl_safetensors *f, const char *key)
{
    const cJSON *v = f->meta ? cJSON_GetObjectItemCaseSensitive(f->meta, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
