"""The connectors' own Pulsar protocol client: whole batch entries in and out.

The official ``pulsar-client`` builds, sends and receives one message per Python call;
the Spark connectors move thousands of rows per call as Arrow batches. This client speaks
the protocol with the broker's own codec (``dedup_broker.protocol``) and moves **whole
batch entries**: a producer sends entries that the caller encoded (``EntryProducer``), a
reader hands over the entries the broker dispatches (``EntryReader``). It does what the
connectors need of a client and no more: CONNECT with credentials and TLS, partitioned
metadata, lookups and redirects, producers with PIP-6 sequence ids (resent unchanged after
a reconnect, so the broker stores each entry once), non-durable readers, keep-alive.

Its I/O runs on an event loop in a thread of its own (``WireClient``), so a Spark task's
thread can block on Spark's input while receipts and pings are still answered.
"""

from connectors.wire.client import WireClient
from connectors.wire.errors import WireError
from connectors.wire.producer import EntryProducer, OutgoingEntry, ProducerCounts
from connectors.wire.reader import EntryReader, ReceivedEntry
from connectors.wire.settings import WireSettings

__all__ = [
    "EntryProducer",
    "EntryReader",
    "OutgoingEntry",
    "ProducerCounts",
    "ReceivedEntry",
    "WireClient",
    "WireError",
    "WireSettings",
]
