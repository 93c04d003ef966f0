"""sluice.Pipeline(memory_budget=): the fit (pipeline/memory.c) from Python:
what shrinks, what it says, the refusals, and the same batches."""
import numpy as np
import pytest

import sluice

SMALL = dict(split="train", image_size=(16, 20), batch=16, seed=5, shuffle="buffer:40",
             epochs=2)


def collect(pipe):
    out = [(b.index, np.from_dlpack(b.images).copy(), np.from_dlpack(b.labels).copy())
           for b in pipe]
    pipe.close()
    return out


def test_budget_shrinks_and_keeps_the_batches(dataset):
    plain = sluice.Pipeline(dataset, **SMALL, cpus=2, prefetch=0)
    assert plain.memory() is None
    want = collect(plain)
    pipe = sluice.Pipeline(dataset, **SMALL, cpus=2, memory_budget="9M")
    m = pipe.memory()
    assert m["budget"] == 9 << 20 and 0 < m["total"] <= 9 << 20, m
    assert set(m["parts"]) == {"read_window", "shuffle", "remote", "decode", "ring", "index"}
    assert m["total"] == sum(m["parts"].values())
    assert m["parts"]["remote"] == 0  # local shards
    assert "read window 64.0 MiB ->" in m["shrunk"] or "read window 64 MiB ->" in m["shrunk"], m
    got = collect(pipe)
    assert len(got) == len(want)
    for w, g in zip(want, got):
        assert w[0] == g[0] and np.array_equal(w[1], g[1]) and np.array_equal(w[2], g[2])


def test_budget_refusals_name_the_parts(dataset):
    with pytest.raises(sluice.ConfigError) as e:
        sluice.Pipeline(dataset, **SMALL, memory_budget=100_000)
    msg = str(e.value)
    for part in ("sluice.Pipeline: memory_budget", "read window", "shuffle buffer",
                 "decode workers", "prefetch ring", "what cannot shrink", "Give a budget"):
        assert part in msg, msg
    # the workers given are not shrunk, and are named
    with pytest.raises(sluice.ConfigError, match="6 workers as given"):
        sluice.Pipeline(dataset, **SMALL, workers=6, memory_budget="8M")
    for bad in ("12Q", "-1", 0, "M"):
        with pytest.raises(sluice.ConfigError, match="memory_budget"):
            sluice.Pipeline(dataset, **SMALL, memory_budget=bad)
