"""The admin HTTP surface on aiohttp: Pulsar-shaped REST routes and ``/metrics``.

Each feature's routes live in a module of their own returning ``list[web.RouteDef]``;
``routes.admin_app`` assembles them, ``serving.start_http`` serves the app, and
``errors`` answers every failure as Pulsar does, ``{"reason": "..."}``.
"""
