#!/usr/bin/env python3
"""Write a TFRecord shard the way TensorFlow's ImageNet converter does.

    tf_write_imagenet.py OUT_FILE N [--classes K] [--first I] [--no-json]

Writes N records with tf.io.TFRecordWriter. Each is a tf.train.Example with the
full feature set of build_imagenet_data.py (_convert_to_example): image/height,
image/width, image/colorspace "RGB", image/channels 3, image/class/label
(1..K, K = 1000 by default, as TF's ImageNet shards;
record i's is 1 + ((I + i) * 37) % K), image/class/synset, image/class/text,
image/object/bbox/{xmin,xmax,ymin,ymax} float lists, image/object/bbox/label
int64 list, image/format "JPEG", image/filename, image/encoded (tf.io.encode_jpeg
of a deterministic random image). Record i has 1 + i % 3 boxes.

The expected values go to OUT_FILE.json: {"records": [{...}, ...]} with the
floats as TensorFlow stores them (float32, written as their exact decimal so a
reader can compare bit for bit), so sluice's reader can be checked against it;
--no-json leaves it out (a shard directory that must hold shards only).
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def _int64(v):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=v if isinstance(v, list) else [v]))


def _float(v):
    return tf.train.Feature(float_list=tf.train.FloatList(value=v))


def _bytes(v):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("n", type=int)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--no-json", action="store_true")
    a = ap.parse_args(argv[1:])
    out, n = a.out, a.n
    rng = np.random.RandomState(1234 + a.first)
    expected = []
    with tf.io.TFRecordWriter(out) as w:
        for i in range(n):
            h = int(rng.randint(17, 90))
            wd = int(rng.randint(17, 90))
            pixels = rng.randint(0, 256, size=(h, wd, 3)).astype(np.uint8)
            encoded = tf.io.encode_jpeg(pixels, quality=90).numpy()
            label = 1 + ((a.first + i) * 37) % a.classes
            synset = "n%08d" % (1440764 + a.first + i)
            text = "class %d, with a comma and \u00e9" % label
            nbox = 1 + i % 3
            xmin = [float(np.float32(rng.uniform(0.0, 0.5))) for _ in range(nbox)]
            ymin = [float(np.float32(rng.uniform(0.0, 0.5))) for _ in range(nbox)]
            xmax = [float(np.float32(x + rng.uniform(0.1, 0.5))) for x in xmin]
            ymax = [float(np.float32(y + rng.uniform(0.1, 0.5))) for y in ymin]
            filename = "%s_%d.JPEG" % (synset, i)
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image/height": _int64(h),
                "image/width": _int64(wd),
                "image/colorspace": _bytes(b"RGB"),
                "image/channels": _int64(3),
                "image/class/label": _int64(label),
                "image/class/synset": _bytes(synset.encode()),
                "image/class/text": _bytes(text.encode("utf-8")),
                "image/object/bbox/xmin": _float(xmin),
                "image/object/bbox/xmax": _float(xmax),
                "image/object/bbox/ymin": _float(ymin),
                "image/object/bbox/ymax": _float(ymax),
                "image/object/bbox/label": _int64([label] * nbox),
                "image/format": _bytes(b"JPEG"),
                "image/filename": _bytes(filename.encode()),
                "image/encoded": _bytes(encoded),
            }))
            w.write(ex.SerializeToString())
            expected.append({
                "height": h, "width": wd, "label": label, "synset": synset, "text": text,
                "filename": filename, "colorspace": "RGB", "channels": 3,
                "xmin": xmin, "xmax": xmax, "ymin": ymin, "ymax": ymax,
                "bbox_label": [label] * nbox, "encoded_len": len(encoded),
            })
    if a.no_json:
        return 0
    with open(out + ".json", "w") as f:
        # repr of a float32-exact double round-trips exactly through strtod/strtof
        json.dump({"records": expected}, f, indent=1, ensure_ascii=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
