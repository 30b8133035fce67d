"""Where a rank of a multi-process run is: its local rank on the node, and the per-rank
placeholders of teraio's paths (ssd_dirs, rank report files).

    "{rank}"        the torch.distributed rank (unique across all nodes)
    "{local_rank}"  the rank on this node: $LOCAL_RANK (torchrun sets it on every node), else
                    the rank (one node, e.g. torch.multiprocessing.spawn)

Not importing torch: teraio.report uses it too.
"""
from __future__ import annotations

import os


def local_rank(rank: int) -> int:
    """The rank on this node: $LOCAL_RANK where set, else `rank`. A $LOCAL_RANK that is not a
    non-negative integer raises ValueError naming it."""
    v = os.environ.get("LOCAL_RANK")
    if v is None or v == "":
        return int(rank)
    try:
        n = int(v)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"LOCAL_RANK={v!r} in the environment is not a non-negative integer "
                         "(torchrun sets it; unset it or fix the launcher)")
    return n


def expand(path, rank: int, what: str = "path") -> str:
    """`path` with "{rank}" and "{local_rank}" replaced. Any other "{...}" raises ValueError
    (a typo such as "{ranks}" would otherwise give every rank the same directory)."""
    s = str(path)
    out = s.replace("{rank}", str(int(rank)))
    if "{local_rank}" in out:
        out = out.replace("{local_rank}", str(local_rank(rank)))
    if "{" in out or "}" in out:
        raise ValueError(f"{what}: {s!r} has a placeholder other than {{rank}} and "
                         "{local_rank} (or a stray brace)")
    return out
