"""roost.storage: the CBOR codec, order-preserving keys, and the LMDB / in-memory stores."""

from roost.storage._codec import Codec, Migrate, record
from roost.storage._keys import U64_MAX, from_u64, key, prefix_end, u64, unpack_key
from roost.storage._lmdb import DEFAULT_MAP_SIZE, Durability, LmdbStore, open_lmdb_store
from roost.storage._memory import MemoryStore
from roost.storage._quarantine import Quarantine, QuarantinedRow, quarantined
from roost.storage._store import MAX_KEY_SIZE, TABLES, ReadTxn, Store, StoreStats, WriteTxn

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
