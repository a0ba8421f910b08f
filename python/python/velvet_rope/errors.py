"""Exceptions raised by velvet-rope: one base class, each also a built-in that fits.

Outcomes (admit, queue, reject) are values, never exceptions; these are for misuse and bad
input.
"""

from __future__ import annotations

__all__ = [
    "VelvetRopeError",
    "ConfigError",
    "UnknownRoomError",
    "SharedMemoryError",
    "LeaseError",
    "UnknownResourceError",
    "CapacityError",
]


class VelvetRopeError(Exception):
    """Base class of every velvet-rope error."""


class ConfigError(VelvetRopeError, ValueError):
    """The configuration cannot be read, parsed or validated; the message names the field."""


class UnknownRoomError(VelvetRopeError, KeyError):
    """No room of that name in the running configuration."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class SharedMemoryError(VelvetRopeError, OSError):
    """A state file (shared memory) cannot be opened or does not fit the configuration."""


class LeaseError(VelvetRopeError, RuntimeError):
    """A lease could not be granted, refreshed or enforced."""


class UnknownResourceError(LeaseError, KeyError):
    """No resource template matches the resource."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class CapacityError(LeaseError, ValueError):
    """More permits or units asked at once than a limiter can ever give, or more released than
    held."""
