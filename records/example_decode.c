/*
 * records/example_decode.c - zero-copy reader of serialized tf.train.Example.
 *
 * Why by hand: the decoder runs once per sample on the input pipeline's hot
 * path. It must hand out views into the record buffer (the JPEG bytes stay
 * where the reader put them) and allocate nothing. protobuf-c would unpack
 * every message into heap copies (one malloc per feature, list and string)
 * and need generated code; the three messages involved are small enough to
 * walk directly.
 *
 * Wire format (https://protobuf.dev/programming-guides/encoding/): a message
 * is a sequence of fields, each a varint tag (field_number << 3 | wire_type)
 * then a body:
 *   0 VARINT  base-128 varint, at most 10 bytes (negative int64 take all 10)
 *   1 I64     8 bytes
 *   2 LEN     varint length, then that many bytes (strings, messages, packed)
 *   5 I32     4 bytes (float, little-endian)
 *   3/4 SGROUP/EGROUP are deprecated groups, 6/7 do not exist: rejected.
 *
 * Messages (tensorflow/core/example/{example,feature}.proto):
 *   Example  { Features features = 1; }
 *   Features { map<string, Feature> feature = 1; }   entries: { key = 1; value = 2; }
 *   Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
 *                           Int64List int64_list = 3; } }
 *   BytesList { repeated bytes value = 1; }
 *   FloatList { repeated float value = 1 [packed]; }   I32 each, or one LEN run
 *   Int64List { repeated int64 value = 1 [packed]; }   VARINT each, or one LEN run
 *
 * Protobuf semantics kept: unknown fields (and known field numbers with an
 * unexpected wire type, as protobuf's parsers treat them) are skipped at
 * every level; a repeated "features" field is merged, so features from all of
 * them are visited; a repeated map key means the last entry wins; a later
 * list field of another kind replaces an earlier one (oneof). Not kept: a
 * Feature whose list is split over two fields of the same kind, or a map
 * entry with two value fields, would need merging into one list, which a view
 * cannot express; TensorFlow never writes them, and they are SL_ENOTSUP
 * rather than silently half-read.
 *
 * Every length is checked against the end of its enclosing message, so a
 * corrupt record is SL_ECORRUPT naming the byte offset, never a read past it.
 */
#include "records.h"

#include <stdio.h>
#include <string.h>

/* Largest valid field number (2^29 - 1). */
#define PB_MAX_FIELD 0x1fffffffu

enum { PB_VARINT = 0, PB_I64 = 1, PB_LEN = 2, PB_SGROUP = 3, PB_EGROUP = 4, PB_I32 = 5 };

/* One field as parsed by pb_next. */
typedef struct pb_field {
    uint32_t num;
    unsigned wt;
    uint64_t varint;       /* PB_VARINT value */
    const uint8_t *body;   /* PB_LEN payload, PB_I32/PB_I64 bytes */
    size_t len;            /* PB_LEN payload length; 4 or 8 for I32/I64 */
} pb_field;

/* Read a varint at *p (< end), advancing *p. Returns 0, or -1 when it runs
 * past end or is longer than 10 bytes. Of the 10th byte only bit 0 (bit 63
 * of the value) counts; protobuf's own parsers drop the rest the same way. */
static int pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    const uint8_t *q = *p;
    uint64_t x = 0;
    for (unsigned i = 0; i < 10; i++) {
        if (q >= end)
            return -1;
        uint8_t byte = *q++;
        x |= i < 9 ? (uint64_t)(byte & 0x7f) << (7 * i) : (uint64_t)(byte & 1) << 63;
        if (!(byte & 0x80)) {
            *p = q;
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* Parse the field at *p (< end) and advance *p past it. base is where byte
 * offsets in messages count from. Errors: SL_ECORRUPT "bad protobuf @ byte N:
 * what" (no function prefix: callers add theirs). */
static int pb_next(const uint8_t *base, const uint8_t **p, const uint8_t *end, pb_field *f)
{
    const uint8_t *start = *p, *q = *p;
    uint64_t tag;

    if (pb_varint(&q, end, &tag))
        return sl_fail(SL_ECORRUPT, "bad protobuf @ byte %zu: truncated or overlong tag varint",
                       (size_t)(start - base));
    f->num = (uint32_t)(tag >> 3);
    f->wt = (unsigned)(tag & 7);
    if ((tag >> 3) == 0 || (tag >> 3) > PB_MAX_FIELD)
        return sl_fail(SL_ECORRUPT, "bad protobuf @ byte %zu: invalid field number %llu",
                       (size_t)(start - base), (unsigned long long)(tag >> 3));
    f->body = NULL;
    f->len = 0;
    f->varint = 0;
    switch (f->wt) {
    case PB_VARINT:
        if (pb_varint(&q, end, &f->varint))
            return sl_fail(SL_ECORRUPT, "bad protobuf @ byte %zu: truncated or overlong varint",
                           (size_t)(q - base));
        break;
    case PB_I64:
    case PB_I32:
        f->len = f->wt == PB_I64 ? 8 : 4;
        if ((size_t)(end - q) < f->len)
            return sl_fail(SL_ECORRUPT, "bad protobuf @ byte %zu: %zu-byte value past end of message",
                           (size_t)(q - base), f->len);
        f->body = q;
        q += f->len;
        break;
    case PB_LEN: {
        uint64_t n;
        const uint8_t *lenpos = q;
        if (pb_varint(&q, end, &n))
            return sl_fail(SL_ECORRUPT, "bad protobuf @ byte %zu: truncated or overlong length",
                           (size_t)(lenpos - base));
        if (n > (uint64_t)(end - q))
            return sl_fail(SL_ECORRUPT, "bad protobuf @ byte %zu: length %llu past end of message",
                           (size_t)(lenpos - base), (unsigned long long)n);
        f->body = q;
        f->len = (size_t)n;
        q += n;
        break;
    }
    case PB_SGROUP:
    case PB_EGROUP:
        return sl_fail(SL_ECORRUPT, "bad protobuf @ byte %zu: group wire type %u not supported",
                       (size_t)(start - base), f->wt);
    default:
        return sl_fail(SL_ECORRUPT, "bad protobuf @ byte %zu: invalid wire type %u",
                       (size_t)(start - base), f->wt);
    }
    *p = q;
    return SL_OK;
}

/* ------------------------------------------------------------ structure */

/* Parse one Features.feature map entry (entry[0..len)) into *v. */
static int parse_entry(const uint8_t *base, const uint8_t *entry, size_t len, sl_feature_view *v)
{
    const uint8_t *p = entry, *end = entry + len;
    const uint8_t *feat = NULL;
    size_t feat_len = 0;
    int have_value = 0;
    pb_field f;
    int rc;

    v->name = "";
    v->name_len = 0;
    v->kind = SL_FEATURE_NONE;
    v->list = NULL;
    v->list_len = 0;
    while (p < end) {
        if ((rc = pb_next(base, &p, end, &f)))
            return rc;
        if (f.wt != PB_LEN)
            continue;
        if (f.num == 1) {
            v->name = (const char *)f.body;
            v->name_len = f.len;
        } else if (f.num == 2) {
            if (have_value)
                return sl_fail(SL_ENOTSUP, "map entry @ byte %zu: two value fields (merge not supported)",
                               (size_t)(entry - base));
            have_value = 1;
            feat = f.body;
            feat_len = f.len;
        }
    }
    if (!feat)
        return SL_OK; /* a Feature with no kind set */
    p = feat;
    end = feat + feat_len;
    while (p < end) {
        if ((rc = pb_next(base, &p, end, &f)))
            return rc;
        if (f.wt != PB_LEN || f.num < SL_FEATURE_BYTES || f.num > SL_FEATURE_INT64)
            continue;
        if ((sl_feature_kind)f.num == v->kind)
            return sl_fail(SL_ENOTSUP, "feature '%.*s' @ byte %zu: list split over two fields "
                           "(merge not supported)", (int)v->name_len, v->name, (size_t)(feat - base));
        v->kind = (sl_feature_kind)f.num;
        v->list = f.body;
        v->list_len = f.len;
    }
    if (!v->list)
        v->list = feat; /* empty list: a non-NULL view of 0 bytes */
    return SL_OK;
}

/* Walk every feature; the core of foreach, find and the image decoder.
 * Errors of the walk come back without a function prefix; *from_cb is set
 * when the value is a callback's own. */
static int walk(const uint8_t *rec, size_t len, int (*fn)(const sl_feature_view *, void *),
                void *arg, int *from_cb)
{
    const uint8_t *p = rec, *end;
    pb_field f, g;
    sl_feature_view v;
    int rc;

    *from_cb = 0;
    if (len == 0)
        return SL_OK; /* the empty message: no features */
    if (!rec)
        return sl_fail(SL_EINVAL, "NULL record");
    end = rec + len;
    while (p < end) {
        if ((rc = pb_next(rec, &p, end, &f)))
            return rc;
        if (f.num != 1 || f.wt != PB_LEN)
            continue; /* unknown Example field */
        const uint8_t *q = f.body, *fend = f.body + f.len;
        while (q < fend) {
            if ((rc = pb_next(rec, &q, fend, &g)))
                return rc;
            if (g.num != 1 || g.wt != PB_LEN)
                continue; /* unknown Features field */
            if ((rc = parse_entry(rec, g.body, g.len, &v)))
                return rc;
            if ((rc = fn(&v, arg))) {
                *from_cb = 1;
                return rc;
            }
        }
    }
    return SL_OK;
}

int sl_example_foreach(const uint8_t *rec, size_t len,
                       int (*fn)(const sl_feature_view *f, void *arg), void *arg)
{
    int rc, from_cb;
    if (!fn)
        return sl_fail(SL_EINVAL, "sl_example_foreach: NULL callback");
    rc = walk(rec, len, fn, arg, &from_cb);
    if (rc && !from_cb)
        return sl_fail(rc, "sl_example_foreach: %s", sl_errmsg());
    return rc; /* SL_OK, or the callback's value with its message untouched */
}

typedef struct find_ctx {
    const char *name;
    size_t name_len;
    sl_feature_view found;
    int hit;
} find_ctx;

static int find_cb(const sl_feature_view *f, void *arg)
{
    find_ctx *c = arg;
    if (f->name_len == c->name_len && memcmp(f->name, c->name, c->name_len) == 0) {
        c->found = *f; /* keep walking: the last occurrence wins */
        c->hit = 1;
    }
    return 0;
}

int sl_example_find(const uint8_t *rec, size_t len, const char *name, sl_feature_view *out)
{
    find_ctx c = {.name = name, .name_len = name ? strlen(name) : 0};
    int rc, from_cb;

    if (!name || !out)
        return sl_fail(SL_EINVAL, "sl_example_find: NULL argument");
    if ((rc = walk(rec, len, find_cb, &c, &from_cb)))
        return sl_fail(rc, "sl_example_find: %s", sl_errmsg());
    if (!c.hit)
        return sl_fail(SL_ENOENT, "sl_example_find: no feature '%s'", name);
    *out = c.found;
    return SL_OK;
}

/* ---------------------------------------------------------------- lists */

typedef union list_value {
    int64_t i;
    float f;
    struct {
        const uint8_t *p;
        size_t len;
    } b;
} list_value;

static float le_float(const uint8_t *b)
{
    uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Walk the values of a list body p[0..len) of the given kind in wire order.
 * want == SIZE_MAX: count them into *n. Otherwise fill *v with value number
 * want and return SL_OK, or SL_ENOENT (no message) when there are fewer; *n
 * gets the count seen. base: where error offsets count from. */
static int list_walk(sl_feature_kind kind, const uint8_t *base, const uint8_t *p, size_t len,
                     size_t want, size_t *n, list_value *v)
{
    const uint8_t *end = p + len;
    size_t count = 0;
    pb_field f;
    int rc;

    while (p < end) {
        if ((rc = pb_next(base, &p, end, &f)))
            return rc;
        if (f.num != 1)
            continue;
        if (kind == SL_FEATURE_BYTES && f.wt == PB_LEN) {
            if (count == want) {
                v->b.p = f.body;
                v->b.len = f.len;
                return SL_OK;
            }
            count++;
        } else if (kind == SL_FEATURE_FLOAT && f.wt == PB_I32) {
            if (count == want) {
                v->f = le_float(f.body);
                return SL_OK;
            }
            count++;
        } else if (kind == SL_FEATURE_FLOAT && f.wt == PB_LEN) {
            if (f.len % 4)
                return sl_fail(SL_ECORRUPT, "bad protobuf @ byte %zu: packed float run of %zu bytes "
                               "is not a multiple of 4", (size_t)(f.body - base), f.len);
            size_t k = f.len / 4;
            if (want != SIZE_MAX && want - count < k) {
                v->f = le_float(f.body + 4 * (want - count));
                return SL_OK;
            }
            count += k;
        } else if (kind == SL_FEATURE_INT64 && f.wt == PB_VARINT) {
            if (count == want) {
                v->i = (int64_t)f.varint;
                return SL_OK;
            }
            count++;
        } else if (kind == SL_FEATURE_INT64 && f.wt == PB_LEN) {
            const uint8_t *q = f.body, *qend = f.body + f.len;
            while (q < qend) {
                uint64_t x;
                const uint8_t *at = q;
                if (pb_varint(&q, qend, &x))
                    return sl_fail(SL_ECORRUPT, "bad protobuf @ byte %zu: truncated or overlong "
                                   "varint in packed int64 run", (size_t)(at - base));
                if (count == want) {
                    v->i = (int64_t)x;
                    return SL_OK;
                }
                count++;
            }
        }
        /* anything else: field 1 with a wire type this kind does not use, skipped */
    }
    *n = count;
    return want == SIZE_MAX ? SL_OK : SL_ENOENT;
}

static const char *kind_name(sl_feature_kind k)
{
    switch (k) {
    case SL_FEATURE_BYTES: return "bytes";
    case SL_FEATURE_FLOAT: return "float";
    case SL_FEATURE_INT64: return "int64";
    default: return "empty";
    }
}

int sl_feature_count(const sl_feature_view *f, size_t *n)
{
    int rc;
    if (!f || !n)
        return sl_fail(SL_EINVAL, "sl_feature_count: NULL argument");
    if (f->kind == SL_FEATURE_NONE) {
        *n = 0;
        return SL_OK;
    }
    rc = list_walk(f->kind, f->list, f->list, f->list_len, SIZE_MAX, n, NULL);
    if (rc)
        return sl_fail(rc, "sl_feature_count: feature '%.*s': %s list: %s", (int)f->name_len,
                       f->name, kind_name(f->kind), sl_errmsg());
    return SL_OK;
}

/* Shared body of the three typed getters. */
static int feature_get(const char *who, const sl_feature_view *f, sl_feature_kind kind, size_t i,
                       list_value *v)
{
    size_t n = 0;
    int rc;
    if (!f)
        return sl_fail(SL_EINVAL, "%s: NULL feature", who);
    if (f->kind != kind)
        return sl_fail(SL_EINVAL, "%s: feature '%.*s' is %s, not %s", who, (int)f->name_len,
                       f->name, kind_name(f->kind), kind_name(kind));
    rc = list_walk(kind, f->list, f->list, f->list_len, i, &n, v);
    if (rc == SL_ENOENT)
        return sl_fail(rc, "%s: feature '%.*s': index %zu out of range (%zu values)", who,
                       (int)f->name_len, f->name, i, n);
    if (rc)
        return sl_fail(rc, "%s: feature '%.*s': %s list: %s", who, (int)f->name_len, f->name,
                       kind_name(kind), sl_errmsg());
    return SL_OK;
}

int sl_feature_int64(const sl_feature_view *f, size_t i, int64_t *out)
{
    list_value v = {0};
    int rc = feature_get("sl_feature_int64", f, SL_FEATURE_INT64, i, &v);
    if (rc == SL_OK)
        *out = v.i;
    return rc;
}

int sl_feature_float(const sl_feature_view *f, size_t i, float *out)
{
    list_value v = {0};
    int rc = feature_get("sl_feature_float", f, SL_FEATURE_FLOAT, i, &v);
    if (rc == SL_OK)
        *out = v.f;
    return rc;
}

int sl_feature_bytes(const sl_feature_view *f, size_t i, const uint8_t **data, size_t *len)
{
    list_value v = {0};
    int rc = feature_get("sl_feature_bytes", f, SL_FEATURE_BYTES, i, &v);
    if (rc == SL_OK) {
        *data = v.b.p;
        *len = v.b.len;
    }
    return rc;
}

/* --------------------------------------------------------- image records */

/* The features sl_image_example_decode looks for, by slot. TensorFlow
 * Datasets' Examples name a feature by its key in the dataset's
 * FeaturesDict: an image classification set's encoded image is "image",
 * its ClassLabel "label" (int64), and many have "file_name"
 * (records/tfds.c has the rest of its layout); those stand in for the
 * ImageNet keys when a record lacks them. */
enum {
    IMG_ENCODED, IMG_LABEL, IMG_HEIGHT, IMG_WIDTH, IMG_FORMAT, IMG_FILENAME, IMG_TEXT,
    IMG_TFDS_IMAGE, IMG_TFDS_LABEL, IMG_TFDS_FILENAME, IMG_N
};

static const struct {
    const char *name;
    size_t len;
    sl_feature_kind kind;
} img_features[IMG_N] = {
    [IMG_ENCODED] = {"image/encoded", 13, SL_FEATURE_BYTES},
    [IMG_LABEL] = {"image/class/label", 17, SL_FEATURE_INT64},
    [IMG_HEIGHT] = {"image/height", 12, SL_FEATURE_INT64},
    [IMG_WIDTH] = {"image/width", 11, SL_FEATURE_INT64},
    [IMG_FORMAT] = {"image/format", 12, SL_FEATURE_BYTES},
    [IMG_FILENAME] = {"image/filename", 14, SL_FEATURE_BYTES},
    [IMG_TEXT] = {"image/class/text", 16, SL_FEATURE_BYTES},
    [IMG_TFDS_IMAGE] = {"image", 5, SL_FEATURE_BYTES},
    [IMG_TFDS_LABEL] = {"label", 5, SL_FEATURE_INT64},
    [IMG_TFDS_FILENAME] = {"file_name", 9, SL_FEATURE_BYTES},
};

/* The TFDS slot standing in for slot k, or -1. */
static int tfds_alt(int k)
{
    return k == IMG_ENCODED ? IMG_TFDS_IMAGE : k == IMG_LABEL ? IMG_TFDS_LABEL
                                             : k == IMG_FILENAME ? IMG_TFDS_FILENAME : -1;
}

typedef struct img_ctx {
    sl_feature_view v[IMG_N];
    int hit[IMG_N];
} img_ctx;

static int img_cb(const sl_feature_view *f, void *arg)
{
    img_ctx *c = arg;
    /* Every wanted name starts with "image/"; most foreign ones (bbox, synset)
     * do too, so compare lengths first. */
    for (int k = 0; k < IMG_N; k++) {
        if (f->name_len == img_features[k].len &&
            memcmp(f->name, img_features[k].name, f->name_len) == 0) {
            c->v[k] = *f;
            c->hit[k] = 1;
            break;
        }
    }
    return 0;
}

/* Value 0 of feature slot k into *v; SL_ENOENT (no message) when the list is
 * empty. A feature of the wrong kind is SL_ECORRUPT. */
static int img_first(const uint8_t *rec, const img_ctx *c, int k, list_value *v)
{
    const sl_feature_view *f = &c->v[k];
    size_t n;
    if (f->kind != img_features[k].kind)
        return sl_fail(SL_ECORRUPT, "sl_image_example_decode: feature %s is %s, want %s",
                       img_features[k].name, kind_name(f->kind), kind_name(img_features[k].kind));
    int rc = list_walk(f->kind, rec, f->list, f->list_len, 0, &n, v);
    if (rc && rc != SL_ENOENT)
        return sl_fail(rc, "sl_image_example_decode: feature %s: %s", img_features[k].name,
                       sl_errmsg());
    return rc;
}

/* The record's feature names, "a, b, c", for the message of a record that
 * lacks one sluice needs (a TensorFlow Datasets record: "image, label"). */
typedef struct names_ctx {
    char buf[200];
    size_t k;
} names_ctx;

static int names_cb(const sl_feature_view *f, void *arg)
{
    names_ctx *c = arg;
    if (c->k + 8 >= sizeof c->buf)
        return 0;
    int w = snprintf(c->buf + c->k, sizeof c->buf - c->k, "%s%.*s", c->k ? ", " : "",
                     (int)(f->name_len < 64 ? f->name_len : 64), f->name);
    c->k += w > 0 ? (size_t)w : 0;
    if (c->k >= sizeof c->buf - 8) { /* cut: say so */
        c->k = sizeof c->buf - 8;
        memcpy(c->buf + c->k, ", ...", 6);
        c->k = sizeof c->buf;
    }
    return 0;
}

static int missing(const uint8_t *rec, size_t len, int k)
{
    names_ctx c = {.k = 0};
    int from_cb;
    c.buf[0] = '\0';
    if (walk(rec, len, names_cb, &c, &from_cb) || !c.buf[0])
        snprintf(c.buf, sizeof c.buf, "none");
    return sl_fail(SL_ECORRUPT, "sl_image_example_decode: missing feature %s (the record has: "
                   "%s; sluice reads the keys of TensorFlow's ImageNet Examples, image/encoded "
                   "and image/class/label, or TensorFlow Datasets' image and label)",
                   img_features[k].name, c.buf);
}

int sl_image_example_decode(const uint8_t *rec, size_t len, sl_image_example *out)
{
    img_ctx c;
    list_value v = {0};
    int rc, from_cb;

    if (!out)
        return sl_fail(SL_EINVAL, "sl_image_example_decode: NULL output");
    memset(&c, 0, sizeof c);
    memset(out, 0, sizeof *out);
    if ((rc = walk(rec, len, img_cb, &c, &from_cb)))
        return sl_fail(rc, "sl_image_example_decode: %s", sl_errmsg());

    for (int j = IMG_ENCODED; j <= IMG_LABEL; j++) {
        int k = !c.hit[j] && c.hit[tfds_alt(j)] ? tfds_alt(j) : j;
        if (!c.hit[k])
            return missing(rec, len, j);
        rc = img_first(rec, &c, k, &v);
        if (rc == SL_ENOENT)
            return sl_fail(SL_ECORRUPT, "sl_image_example_decode: feature %s has no value",
                           img_features[k].name);
        if (rc)
            return rc;
        if (j == IMG_ENCODED) {
            out->image = v.b.p;
            out->image_len = v.b.len;
        } else {
            out->label = v.i;
        }
    }
    for (int j = IMG_HEIGHT; j <= IMG_TEXT; j++) {
        int k = tfds_alt(j) >= 0 && !c.hit[j] && c.hit[tfds_alt(j)] ? tfds_alt(j) : j;
        if (!c.hit[k])
            continue;
        rc = img_first(rec, &c, k, &v);
        if (rc == SL_ENOENT)
            continue; /* an empty optional list reads as absent */
        if (rc)
            return rc;
        switch (j) {
        case IMG_HEIGHT: out->height = v.i; break;
        case IMG_WIDTH: out->width = v.i; break;
        case IMG_FORMAT:
            out->format = (const char *)v.b.p;
            out->format_len = v.b.len;
            break;
        case IMG_FILENAME:
            out->filename = (const char *)v.b.p;
            out->filename_len = v.b.len;
            break;
        default:
            out->text = (const char *)v.b.p;
            out->text_len = v.b.len;
            break;
        }
    }
    return SL_OK;
}
