#!/usr/bin/env python3
"""Prepare a TensorFlow Datasets dataset from a folder of JPEGs, with tfds itself.

    tfds_write.py SRC DATA_DIR

SRC/<split>/<class>/<file>.jpg for the splits train and test. A
tfds.core.GeneratorBasedBuilder named "snaps" with the features of TFDS's image
classification sets (image: tfds.features.Image, label: tfds.features.ClassLabel
over SRC/train's class folders in sorted order, file_name: tfds.features.Text) is
prepared by download_and_prepare() into DATA_DIR, which writes what `tfds.load`
reads: DATA_DIR/snaps/1.0.0/snaps-SPLIT.tfrecord-NNNNN-of-NNNNN, dataset_info.json,
features.json and label.labels.txt. Prints {"dir": VERSION_DIR} as its last line.
"""
import glob
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow_datasets as tfds  # noqa: E402


def main(argv):
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
