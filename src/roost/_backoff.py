"""The one capped exponential backoff that every retrying part of roost uses.

Supervisor services, workflow activity retries, workflow task failures and queue
redeliveries all wait ``min(initial * factor ** exponent, maximum)``.

Pure (no trio, no clock). Something may fail for days, so the exponent grows without
bound; ``2.0 ** 1025`` raises OverflowError, which is why the power is never taken
before it is known to stay below the cap.
"""

from __future__ import annotations

import math
import sys

from roost._errors import invalid

__all__ = ["capped_backoff"]

_LOG_FLOAT_MAX = math.log(sys.float_info.max)


def capped_backoff(initial: float, factor: float, exponent: int, maximum: float) -> float:
    """``min(initial * factor ** exponent, maximum)`` for any exponent, without overflow.

    Args:
        initial: the first delay (``exponent == 0``), seconds, finite and >= 0.
        factor: the growth per step, >= 1 (1 keeps the delay constant; an infinite
            factor jumps to the cap after the first step).
        exponent: how many times the delay has grown, an int >= 0 (attempt - 1).
        maximum: the cap, seconds, >= 0; may be infinite.

    Raises:
        roost.Error: kind Invalid for arguments outside those ranges (callers validate
            user input first; this guards the arithmetic).
    """
    if not (math.isfinite(initial) and initial >= 0):
        raise invalid(f"backoff initial delay must be a finite number >= 0, got {initial!r}")
    if not factor >= 1:  # NaN fails this too
        raise invalid(f"backoff factor must be a number >= 1, got {factor!r}")
    if isinstance(exponent, bool) or not isinstance(exponent, int) or exponent < 0:
        raise invalid(f"backoff exponent must be an int >= 0, got {exponent!r}")
    if math.isnan(maximum) or maximum < 0:
        raise invalid(f"backoff maximum must be a number >= 0, got {maximum!r}")
    if initial == 0 or factor == 1 or exponent == 0 or initial >= maximum:
        return min(initial, maximum)
    # Compare in log space: exponent * log(factor) is finite for any int a float can
    # approximate, while factor ** exponent is not.
    try:
        grown = math.log(initial) + exponent * math.log(factor)
    except OverflowError:  # an exponent beyond float range: far past any cap
        return maximum
    if grown >= math.log(maximum) or grown >= _LOG_FLOAT_MAX:
        return maximum  # (past the largest float, any maximum is below the power)
    try:
        return min(initial * factor**exponent, maximum)
    except OverflowError:
        # factor ** exponent alone overflows but the product stays below the cap
        # (a tiny initial delay): the log form is exact enough and cannot overflow.
        return min(math.exp(grown), maximum)
