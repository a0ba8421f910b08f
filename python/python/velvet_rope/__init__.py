"""velvet-rope: an in-process admission engine for Python services.

A virtual waiting room (`Engine`, and the middleware in `velvet_rope.asgi`,
`velvet_rope.wsgi` and `velvet_rope.fastapi`) and capacity leases (`Coordinator`,
`RateLimiter`, `Gauge`), decided in the process, in nanoseconds, with no network hop.

```python
import velvet_rope

engine = velvet_rope.Engine('''
[[rooms]]
name = "shop"
total_active_users = 200
new_users_per_minute = 200
''')
decision = engine.admit("shop", cookie_header)     # "admit" | "queue" | "reject"
```
"""

from ._velvet_rope import (
    COMMAND_HEADER,
    ClusterStatus,
    Decision,
    Engine,
    Lease,
    Page,
    RoomStats,
    Router,
    __version__,
    is_revoke_command,
    noop,
    now_ms,
    shared_memory_size,
)
from .errors import (
    CapacityError,
    ConfigError,
    LeaseError,
    SharedMemoryError,
    UnknownResourceError,
    UnknownRoomError,
    VelvetRopeError,
)
from .leases import Coordinator, Gauge, RateLimiter

__all__ = [
    "Engine",
    "Decision",
    "RoomStats",
    "ClusterStatus",
    "Page",
    "Coordinator",
    "Lease",
    "RateLimiter",
    "Gauge",
    "Router",
    "shared_memory_size",
    "is_revoke_command",
    "COMMAND_HEADER",
    "now_ms",
    "noop",
    "VelvetRopeError",
    "ConfigError",
    "UnknownRoomError",
    "SharedMemoryError",
    "LeaseError",
    "UnknownResourceError",
    "CapacityError",
    "__version__",
]
