# Type stub of sluice.ray (python/sluice/ray.py): conversion on a Ray cluster.
import os
from typing import Any, Callable, Dict, Literal, Mapping, Optional, Sequence, Union

__all__ = ["convert"]

_Path = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

def convert(
    out: _Path,
    *,
    folder: Optional[_Path] = ...,
    list: Optional[_Path] = ...,
    name: str = ...,
    shards: int = ...,
    format: str = ...,
    quality: int = ...,
    resize_short: int = ...,
    shuffle: bool = ...,
    seed: int = ...,
    label_offset: int = ...,
    class_names: Optional[Sequence[str]] = ...,
    max_pixels: int = ...,
    restart: Union[None, int, Literal["auto"]] = ...,
    restart_rows: Optional[int] = ...,
    tasks: Optional[int] = ...,
    plan: Optional[_Path] = ...,
    threads_per_task: int = ...,
    max_retries: int = ...,
    fsync: bool = ...,
    progress: Union[bool, None, Callable[[Dict[str, Any]], object]] = ...,
    env: Optional[Mapping[str, str]] = ...,
    sluice_bin: Optional[str] = ...,
) -> Dict[str, Any]: ...
