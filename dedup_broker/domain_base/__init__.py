"""The domain's base, below every feature room: topic names, policies, publish outcomes
and producers. The domain core (``dedup_broker/domain``: topics, subscriptions, the
broker) composes the features on top of it."""
