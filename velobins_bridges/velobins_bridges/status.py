"""Health of a bridge for ``/diagnostics``, decided without ROS: is the input arriving, is it converted.

A bridge is healthy when its input arrives (within ``timeout``), converts (no drops since the last
decision) and passes the bridge's own check (the IMU bridge's unit check). The first problem in
that order is the status; the node adds the key-values that back it up.
"""

from __future__ import annotations

from collections.abc import Mapping

from velobins_common.health import ERROR, OK, WARN, Status


def bridge_status(
    what: str,
    topic: str,
    input_age: float | None,
    timeout: float,
    drops: Mapping[str, int],
    problem: Status | None = None,
    working: str = "converting",
) -> Status:
    """The state of a bridge, first cause first.

    Args:
        what: what its input carries, for the message ("IMU input", "odometry").
        topic: the input topic as the node resolved it.
        input_age: seconds since the last input message (None: none yet).
        timeout: input silence that counts as stopped [s].
        drops: inputs dropped since the last decision, by reason.
        problem: the bridge's own finding (e.g. implausible units), reported after the input checks.
        working: the OK message.
    """
    if input_age is None:
        return Status(ERROR, f"no {what} on {topic} yet")
    if input_age > timeout:
        return Status(ERROR, f"no {what} on {topic} for {input_age:.1f} s")
    if problem is not None:
        return problem
    new = {k: v for k, v in drops.items() if v}
    if new:
        return Status(WARN, "dropping input: " + ", ".join(f"{k} ×{v}" for k, v in sorted(new.items())))
    return Status(OK, working)
