#!/usr/bin/env python3
"""TensorBoard's side of sluice's event files.

    tb_read.py read LOGDIR     load LOGDIR with TensorBoard's EventAccumulator
    tb_read.py write LOGDIR    write scalar events with TensorBoard's own
                               EventFileWriter, for sluice to read

read prints one JSON line {"tb": {"file_version": V, "scalars": {tag:
[[step, value, wall_time], ...]}, "texts": {tag: [[step, text], ...]}}}:
what TensorBoard's scalar dashboard would show (EventAccumulator.Reload,
then Scalars(tag) for every tag) and its Text tab (the tags the text
plugin claims, PluginTagToContent("text"), their tensors' strings).

write writes, with tensorboard.summary.writer.event_file_writer, events
{step: s, summary {value {tag: "w/a", simple_value: s / 4}, value {tag:
"w/b", simple_value: -s}}} for s = 0..4, and prints {"tb_written": PATH}.

Exit 3 when tensorboard cannot be imported (the caller skips), 1 on any
other failure. Used by tests/interop/test_tensorboard.c.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

try:
    from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
        EventAccumulator,
    )
    from tensorboard.compat.proto import event_pb2, summary_pb2  # noqa: E402
    from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: E402
except ImportError as e:
    print("tb_read: tensorboard not importable: %s" % e, file=sys.stderr)
    sys.exit(3)


def read(logdir):
    # size_guidance 0: keep every scalar (the default samples 10000).
    ea = EventAccumulator(logdir, size_guidance={"scalars": 0})
    ea.Reload()
    scalars = {}
    for tag in ea.Tags()["scalars"]:
        scalars[tag] = [[e.step, e.value, e.wall_time] for e in ea.Scalars(tag)]
    texts = {}
    try:
        text_tags = ea.PluginTagToContent("text")
    except KeyError:  # no text in the file
        text_tags = {}
    for tag in text_tags:
        texts[tag] = [
            [e.step, b"".join(e.tensor_proto.string_val).decode()] for e in ea.Tensors(tag)
        ]
    out = {"file_version": ea.file_version, "scalars": scalars, "texts": texts}
    print(json.dumps({"tb": out}))


def write(logdir):
    w = EventFileWriter(logdir, filename_suffix=".tbwriter")
    for s in range(5):
        summary = summary_pb2.Summary(
            value=[
                summary_pb2.Summary.Value(tag="w/a", simple_value=s / 4.0),
                summary_pb2.Summary.Value(tag="w/b", simple_value=float(-s)),
            ]
        )
        w.add_event(event_pb2.Event(step=s, wall_time=1.5e9 + s, summary=summary))
    w.close()
    print(json.dumps({"tb_written": w.get_logdir()}))


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("read", "write"):
        print(__doc__, file=sys.stderr)
        sys.exit(1)
    if sys.argv[1] == "read":
        read(sys.argv[2])
    else:
        write(sys.argv[2])


if __name__ == "__main__":
    main()
