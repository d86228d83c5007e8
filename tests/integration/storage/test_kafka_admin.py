"""Topic creation through the storage layer's admin client: many at once, in batches."""

from __future__ import annotations

import asyncio

from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from dedup_broker.storage.kafka.admin import KafkaAdmin
from tests.integration.storage.helpers import ConfigFactory, run


def test_concurrent_creations_each_get_their_own_answer(
    make_config: ConfigFactory, admin: AdminClient
) -> None:
    """Creations asked for together go in shared requests; each caller still learns
    whether its topic was new, and each topic gets its own configuration."""
    config = make_config()
    prefix = f"{config.cluster_name}.created"

    async def scenario() -> None:
        kafka = KafkaAdmin(config)
        names = [f"{prefix}-{i:03d}" for i in range(60)]
        created = await asyncio.gather(
            *(
                kafka.create_topic(name, {"retention.ms": str(60_000 + i)})
                for i, name in enumerate(names)
            )
        )
        assert created == [True] * 60
        # Asked again (twice at once for one of them): they exist now.
        again = await asyncio.gather(
            kafka.create_topic(names[0], {}),
            kafka.create_topic(names[0], {}),
            kafka.create_topic(names[1], {}),
        )
        assert again == [False, False, False]
        # The same new topic asked for twice at once: one creates it, the other finds it.
        twice = await asyncio.gather(
            kafka.create_topic(f"{prefix}-twice", {}), kafka.create_topic(f"{prefix}-twice", {})
        )
        assert sorted(twice) == [False, True]
        assert set(names) <= set(await kafka.list_topics())

    run(scenario)
    resource = ConfigResource(ConfigResource.Type.TOPIC, f"{prefix}-017")
    described = admin.describe_configs([resource])[resource].result()
    assert described["retention.ms"].value == "60017"
