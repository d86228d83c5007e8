"""The HTTP surface on aiohttp: the app, Pulsar-shaped error answers, body and path helpers,
and the routes of topics and namespaces. Each feature keeps its own routes in its room."""
