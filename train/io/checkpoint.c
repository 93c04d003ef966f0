/*
 * train/io/checkpoint.c - checkpoints: PREFIX.safetensors (weights, buffers,
 * optimizer state) and PREFIX.json (the trainer's state), both written
 * atomically, the JSON last.
 *
 * PREFIX.safetensors holds the model's state dict under torchvision's names
 * and shapes, so `torchvision.models.resnet50().load_state_dict(
 * safetensors.torch.load_file(F), strict=False)` takes it (the optimizer.*
 * entries are extra keys PyTorch reports and ignores with strict=False):
 *   - f32 params and running stats, i64 num_batches_tracked as ndim-0 scalars;
 *   - conv weights: held (k, r, s, c) by the model (SL_TENSOR_OHWI,
 *     train/ops/ops.h says why), written (k, c, r, s) as torch's OIHW;
 *   - "optimizer.<param>.momentum_buffer" likewise, and "optimizer.step";
 *   - metadata sluice.arch / sluice.width / sluice.classes /
 *     sluice.image_size / sluice.format ("1").
 * PREFIX.json = {"format":1,"weights":"<basename>.safetensors","state":S}
 * with S the caller's JSON object text copied byte for byte (RNG states and
 * offsets may be 64-bit integers a double would round). A checkpoint exists
 * once its JSON does: a crash between the two renames leaves a weights file
 * that sl_checkpoint_latest ignores and the next save replaces.
 *
 * Loading validates every tensor (name, dtype, shape) before it copies any,
 * so a rejected file leaves the model and optimizer as they were.
 *
 * Threading: as train.h (one thread per model/optimizer); the functions
 * keep no global state.
 */
#include "train/train.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/fileio.h" /* sl_write_file_atomic, sl_str_cat, sl_path_join */

#define CKPT_FORMAT "1"
#define OPT_PREFIX "optimizer."

/* (k, r, s, c) -> (k, c, r, s); shape is torchvision's (k, c, r, s). */
static void ohwi_to_oihw(const float *src, float *dst, const int64_t *shape)
{
    int64_t k = shape[0], c = shape[1], r = shape[2], s = shape[3];
    for (int64_t o = 0; o < k; o++)
        for (int64_t y = 0; y < r; y++)
            for (int64_t x = 0; x < s; x++)
                for (int64_t i = 0; i < c; i++)
                    dst[((o * c + i) * r + y) * s + x] = src[((o * r + y) * s + x) * c + i];
}

/* (k, c, r, s) -> (k, r, s, c). */
static void oihw_to_ohwi(const float *src, float *dst, const int64_t *shape)
{
    int64_t k = shape[0], c = shape[1], r = shape[2], s = shape[3];
    for (int64_t o = 0; o < k; o++)
        for (int64_t i = 0; i < c; i++)
            for (int64_t y = 0; y < r; y++)
                for (int64_t x = 0; x < s; x++)
                    dst[((o * r + y) * s + x) * c + i] = src[((o * c + i) * r + y) * s + x];
}

static size_t info_bytes(const sl_tensor_info *t)
{
    return (size_t)t->numel * (t->dtype == SL_T_I64 ? 8 : 4);
}

static int is_ohwi(const sl_tensor_info *t)
{
    return (t->flags & SL_TENSOR_OHWI) && t->ndim == 4 && t->dtype == SL_T_F32;
}

/* "[a, b, c]" into buf. */
static const char *shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
    return buf;
}

/* ------------------------------------------------------------------- save */

/* The effective base width (0 means the arch's default). */
static int width_of(const sl_model_config *c)
{
    if (c->width > 0)
        return c->width;
    return c->arch == SL_ARCH_RESNET20 ? 16 : 64;
}

/* PREFIX.json's text: state is the caller's object text, verbatim. */
static char *ckpt_json_text(const char *weights_base, const char *state)
{
    cJSON *name = cJSON_CreateString(weights_base); /* escapes the name */
    char *qname = name ? cJSON_PrintUnformatted(name) : NULL;
    char *out = NULL;
    if (qname) {
        size_t n = strlen(qname) + strlen(state) + 64;
        out = malloc(n);
        if (out)
            snprintf(out, n, "{\"format\":1,\"weights\":%s,\"state\":%s}\n", qname, state);
    }
    cJSON_free(qname);
    cJSON_Delete(name);
    return out;
}

/* text is exactly one JSON object (white space around it allowed). */
static int is_json_object(const char *text)
{
    cJSON *j = cJSON_ParseWithOpts(text, NULL, 1);
    int ok = cJSON_IsObject(j);
    cJSON_Delete(j);
    return ok;
}

int sl_checkpoint_save(const char *prefix, sl_model *m, sl_sgd *o, int image_size,
                       const char *state_json)
{
    static const char fn[] = "sl_checkpoint_save";
    int nm = 0, no = 0, rc;
    sl_tensor_info *mt, *ot = NULL;
    sl_st_tensor *st = NULL;
    float **scratch = NULL;
    char *st_path = NULL, *json_path = NULL, *json = NULL;
    int n = 0;

    if (!prefix || !*prefix || !m)
        return sl_fail(SL_EINVAL, "%s: no prefix or model", fn);
    if (!state_json)
        state_json = "{}";
    /* The state becomes a member verbatim: it must be one JSON object. */
    if (!is_json_object(state_json))
        return sl_fail(SL_EINVAL, "%s: %s: state_json is not a JSON object", fn, prefix);
    mt = sl_model_tensors(m, &nm);
    if (o)
        ot = sl_sgd_tensors(o, &no);
    st = calloc((size_t)(nm + no + 1), sizeof *st);
    scratch = calloc((size_t)(nm + no + 1), sizeof *scratch);
    st_path = sl_str_cat(prefix, ".safetensors");
    json_path = sl_str_cat(prefix, ".json");
    if (!st || !scratch || !st_path || !json_path) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, prefix);
        goto out;
    }
    for (int i = 0; i < nm + no; i++) {
        const sl_tensor_info *t = i < nm ? &mt[i] : &ot[i - nm];
        sl_st_tensor *x = &st[n++];
        x->name = t->name;
        x->dtype = t->dtype;
        x->ndim = t->ndim;
        memcpy(x->shape, t->shape, sizeof x->shape);
        x->data = t->data;
        if (is_ohwi(t)) {
            scratch[i] = malloc(info_bytes(t) ? info_bytes(t) : 1);
            if (!scratch[i]) {
                rc = sl_fail(SL_ENOMEM, "%s: %s: tensor %s: out of memory", fn, prefix, t->name);
                goto out;
            }
            ohwi_to_oihw(t->data, scratch[i], t->shape);
            x->data = scratch[i];
        }
    }

    const sl_model_config *cfg = sl_model_config_of(m);
    char width[32], classes[32], isize[32];
    snprintf(width, sizeof width, "%d", width_of(cfg));
    snprintf(classes, sizeof classes, "%d", cfg->classes);
    snprintf(isize, sizeof isize, "%d", image_size);
    const char *meta[] = {
        "sluice.format", CKPT_FORMAT,      "sluice.arch",       sl_arch_name(cfg->arch),
        "sluice.width",  width,            "sluice.classes",    classes,
        "sluice.image_size", isize,
    };
    rc = sl_safetensors_write(st_path, st, n, meta, (int)(sizeof meta / sizeof meta[0]) / 2);
    if (rc) {
        rc = sl_fail(rc, "%s: %s", fn, sl_errmsg());
        goto out;
    }
    /* The JSON last: it is what makes the checkpoint exist. */
    const char *slash = strrchr(st_path, '/');
    json = ckpt_json_text(slash ? slash + 1 : st_path, state_json);
    if (!json) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, prefix);
        goto out;
    }
    rc = sl_write_file_atomic(json_path, json, strlen(json), 1, fn);

out:
    if (scratch)
        for (int i = 0; i < nm + no; i++)
            free(scratch[i]);
    free(scratch);
    free(st);
    free(json);
    free(json_path);
    free(st_path);
    return rc;
}

/* ------------------------------------------------------------------- load */

/* Check that the file's entry for t exists (*found) and matches in dtype
 * and shape. */
static int check_entry(const char *path, const sl_safetensors *f, const sl_tensor_info *t,
                       int *found)
{
    static const char fn[] = "sl_checkpoint_load";
    sl_st_tensor x;
    char a[128], b[128];

    *found = 0;
    int rc = sl_safetensors_find(f, t->name, &x);
    if (rc == SL_ENOENT)
        return SL_OK;
    if (rc)
        return sl_fail(rc, "%s: %s: tensor %s: %s", fn, path, t->name, sl_errmsg());
    if (x.dtype != t->dtype)
        return sl_fail(SL_EINVAL, "%s: %s: tensor %s: dtype %s in the file, %s in the model", fn,
                       path, t->name, x.dtype == SL_T_I64 ? "I64" : "F32",
                       t->dtype == SL_T_I64 ? "I64" : "F32");
    int same = x.ndim == t->ndim;
    for (int d = 0; same && d < x.ndim; d++)
        same = x.shape[d] == t->shape[d];
    if (!same)
        return sl_fail(SL_EINVAL, "%s: %s: tensor %s: shape %s in the file, %s in the model", fn,
                       path, t->name, shape_str(a, sizeof a, x.ndim, x.shape),
                       shape_str(b, sizeof b, t->ndim, t->shape));
    *found = 1;
    return SL_OK;
}

/* Copy the file's entry into t (validated by check_entry). The file's data
 * need not be aligned (other writers do not pad): memcpy, or transpose
 * from an aligned copy. */
static int copy_entry(const char *path, const sl_safetensors *f, sl_tensor_info *t)
{
    sl_st_tensor x;
    size_t bytes = info_bytes(t);
    int rc = sl_safetensors_find(f, t->name, &x);
    if (rc)
        return rc;
    if (!is_ohwi(t)) {
        memcpy(t->data, x.data, bytes);
        return SL_OK;
    }
    float *tmp = malloc(bytes ? bytes : 1);
    if (!tmp)
        return sl_fail(SL_ENOMEM, "sl_checkpoint_load: %s: tensor %s: out of memory", path,
                       t->name);
    memcpy(tmp, x.data, bytes);
    oihw_to_ohwi(tmp, t->data, t->shape);
    free(tmp);
    return SL_OK;
}

static int name_in(const char *name, const sl_tensor_info *t, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name))
            return 1;
    return 0;
}

int sl_checkpoint_load(const char *safetensors_path, sl_model *m, sl_sgd *o, int strict)
{
    static const char fn[] = "sl_checkpoint_load";
    const char *path = safetensors_path;
    sl_safetensors *f = NULL;
    sl_tensor_info *mt, *ot = NULL;
    int nm = 0, no = 0, found, rc;
    sl_st_tensor x;

    if (!path || !m)
        return sl_fail(SL_EINVAL, "%s: no path or model", fn);
    rc = sl_safetensors_open(path, &f);
    if (rc)
        return sl_fail(rc, "%s: %s", fn, sl_errmsg());
    mt = sl_model_tensors(m, &nm);
    /* The optimizer state is loaded when the file has it. */
    int load_opt = o && sl_safetensors_find(f, OPT_PREFIX "step", &x) == SL_OK;
    if (load_opt)
        ot = sl_sgd_tensors(o, &no);

    /* Pass 1: validate everything. */
    for (int i = 0; i < nm + no; i++) {
        const sl_tensor_info *t = i < nm ? &mt[i] : &ot[i - nm];
        rc = check_entry(path, f, t, &found);
        if (rc)
            goto out;
        if (!found && strict) {
            rc = sl_fail(SL_EINVAL, "%s: %s: tensor %s: missing from the file", fn, path,
                         t->name);
            goto out;
        }
    }
    if (strict) {
        for (int i = 0; i < sl_safetensors_count(f); i++) {
            rc = sl_safetensors_at(f, i, &x);
            if (rc) {
                rc = sl_fail(rc, "%s: %s", fn, sl_errmsg());
                goto out;
            }
            if (strncmp(x.name, OPT_PREFIX, strlen(OPT_PREFIX)) && !name_in(x.name, mt, nm)) {
                rc = sl_fail(SL_EINVAL, "%s: %s: tensor %s: not in the model", fn, path, x.name);
                goto out;
            }
        }
    }
    /* Pass 2: copy. */
    for (int i = 0; i < nm + no; i++) {
        sl_tensor_info *t = i < nm ? &mt[i] : &ot[i - nm];
        if (sl_safetensors_find(f, t->name, &x) != SL_OK)
            continue;
        rc = copy_entry(path, f, t);
        if (rc)
            goto out;
    }
    sl_clear_error(); /* the finds' SL_ENOENT messages are no error here */
    rc = SL_OK;
out:
    sl_safetensors_close(f);
    return rc;
}

/* ------------------------------------------------------------- metadata */

static int meta_int(const char *path, const sl_safetensors *f, const char *key, int *out)
{
    const char *v = sl_safetensors_meta(f, key);
    char *end;
    if (!v)
        return sl_fail(SL_EINVAL, "sl_checkpoint_model_config: %s: no %s metadata (not a sluice "
                       "checkpoint)", path, key);
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < 0 || x > 1 << 30)
        return sl_fail(SL_ECORRUPT, "sl_checkpoint_model_config: %s: metadata %s: bad value '%s'",
                       path, key, v);
    *out = (int)x;
    return SL_OK;
}

int sl_checkpoint_model_config(const char *safetensors_path, sl_model_config *cfg,
                               int *image_size)
{
    static const char fn[] = "sl_checkpoint_model_config";
    const char *path = safetensors_path;
    sl_model_config c = SL_MODEL_CONFIG_INIT;
    sl_safetensors *f = NULL;
    int isize = 0;

    if (!path || !cfg)
        return sl_fail(SL_EINVAL, "%s: no path or config", fn);
    int rc = sl_safetensors_open(path, &f);
    if (rc)
        return sl_fail(rc, "%s: %s", fn, sl_errmsg());
    const char *arch = sl_safetensors_meta(f, "sluice.arch");
    if (!arch) {
        rc = sl_fail(SL_EINVAL, "%s: %s: no sluice.arch metadata (not a sluice checkpoint)", fn,
                     path);
        goto out;
    }
    rc = sl_arch_parse(arch, &c.arch);
    if (rc) {
        rc = sl_fail(SL_ECORRUPT, "%s: %s: metadata sluice.arch: %s", fn, path, sl_errmsg());
        goto out;
    }
    rc = meta_int(path, f, "sluice.width", &c.width);
    if (!rc)
        rc = meta_int(path, f, "sluice.classes", &c.classes);
    if (!rc && sl_safetensors_meta(f, "sluice.image_size"))
        rc = meta_int(path, f, "sluice.image_size", &isize);
    if (rc)
        goto out;
    if (c.classes < 1) {
        rc = sl_fail(SL_ECORRUPT, "%s: %s: metadata sluice.classes: %d", fn, path, c.classes);
        goto out;
    }
    *cfg = c;
    if (image_size)
        *image_size = isize;
out:
    sl_safetensors_close(f);
    return rc;
}

/* ----------------------------------------------------------- directories */

/* "ckpt-<digits>.json" -> the step; 0 when the name is something else. */
static int ckpt_step(const char *name, unsigned long long *step)
{
    size_t n = strlen(name);
    if (strncmp(name, "ckpt-", 5) || n <= 5 + 5 || strcmp(name + n - 5, ".json"))
        return 0;
    unsigned long long v = 0;
    for (size_t i = 5; i < n - 5; i++) {
        if (name[i] < '0' || name[i] > '9' || v > (~0ULL - 9) / 10)
            return 0;
        v = v * 10 + (unsigned long long)(name[i] - '0');
    }
    *step = v;
    return 1;
}

int sl_checkpoint_latest(const char *dir, char **prefix)
{
    static const char fn[] = "sl_checkpoint_latest";
    DIR *d;
    struct dirent *de;
    char *best = NULL;
    unsigned long long best_step = 0;
    int rc = SL_OK;

    *prefix = NULL;
    if (!dir || !*dir)
        return sl_fail(SL_EINVAL, "%s: empty directory name", fn);
    d = opendir(dir);
    if (!d)
        return sl_fail(errno == ENOENT ? SL_ENOENT : SL_EIO, "%s: %s: %s", fn, dir,
                       strerror(errno));
    while ((de = readdir(d))) {
        unsigned long long step;
        struct stat st;
        if (!ckpt_step(de->d_name, &step) || (best && step <= best_step))
            continue;
        /* "DIR/ckpt-N" and its weights file, which must exist too. */
        char *p = sl_path_join(dir, de->d_name);
        char *w = NULL;
        if (p) {
            p[strlen(p) - 5] = '\0';
            w = sl_str_cat(p, ".safetensors");
        }
        if (!p || !w) {
            free(p);
            rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, dir);
            break;
        }
        int whole = stat(w, &st) == 0 && S_ISREG(st.st_mode);
        free(w);
        if (!whole) {
            free(p);
            continue;
        }
        free(best);
        best = p;
        best_step = step;
    }
    closedir(d);
    if (rc) {
        free(best);
        return rc;
    }
    if (!best)
        return sl_fail(SL_ENOENT, "%s: %s: no complete checkpoint (ckpt-N.json with its "
                       ".safetensors)", fn, dir);
    *prefix = best;
    return SL_OK;
}

/* One past the closing quote of the JSON string starting at q. */
static const char *skip_string(const char *q)
{
    for (q++; *q && *q != '"'; q++)
        if (*q == '\\' && q[1])
            q++;
    return *q ? q + 1 : q;
}

/* The text span of a JSON value starting at p (after white space), in a
 * document cJSON has already accepted: *end gets one past its last byte. */
static const char *json_value_span(const char *p, const char **end)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    const char *q = p;
    if (*q != '"' && *q != '{' && *q != '[') {
        while (*q && !strchr(",}] \t\n\r", *q))
            q++; /* number, true, false, null */
        *end = q;
        return p;
    }
    int depth = 0;
    while (*q) {
        if (*q == '"') {
            q = skip_string(q);
        } else {
            if (*q == '{' || *q == '[')
                depth++;
            else if (*q == '}' || *q == ']')
                depth--;
            q++;
        }
        if (depth == 0)
            break;
    }
    *end = q;
    return p;
}

/* The raw text of the top-level member "state" of json, or NULL when it is
 * not written plainly (then the caller reprints cJSON's copy). */
static const char *state_span(const char *json, size_t *len)
{
    const char *p = json, *end;
    while (*p && *p != '{')
        p++;
    if (!*p)
        return NULL;
    p++;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',')
            p++;
        if (*p != '"')
            return NULL;
        const char *key = json_value_span(p, &end);
        int is_state = end - key == 7 && !strncmp(key, "\"state\"", 7);
        p = end;
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (*p++ != ':')
            return NULL;
        const char *v = json_value_span(p, &end);
        if (is_state) {
            *len = (size_t)(end - v);
            return v;
        }
        p = end;
    }
}

int sl_checkpoint_read_state(const char *prefix, char **state_json)
{
    static const char fn[] = "sl_checkpoint_read_state";
    char *path = NULL, *text = NULL, *out = NULL;
    cJSON *root = NULL;
    FILE *fp = NULL;
    int rc;

    *state_json = NULL;
    path = prefix ? sl_str_cat(prefix, ".json") : NULL;
    if (!path)
        return sl_fail(prefix ? SL_ENOMEM : SL_EINVAL, "%s: no prefix or out of memory", fn);
    fp = fopen(path, "rb");
    if (!fp) {
        rc = sl_fail(errno == ENOENT ? SL_ENOENT : SL_EIO, "%s: %s: open: %s", fn, path,
                     strerror(errno));
        goto out;
    }
    struct stat st;
    if (fstat(fileno(fp), &st) != 0 || st.st_size > (64 << 20)) {
        rc = sl_fail(SL_ECORRUPT, "%s: %s: unreadable or larger than 64 MiB", fn, path);
        goto out;
    }
    size_t n = (size_t)st.st_size;
    text = malloc(n + 1);
    if (!text) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
        goto out;
    }
    if (fread(text, 1, n, fp) != n) {
        rc = sl_fail(SL_EIO, "%s: %s: short read", fn, path);
        goto out;
    }
    text[n] = '\0';
    root = cJSON_ParseWithOpts(text, NULL, 1);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *state = cJSON_GetObjectItemCaseSensitive(root, "state");
    if (!cJSON_IsObject(root) || !cJSON_IsNumber(fmt) || !cJSON_IsObject(state)) {
        rc = sl_fail(SL_ECORRUPT, "%s: %s: not a checkpoint JSON ({\"format\", \"state\": {...}})",
                     fn, path);
        goto out;
    }
    if (fmt->valuedouble != 1) {
        rc = sl_fail(SL_ENOTSUP, "%s: %s: format %g (this build reads 1)", fn, path,
                     fmt->valuedouble);
        goto out;
    }
    size_t len = 0;
    const char *span = state_span(text, &len);
    if (span && len && *span == '{') {
        out = strndup(span, len);
    } else {
        char *p = cJSON_PrintUnformatted(state);
        out = p ? strdup(p) : NULL;
        cJSON_free(p);
    }
    if (!out) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
        goto out;
    }
    *state_json = out;
    rc = SL_OK;
out:
    cJSON_Delete(root);
    if (fp)
        fclose(fp);
    free(text);
    free(path);
    return rc;
}
