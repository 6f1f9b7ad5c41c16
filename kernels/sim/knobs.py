"""The simulator's knobs: the CUDASIM_* environment variables that cudasim.h reads at every launch (and
CUDASIM_CAPABILITY, which the simulated device's properties read at every query: cudasim_runtime.h).

    with knobs.set(order="reverse", shuffle_blocks=True, seed=11):
        ext.sum3(x, out)
    with knobs.set(cluster_lead="none"):  # a cluster's blocks start together (unset: the order says which leads)
        ext.rotate(x)

This module owns their names and the values each takes, refuses a value the simulator would refuse
(cudasim.h's read_knobs refuses it too, at the launch: a test keeps the two lists in step), and is the
only Python code that writes them. `set` restores what it found when its block ends, so a caller's
own setting (`CUDASIM_ORDER=reverse make test`) comes back afterwards.
"""
from __future__ import annotations

import contextlib
import os
import re
from typing import Iterator

ORDER = "CUDASIM_ORDER"
SHUFFLE_BLOCKS = "CUDASIM_SHUFFLE_BLOCKS"
SEED = "CUDASIM_SEED"
STACK_KB = "CUDASIM_STACK_KB"
SPIN_SECONDS = "CUDASIM_SPIN_SECONDS"  # how long a thread may run without waiting before the launch fails (30 unset)
CAPABILITY = "CUDASIM_CAPABILITY"  # the compute capability the simulated device reports (an H100's 9.0 unset)
CLUSTER_LEAD = "CUDASIM_CLUSTER_LEAD"  # which block of a cluster runs ahead of the others (unset: the order's)
# Peer memory (kernels/sim/peers.py): the segments of other processes' memory mapped into this one, which PeerMemory
# writes (peers_value says the format), and how long a poll of that memory may wait before it is an error.
PEERS = "CUDASIM_PEERS"
PEER_TIMEOUT = "CUDASIM_PEER_TIMEOUT"
NAMES = (ORDER, SHUFFLE_BLOCKS, SEED, STACK_KB, SPIN_SECONDS, CAPABILITY, CLUSTER_LEAD, PEERS, PEER_TIMEOUT)

# The orders in which a block's threads run, as cudasim.h's kOrderNames lists them (same order: the
# index is what the simulator stores).
ORDERS = ("forward", "reverse", "random")
# Which block of each thread-block cluster runs ahead of the others, as cudasim.h's kLeadNames lists them: none (the
# blocks start together and take turns), the first (rank 0), the last, or one drawn from the seed. Unset, the order
# says: forward the first, reverse the last, random a drawn one (kernels/sim/README.md, "Thread-block clusters").
CLUSTER_LEADS = ("none", "first", "last", "random")
STACK_KB_RANGE = (16, 1024 * 1024)
SPIN_SECONDS_RANGE = (0.5, 86400)


def order_value(order: str) -> str:
    """`order` when it is one of ORDERS, else a ValueError that lists them."""
    if order not in ORDERS:
        raise ValueError(f"{ORDER}={order} is not a thread order; use one of: {', '.join(ORDERS)}")
    return order


def cluster_lead_value(lead: str) -> str:
    """`lead` when it is one of CLUSTER_LEADS, else a ValueError that lists them."""
    if lead not in CLUSTER_LEADS:
        raise ValueError(f"{CLUSTER_LEAD}={lead} is not a cluster lead; use one of: {', '.join(CLUSTER_LEADS)}")
    return lead


def shuffle_value(shuffle: bool | int | str) -> str:
    """'1' (blocks in random order) or '0' (in order); a ValueError for anything else."""
    if shuffle in (True, 1, "1"):
        return "1"
    if shuffle in (False, 0, "0"):
        return "0"
    raise ValueError(f"{SHUFFLE_BLOCKS}={shuffle} is not a switch; use 1 (blocks in random order) or 0 (in order)")


def seed_value(seed: int | str) -> str:
    """The seed as the simulator reads it: a whole number from 0 up."""
    text = str(seed)
    if isinstance(seed, bool) or not text.isdigit():
        raise ValueError(f"{SEED}={seed} is not a seed; use a whole number from 0 up")
    return text


def stack_kb_value(kb: int | str) -> str:
    """A fiber's stack in KB, from 16 to 1048576."""
    low, high = STACK_KB_RANGE
    text = str(kb)
    if isinstance(kb, bool) or not text.isdigit() or not low <= int(text) <= high:
        raise ValueError(f"{STACK_KB} must be a number of KB from {low} to {high}, got {kb!r}")
    return text


def spin_seconds_value(seconds: float | int | str) -> str:
    """How long a thread may run without reaching a barrier, a warp operation or an atomic: 0.5 to 86400 s."""
    low, high = SPIN_SECONDS_RANGE
    text = str(seconds)
    try:
        ok = not isinstance(seconds, bool) and low <= float(text) <= high
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{SPIN_SECONDS} must be a number of seconds from {low} to {high}, got {seconds!r}")
    return text


def capability_value(capability: tuple[int, int] | str) -> str:
    """A compute capability as the simulator reads it, "7.5" (from (7, 5) or "7.5")."""
    text = ".".join(map(str, capability)) if isinstance(capability, tuple) else str(capability)
    if not re.fullmatch(r"[1-9]\d*\.\d", text):
        raise ValueError(f"{CAPABILITY}={capability} is not a compute capability; use one such as 7.5 or 9.0")
    return text


PEER_ENTRY = re.compile(r"\d+:\d+(:[0-9a-f]+){6}")


def peers_value(text: str) -> str:
    """The segments of peer memory as cudasim.h reads them: entries `owner:me:buffer:bytes:pad:bytes:shadow:bytes`
    separated by ';' (ranks in decimal, addresses and sizes in hex), or "" for none."""
    bad = [e for e in text.split(";") if not PEER_ENTRY.fullmatch(e)] if text else []
    if bad:
        raise ValueError(f"{PEERS}={text} is not a list of peer memory segments: expected entries "
                         f"owner:me:buffer:bytes:pad:bytes:shadow:bytes separated by ';'; {bad[0]!r} is not one")
    return text


def peer_timeout_value(seconds: float | int | str) -> str:
    """How long a poll of peer memory may wait, in seconds: a number above 0."""
    text = str(seconds)
    try:
        ok = not isinstance(seconds, bool) and 0 < float(text) <= 1e9
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{PEER_TIMEOUT}={seconds} is not a time; use a number of seconds above 0")
    return text


def put(name: str, value: str | None) -> None:
    """Set one knob for the rest of the process (None removes it), for what lives longer than a `with` block:
    PeerMemory's segments, while it is open. The value is checked as `set` checks it."""
    check = {PEERS: peers_value, PEER_TIMEOUT: peer_timeout_value}
    if name not in check:
        raise ValueError(f"put sets {', '.join(check)}; use knobs.set for {name}")
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = check[name](value)


def values(order: str | None = None, shuffle_blocks: bool | None = None, seed: int | None = None,
           stack_kb: int | None = None, capability: tuple[int, int] | str | None = None,
           cluster_lead: str | None = None, peer_timeout: float | None = None,
           spin_seconds: float | None = None) -> dict[str, str]:
    """The environment entries for the knobs given (None leaves a knob as it is), each value checked."""
    out = {}
    if spin_seconds is not None:
        out[SPIN_SECONDS] = spin_seconds_value(spin_seconds)
    if peer_timeout is not None:
        out[PEER_TIMEOUT] = peer_timeout_value(peer_timeout)
    if cluster_lead is not None:
        out[CLUSTER_LEAD] = cluster_lead_value(cluster_lead)
    if capability is not None:
        out[CAPABILITY] = capability_value(capability)
    if order is not None:
        out[ORDER] = order_value(order)
    if shuffle_blocks is not None:
        out[SHUFFLE_BLOCKS] = shuffle_value(shuffle_blocks)
    if seed is not None:
        out[SEED] = seed_value(seed)
    if stack_kb is not None:
        out[STACK_KB] = stack_kb_value(stack_kb)
    return out


@contextlib.contextmanager
def set(order: str | None = None, shuffle_blocks: bool | None = None, seed: int | None = None,  # noqa: A001
        stack_kb: int | None = None, capability: tuple[int, int] | str | None = None,
        cluster_lead: str | None = None, peer_timeout: float | None = None,
        spin_seconds: float | None = None) -> Iterator[None]:
    """Run the block with these knobs (None: as they are); what was there before comes back after it.
    `capability` is what the simulated device reports, (7, 5) for a T4 (the launchers' gates read it);
    `cluster_lead` which block of a thread-block cluster runs ahead (one of CLUSTER_LEADS); `peer_timeout` how many
    seconds a poll of another rank's memory may wait (kernels/sim/peers.py; 60 unset); `spin_seconds` how long a thread
    may run without reaching a barrier, a warp operation or an atomic before the launch fails (30 unset)."""
    new = values(order, shuffle_blocks, seed, stack_kb, capability, cluster_lead, peer_timeout, spin_seconds)
    old = {k: os.environ.get(k) for k in new}
    os.environ.update(new)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def current() -> dict[str, str]:
    """The knobs set in this process's environment now, by name."""
    return {k: os.environ[k] for k in NAMES if k in os.environ}
