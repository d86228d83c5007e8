"""Composition roots: the only modules that build collaborators and wire them.

``broker_app.py`` (a broker), ``deletion_worker.py`` (a deletion worker), ``standalone.py``
(Kafka, Redis, a broker and a worker in one command) and ``cli.py`` (``dedup-broker``).
"""
