"""Payloads through roost's CBOR codec: ``binary/roost-cbor`` on Temporal.

Every value roost sends to Temporal (workflow input and results, signals, activity
arguments and results, memo, failure details) is encoded by roost's codec, so PIDs,
``roost.Error``, aware datetimes, UUIDs and registered attrs records round-trip exactly.
Payloads of Temporal's own encodings still decode (``json/plain`` from
``temporal workflow start --input``, ``binary/null``, protobuf), so the CLI and
hand-written temporalio code can talk to roost workflows.
"""

from __future__ import annotations

from typing import Any, Final

import temporalio.converter
from google.protobuf.message import Message as ProtoMessage
from temporalio.api.common.v1 import Payload

from roost.storage._codec import Codec

__all__ = ["ENCODING", "CborPayloadConverter", "RoostPayloadConverter", "data_converter"]

ENCODING: Final = "binary/roost-cbor"
"""The ``encoding`` metadata of a payload roost's codec wrote."""

_ENCODING_BYTES: Final = ENCODING.encode()
_CODEC: Final = Codec()


class CborPayloadConverter(temporalio.converter.EncodingPayloadConverter):
    """One encoding: roost's codec (a protobuf message is left to Temporal's converters)."""

    @property
    def encoding(self) -> str:
        """``binary/roost-cbor``."""
        return ENCODING

    def to_payload(self, value: Any) -> Payload | None:
        """``value`` encoded by roost's codec.

        Raises:
            roost.Error: kind Invalid for a value the codec cannot encode (its message
                names the type and where it sits).
        """
        if isinstance(value, ProtoMessage):
            return None
        return Payload(metadata={"encoding": _ENCODING_BYTES}, data=_CODEC.encode(value))

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        """The value roost's codec wrote (``type_hint`` is not used: CBOR is typed)."""
        return _CODEC.decode(payload.data)


class RoostPayloadConverter(temporalio.converter.CompositePayloadConverter):
    """roost's codec first, then Temporal's default encodings (for decoding their payloads)."""

    def __init__(self) -> None:
        super().__init__(
            CborPayloadConverter(),
            *temporalio.converter.DefaultPayloadConverter.default_encoding_payload_converters,
        )


def data_converter() -> temporalio.converter.DataConverter:
    """A temporalio ``DataConverter`` whose payloads go through roost's codec.

    Give it to ``temporalio.client.Client.connect(data_converter=...)`` to start or signal
    roost workflows from hand-written temporalio code.
    """
    return temporalio.converter.DataConverter(payload_converter_class=RoostPayloadConverter)
