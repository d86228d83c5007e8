"""``make bench`` (memory): what librdkafka holds per topic a producer has written to.

The broker writes every ledger through one shared confluent-kafka producer, and
librdkafka keeps a topic handle, its partition state and its metadata for every topic
that producer ever wrote to. An idle Pulsar topic has one ledger topic it wrote to, so
this is part of ``bench.memory``'s cost per idle topic that no change in the broker's
Python code can remove.

One Kafka; N single-partition topics are created; a fresh idempotent producer (the
broker's settings that matter here: ``enable.idempotence``, ``acks=all``) writes one
message to each and flushes. (RSS after - RSS before) / N, with RSS read from /proc
after a pause, is the producer's memory per topic written.

Then the same producer's cost of queueing one record (``produce()``, in the calling
thread: the broker's event loop) to the topics it wrote to first and to those it wrote to
last. librdkafka finds a topic by name in a list of every topic the producer knows, in
the order it first wrote to them, so a record for a recently written topic costs a walk
past all the others: with thousands of ledger topics an append to a new ledger costs the
event loop far more than one to an old one.

Last, ledger churn (``--churn-rounds``): librdkafka never forgets a topic, deleted ones
included, and a broker writes every ledger for a while, then never again. Through the
broker's own pool of producers (``SharedProducer``, one producer), each round writes to
N fresh topics, tells the pool it is done with them and deletes them; the RSS after each
round stays flat only because the pool renews a producer that is done with as many
topics as it still writes to.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.memory import resident_kib
from dedup_broker.config import BrokerConfig
from dedup_broker.devservers import provide_kafka
from dedup_broker.storage.kafka.producer import SharedProducer

CREATE_BATCH = 200
SETTLE_SECONDS = 3.0


PRODUCE_SAMPLE = 100
PRODUCE_ROUNDS = 20


def producer_bytes_per_topic(bootstrap_servers: str, count: int) -> tuple[float, float, float]:
    """RSS per topic written, then microseconds per ``produce()`` to the first and to
    the last ``PRODUCE_SAMPLE`` topics written."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    names = [f"bench-rk-{uuid.uuid4().hex[:6]}-{i}" for i in range(count)]
    for start in range(0, count, CREATE_BATCH):
        created = admin.create_topics(
            [NewTopic(n, 1, 1) for n in names[start : start + CREATE_BATCH]]
        )
        for future in created.values():
            future.result()
    producer = Producer(
        {"bootstrap.servers": bootstrap_servers, "enable.idempotence": True, "acks": "all"}
    )
    producer.produce(names[0], b"warm-up")
    producer.flush(30)
    time.sleep(SETTLE_SECONDS)
    before = resident_kib(os.getpid())
    for name in names[1:]:
        producer.produce(name, b"hello")
        producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("messages left unacknowledged")
    time.sleep(SETTLE_SECONDS)
    after = resident_kib(os.getpid())
    oldest = _produce_micros(producer, names[1 : 1 + PRODUCE_SAMPLE])
    newest = _produce_micros(producer, names[-PRODUCE_SAMPLE:])
    if producer.flush(60) != 0:
        raise RuntimeError("messages left unacknowledged")
    return (after - before) * 1024 / (count - 1), oldest, newest


def _produce_micros(producer: Producer, names: list[str]) -> float:
    """Microseconds one ``produce()`` to one of ``names`` takes, on average."""
    started = time.perf_counter()
    for _ in range(PRODUCE_ROUNDS):
        for name in names:
            producer.produce(name, b"again")
        producer.poll(0)
    return (time.perf_counter() - started) * 1e6 / (PRODUCE_ROUNDS * len(names))


def _create(admin: AdminClient, names: list[str]) -> None:
    for start in range(0, len(names), CREATE_BATCH):
        for future in admin.create_topics(
            [NewTopic(n, 1, 1) for n in names[start : start + CREATE_BATCH]]
        ).values():
            future.result()


def churn_rss(bootstrap_servers: str, count: int, rounds: int) -> list[int]:
    """KiB of RSS gained after each round of writing to, forgetting and deleting ``count``
    fresh topics through the broker's producer pool."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    config = BrokerConfig(kafka_bootstrap_servers=bootstrap_servers, kafka_producer_pool_size=1)

    async def churn() -> list[int]:
        producer = SharedProducer(config, asyncio.get_running_loop())
        gained: list[int] = []
        base = 0
        try:
            for round_number in range(rounds + 1):
                names = [f"bench-churn-{uuid.uuid4().hex[:6]}-{i}" for i in range(count)]
                await asyncio.to_thread(_create, admin, names)
                await asyncio.gather(*(producer.send(name, b"entry") for name in names))
                for name in names:
                    producer.forget(name)
                for start in range(0, count, CREATE_BATCH):
                    for future in admin.delete_topics(names[start : start + CREATE_BATCH]).values():
                        await asyncio.wrap_future(future)
                await asyncio.sleep(SETTLE_SECONDS)
                if round_number == 0:
                    base = resident_kib(os.getpid())
                else:
                    gained.append(resident_kib(os.getpid()) - base)
        finally:
            await producer.close()
        return gained

    return asyncio.run(churn())


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.producer_memory")
    parser.add_argument("--topics", type=int, default=1500, help="topics written to")
    parser.add_argument(
        "--churn-rounds",
        type=int,
        default=4,
        help="rounds of writing to --topics fresh topics, then deleting them (0: none)",
    )
    args = parser.parse_args()
    kafka = provide_kafka(native_heap="2g")
    try:
        each, oldest, newest = producer_bytes_per_topic(kafka.bootstrap_servers, args.topics)
        churn = churn_rss(kafka.bootstrap_servers, args.topics, args.churn_rounds)
    finally:
        kafka.stop()
    print(
        f"librdkafka producer: {each:.0f} bytes of RSS per topic written to "
        f"({args.topics} topics, one message each)"
    )
    print(
        f"one produce() with {args.topics} topics known: {oldest:.1f} us to one of the "
        f"first {PRODUCE_SAMPLE} written, {newest:.1f} us to one of the last {PRODUCE_SAMPLE}"
    )

    if churn:
        rounds = ", ".join(f"{kib / 1024:+.1f}" for kib in churn)
        print(
            f"ledger churn, {args.topics} fresh topics written, forgotten and deleted per "
            f"round: RSS MiB after each round, against the first: {rounds}"
        )


if __name__ == "__main__":
    main()
