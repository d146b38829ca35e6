"""roost.storage: the CBOR codec, order-preserving keys, and the LMDB / in-memory stores."""

import typing as _typing

from roost import _lazy

if _typing.TYPE_CHECKING:
    from roost.storage._codec import Codec, Migrate, record
    from roost.storage._keys import U64_MAX, from_u64, key, prefix_end, u64, unpack_key
    from roost.storage._lmdb import DEFAULT_MAP_SIZE, Durability, LmdbStore, open_lmdb_store
    from roost.storage._memory import MemoryStore
    from roost.storage._quarantine import Quarantine, QuarantinedRow, quarantined
    from roost.storage._store import MAX_KEY_SIZE, TABLES, ReadTxn, Store, StoreStats, WriteTxn

# Where each public name lives; the first use of a name loads its module (PEP 562).
_NAMES = {
    "Codec": "roost.storage._codec",
    "DEFAULT_MAP_SIZE": "roost.storage._lmdb",
    "Durability": "roost.storage._lmdb",
    "LmdbStore": "roost.storage._lmdb",
    "MAX_KEY_SIZE": "roost.storage._store",
    "MemoryStore": "roost.storage._memory",
    "Migrate": "roost.storage._codec",
    "Quarantine": "roost.storage._quarantine",
    "QuarantinedRow": "roost.storage._quarantine",
    "ReadTxn": "roost.storage._store",
    "Store": "roost.storage._store",
    "StoreStats": "roost.storage._store",
    "TABLES": "roost.storage._store",
    "U64_MAX": "roost.storage._keys",
    "WriteTxn": "roost.storage._store",
    "from_u64": "roost.storage._keys",
    "key": "roost.storage._keys",
    "open_lmdb_store": "roost.storage._lmdb",
    "prefix_end": "roost.storage._keys",
    "quarantined": "roost.storage._quarantine",
    "record": "roost.storage._codec",
    "u64": "roost.storage._keys",
    "unpack_key": "roost.storage._keys",
}
__getattr__, __dir__ = _lazy.attach(__name__, _NAMES)

__all__ = [
    "DEFAULT_MAP_SIZE",
    "MAX_KEY_SIZE",
    "TABLES",
    "U64_MAX",
    "Codec",
    "Durability",
    "LmdbStore",
    "MemoryStore",
    "Migrate",
    "Quarantine",
    "QuarantinedRow",
    "ReadTxn",
    "Store",
    "StoreStats",
    "WriteTxn",
    "from_u64",
    "key",
    "open_lmdb_store",
    "prefix_end",
    "quarantined",
    "record",
    "u64",
    "unpack_key",
]
