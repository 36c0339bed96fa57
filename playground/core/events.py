"""The events a run sends while it works (child process -> CLI): their names, in one place."""

BUILD_START = "build_start"  # variant: a compile begins
BUILD_DONE = "build_done"  # variant, seconds, cached
PHASE = "phase"  # phase: "check" or "time"
CHECK = "check"  # variant, case: one size being checked
ALIVE = "alive"  # (nothing): a timed call finished, at most a few times a second; --timeout counts from it
CALL = "call"  # (nothing): a checked call of the kernel begins; --timeout counts from it
RETURNED = "returned"  # (nothing): that call returned (its work finished); no bound until the next call
LEASE = "lease"  # device, exclusive (true, false; null: given back): a worker asks its supervisor (child/spawn.py)
WAIT = "wait"  # device: the run waits for the device's lease (another run is timing on it); --timeout pauses
NVTX_RANGE = "kplay"  # around each profiled call, under ncu (--nvtx-include "kplay/")
WARNING = "warning"  # message: something the user should know, shown as one line


def ignore(event: str, **data) -> None:
    """The listener of a run nobody watches."""
