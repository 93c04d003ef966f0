#!/usr/bin/env python3
"""Prepare a TensorFlow Datasets dataset from a folder of JPEGs, with tfds itself.

    tfds_write.py SRC DATA_DIR
    tfds_write.py --png N DATA_DIR

SRC/<split>/<class>/<file>.jpg for the splits train and test. A
tfds.core.GeneratorBasedBuilder named "snaps" with the features of TFDS's image
classification sets (image: tfds.features.Image, label: tfds.features.ClassLabel
over SRC/train's class folders in sorted order, file_name: tfds.features.Text) is
prepared by download_and_prepare() into DATA_DIR, which writes what `tfds.load`
reads: DATA_DIR/snaps/1.0.0/snaps-SPLIT.tfrecord-NNNNN-of-NNNNN, dataset_info.json,
features.json and label.labels.txt. Prints {"dir": VERSION_DIR} as its last line.

--png N: a builder "digits" as TFDS's mnist is made (image: tfds.features.Image of
shape (28, 28, 1), which TFDS stores as PNG; label: ClassLabel(num_classes=10);
file_name: the image's number), N train and N // 2 test images; image i is a smooth
ramp, 30 + 3x + 2y + 5 (i % 8), label i % 10, and its pixels also go to
DATA_DIR/digits-SPLIT.raw (28 x 28 bytes per image, in number order) for a reader
to compare with.
"""
import glob
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow_datasets as tfds  # noqa: E402


def ramp(i):
    import numpy as np
    y, x = np.mgrid[0:28, 0:28]
    return (30 + 3 * x + 2 * y + 5 * (i % 8)).astype(np.uint8).reshape(28, 28, 1)


def digits(n, data_dir):
    sizes = {"train": n, "test": n // 2}

    class Digits(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(
                builder=self,
                features=tfds.features.FeaturesDict({
                    "image": tfds.features.Image(shape=(28, 28, 1)),
                    "label": tfds.features.ClassLabel(num_classes=10),
                    "file_name": tfds.features.Text(),
                }),
                supervised_keys=("image", "label"))

        def _split_generators(self, dl_manager):
            return {s: self._generate_examples(k) for s, k in sizes.items()}

        def _generate_examples(self, k):
            for i in range(k):
                yield i, {"image": ramp(i), "label": i % 10, "file_name": str(i)}

    b = Digits(data_dir=data_dir)
    b.download_and_prepare()
    for s, k in sizes.items():
        with open(os.path.join(data_dir, "digits-%s.raw" % s), "wb") as f:
            for i in range(k):
                f.write(ramp(i).tobytes())
    print(json.dumps({"dir": str(b.data_dir)}))
    return 0


def main(argv):
    if argv[1] == "--png":
        return digits(int(argv[2]), argv[3])
    src, data_dir = argv[1], argv[2]
    classes = sorted(os.listdir(os.path.join(src, "train")))

    class Snaps(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(
                builder=self,
                features=tfds.features.FeaturesDict({
                    "image": tfds.features.Image(),
                    "label": tfds.features.ClassLabel(names=classes),
                    "file_name": tfds.features.Text(),
                }),
                supervised_keys=("image", "label"))

        def _split_generators(self, dl_manager):
            return {s: self._generate_examples(os.path.join(src, s)) for s in ("train", "test")}

        def _generate_examples(self, d):
            for c in sorted(os.listdir(d)):
                for f in sorted(glob.glob(os.path.join(d, c, "*.jpg"))):
                    yield f, {"image": f, "label": c, "file_name": os.path.basename(f)}

    b = Snaps(data_dir=data_dir)
    b.download_and_prepare()
    print(json.dumps({"dir": str(b.data_dir)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
