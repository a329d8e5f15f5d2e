"""What the kernel answers a panel's request with, one module per panel feature (as the
panel's ``src/panels/``): diagnoses, their graphs (a diagnosis's or a ``vv.grads``
report's), watches and grads reports. Each op takes the request's validated ``args`` and
returns the schema's result for it (``x-results``), or raises ``requests.Refused``."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import diagnoses, grads, graphs, watches

HANDLERS: dict[str, Callable[[dict], Any]] = {
    "history": diagnoses.op_history, "view": graphs.op_view, "expand": graphs.op_expand,
    "collapse": graphs.op_collapse, "search": graphs.op_search, "verify": diagnoses.op_verify,
    "apply": diagnoses.op_apply, "watch": watches.op_watch, "watch_nans": watches.op_watch_nans,
    "grads": grads.op_grads,
}
"""Each op of the schema's RequestMessage, in its order, to the function answering it."""
