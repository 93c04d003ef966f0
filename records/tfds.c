/*
 * records/tfds.c - the classes of a TensorFlow Datasets folder.
 *
 * `tfds.builder(NAME).download_and_prepare()` (and `tfds.load`) leave
 * DATA_DIR/NAME/[CONFIG/]VERSION/ with
 *   NAME-SPLIT.tfrecord-00000-of-00016   the shards (names.c reads SPLIT)
 *   dataset_info.json                    splits, shard lengths, supervised keys
 *   features.json                        the feature tree (tfds.features)
 *   label.labels.txt                     a ClassLabel's names, one a line
 * and Examples whose image feature keeps its encoded bytes under "image"
 * and whose ClassLabel keeps its int64 under "label" (example_decode.c
 * reads both when TensorFlow's ImageNet keys are absent). What sluice
 * needs besides is the number of classes, which dataset.json gives for
 * its own data. Here it is features.json's
 *   featuresDict.features.label.classLabel.numClasses
 * (protobuf's JSON mapping writes an int64 as a string: "10"; a number is
 * taken too), and the names are label.labels.txt's lines when there are
 * that many. TFDS before features.json had this form wrote the same
 * label.labels.txt, whose line count then gives the classes.
 *
 * Nothing here is needed to read the shards: without these files the
 * classes are the user's --classes, as for any TFRecord shards.
 *
 * Threading: reentrant.
 */
#include "records_int.h"
#include "bytesrc.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"

#define TFDS_FEATURES "features.json"
#define TFDS_LABELS "label.labels.txt"
#define TFDS_MAX_FILE (16u << 20) /* ImageNet-21k's labels file is 200 KB */
#define TFDS_MAX_CLASSES 1000000

/* The whole of dir/name, NUL-terminated (bytesrc.h's whole-file get), or
 * NULL when it is not there; *rc an error with a message, else SL_OK. */
static char *read_small(const char *dir, const char *name, size_t *len, int *rc)
{
    char *path = sl_path_join(dir, name);
    uint8_t *buf = NULL;
    sl_bytesrc *src = NULL;
    *rc = SL_OK;
    if (!path) {
        *rc = sl_fail(SL_ENOMEM, "sl_tfds_classes: out of memory");
        return NULL;
    }
    int r = sl_bytesrc_open(path, NULL, &src);
    if (r == SL_OK) {
        r = sl_bytesrc_get(src, TFDS_MAX_FILE, &buf, len);
        sl_bytesrc_close(src);
    }
    if (r == SL_ENOENT)
        sl_clear_error(); /* not a TFDS folder, or an older one */
    else if (r)
        *rc = sl_fail(r, "sl_tfds_classes: %s", sl_errmsg());
    free(path);
    return r ? NULL : (char *)buf;
}

/* numClasses of the "label" ClassLabel in features.json's tree: 0 when the
 * file has no such feature, -1 when the value is not a count. */
static int64_t num_classes_of(const cJSON *root)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "featuresDict");
    f = cJSON_GetObjectItemCaseSensitive(f, "features");
    f = cJSON_GetObjectItemCaseSensitive(f, "label");
    f = cJSON_GetObjectItemCaseSensitive(f, "classLabel");
    if (!f)
        return 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(f, "numClasses");
    int64_t n = -1;
    if (cJSON_IsString(v) && v->valuestring[0] && strlen(v->valuestring) < 12) {
        char *end;
        long long x = strtoll(v->valuestring, &end, 10);
        if (!*end && x >= 1 && x <= TFDS_MAX_CLASSES)
            n = x;
    } else if (!sl_json_is_int(v, 1, TFDS_MAX_CLASSES, &n)) {
        n = -1;
    }
    return n;
}

/* label.labels.txt's lines (a last line without '\n' counts; a trailing
 * empty line does not), as malloc'd strings in *names; the count. */
static int64_t label_lines(char *text, size_t len, char ***names, int *rc)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += text[i] == '\n';
    n += len && text[len - 1] != '\n';
    *rc = SL_OK;
    *names = NULL;
    if (n == 0 || n > TFDS_MAX_CLASSES)
        return (int64_t)n;
    char **v = calloc(n, sizeof *v);
    if (!v) {
        *rc = sl_fail(SL_ENOMEM, "sl_tfds_classes: out of memory");
        return 0;
    }
    char *p = text;
    for (size_t k = 0; k < n; k++) {
        char *eol = strchr(p, '\n');
        if (eol)
            *eol = '\0';
        size_t l = strlen(p);
        if (l && p[l - 1] == '\r')
            p[l - 1] = '\0';
        if (!(v[k] = strdup(p))) {
            for (size_t j = 0; j < k; j++)
                free(v[j]);
            free(v);
            *rc = sl_fail(SL_ENOMEM, "sl_tfds_classes: out of memory");
            return 0;
        }
        p = eol ? eol + 1 : p + l;
    }
    *names = v;
    return (int64_t)n;
}

int sl_tfds_classes(const char *dir, sl_manifest *m, char **from)
{
    size_t flen = 0, llen = 0;
    int rc;
    *from = NULL;
    char *feat = read_small(dir, TFDS_FEATURES, &flen, &rc);
    if (rc)
        return rc;
    char *labels = read_small(dir, TFDS_LABELS, &llen, &rc);
    if (rc) {
        free(feat);
        return rc;
    }
    int64_t n = 0;
    const char *src = NULL;
    if (feat) {
        cJSON *root = cJSON_ParseWithLength(feat, flen);
        n = root ? num_classes_of(root) : -1;
        cJSON_Delete(root);
        if (n < 0) {
            rc = sl_fail(SL_ECORRUPT, "sl_tfds_classes: %s/%s: not TensorFlow Datasets' "
                         "features JSON, or featuresDict.features.label.classLabel.numClasses "
                         "is not a count (give --classes)", dir, TFDS_FEATURES);
            goto out;
        }
        src = TFDS_FEATURES;
    }
    char **names = NULL;
    int64_t nl = labels ? label_lines(labels, llen, &names, &rc) : 0;
    if (rc)
        goto out;
    if (n == 0 && nl > 0 && names) { /* no features.json count: the names file's */
        n = nl;
        src = TFDS_LABELS;
    }
    if (n > 0) {
        m->num_classes = (uint32_t)n;
        if (names && nl == n) {
            m->class_names = names;
            names = NULL;
        }
        if (!(*from = sl_path_join(dir, src)))
            rc = sl_fail(SL_ENOMEM, "sl_tfds_classes: out of memory");
    }
    for (int64_t i = 0; names && i < nl; i++)
        free(names[i]);
    free(names);
out:
    free(feat);
    free(labels);
    return rc;
}
