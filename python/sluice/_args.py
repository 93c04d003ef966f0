"""Argument checks of the sluice package: every setting is checked against
its meaning and its C field's range here, and a wrong type or value raises
sluice.ConfigError naming the setting (never a bare TypeError or
OverflowError, never a value cut to 32 bits)."""

import math as _math
import operator as _operator
import os as _os

# the C extension has no stub of its own (the package's is __init__.pyi)
from ._sluice import ConfigError  # type: ignore[import-not-found]

# pipeline.h's enums, by name
_SHUFFLE = {"none": 0, "buffer": 1, "global": 2}
_LAYOUT = {"nhwc-u8": 0, "nhwc-f32": 1, "nchw-f32": 2}
_ON_ERROR = {"skip": 0, "fail": 1}
_RANK_SPLIT = {"files": 0, "records": 1}

_U64 = 2**64 - 1
_I63 = 2**63 - 1


def _max_threads():
    """Threads a setting may ask for: 8 per core (at least 16); more only
    thrash (and 1000 threads on 2 cores is a typo, not a plan)."""
    return max(16, 8 * (_os.cpu_count() or 1))


def _int(where, name, value, lo, hi, meaning=""):
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise ConfigError(f"{where}: {name}={value!r}: an integer{meaning}, not "
                          f"{type(value).__name__}")
    v = _operator.index(value)
    if not lo <= v <= hi:
        raise ConfigError(f"{where}: {name}={v}: out of range, {lo} to {hi}{meaning}")
    return v


def _bytes(where, name, value):
    """Bytes > 0: an integer, or a string with K, M, G or T (binary
    multiples, as the CLI's --memory-budget): 512M, 4G, 1.5GiB."""
    if isinstance(value, str):
        import re as _re
        m = _re.fullmatch(r"([0-9]+(?:\.[0-9]*)?)([KMGT]?)(?:i?B)?", value.strip())
        if not m:
            raise ConfigError(f"{where}: {name}={value!r}: bytes, an integer or a size "
                              f"such as '512M' or '4G'")
        v = int(float(m.group(1)) * 1024 ** (" KMGT".index(m.group(2) or " ")))
    else:
        v = _int(where, name, value, 1, _U64, " bytes")
    if not 1 <= v <= _U64:
        raise ConfigError(f"{where}: {name}={value!r}: out of range, 1 byte to 2**64 - 1")
    return v


def _float(where, name, value, ok, meaning):
    if isinstance(value, (bool, str, bytes)):
        raise ConfigError(f"{where}: {name}={value!r}: a number{meaning}")
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{where}: {name}={value!r}: a number{meaning}") from None
    if not _math.isfinite(v) or not ok(v):
        raise ConfigError(f"{where}: {name}={value!r}: out of range{meaning}")
    return v


def _pair(where, name, value, ok, meaning):
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {name}={value!r}: a pair (lo, hi){meaning}") from None
    lo = _float(where, name, lo, lambda v: True, meaning)
    hi = _float(where, name, hi, lambda v: True, meaning)
    if not ok(lo, hi):
        raise ConfigError(f"{where}: {name}={value!r}: out of range{meaning}")
    return lo, hi


def _triple(where, name, value, ok, meaning):
    try:
        items = list(value)
    except TypeError:
        items = []
    if len(items) != 3:
        raise ConfigError(f"{where}: {name}={value!r}: three numbers (R, G, B){meaning}")
    return [_float(where, name, v, ok, meaning) for v in items]


def _bool(where, name, value):
    if value is True or value is False or (type(value) is int and value in (0, 1)):
        return bool(value)
    if type(value).__name__ == "bool_":  # numpy.bool_
        return bool(value)
    raise ConfigError(f"{where}: {name}={value!r}: True or False")


def _path(where, name, value):
    try:
        p = _os.fspath(value)
    except TypeError:
        raise ConfigError(f"{where}: {name}={value!r}: a path (str, bytes or os.PathLike)") from None
    if not p:
        raise ConfigError(f"{where}: {name}: an empty path")
    return p  # str or bytes: the extension takes both (os.fsencode's bytes)


def _str(where, name, value):
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {name}={value!r}: a non-empty str")
    return value


def _device_index(device):
    if device is None:
        return -1
    if isinstance(device, int) and not isinstance(device, bool):
        return _int("sluice.Pipeline", "device", device, 0, 1023)
    text = str(device) if type(device).__name__ == "device" else device  # torch.device
    if text == "cpu":
        return -1
    if text == "cuda":
        return 0
    if isinstance(text, str) and text.startswith("cuda:") and text[5:].isdigit():
        return _int("sluice.Pipeline", "device", int(text[5:]), 0, 1023)
    raise ConfigError(f"sluice.Pipeline: device={device!r}: None, 'cpu', 'cuda' or 'cuda:N'")


def _shuffle(shuffle):
    """'none' | 'global' | 'buffer' | 'buffer:N' -> (mode, buffer or None)."""
    if isinstance(shuffle, str):
        if shuffle in ("none", "global", "buffer"):
            return _SHUFFLE[shuffle], None
        if shuffle.startswith("buffer:") and shuffle[7:].isdigit():
            n = int(shuffle[7:])
            if 1 <= n <= 2**40:
                return _SHUFFLE["buffer"], n
    raise ConfigError(f"sluice.Pipeline: shuffle={shuffle!r}: 'none', 'buffer:N' "
                      f"(N from 1 to 2**40 records) or 'global'")


def _pick(table, what, value):
    if not isinstance(value, str) or value not in table:
        raise ConfigError(f"sluice.Pipeline: {what}={value!r}: one of {', '.join(table)}")
    return table[value]


def _restart(where, restart, restart_rows):
    """convert's restart= and restart_rows= (the CLI's --restart N|auto and
    --restart-rows R), checked: ('auto', N or None; R or None)."""
    if restart is not None and restart_rows is not None:
        raise ConfigError(f"{where}: restart={restart!r} and restart_rows={restart_rows!r}: "
                          f"give one or the other")
    if restart is not None and not (isinstance(restart, str) and restart == "auto"):
        restart = _int(where, "restart", restart, 1, 65535,
                       " MCUs per restart interval, or 'auto'")
    if restart_rows is not None:
        restart_rows = _int(where, "restart_rows", restart_rows, 1, 65535,
                            " MCU rows per restart interval")
    return restart, restart_rows
