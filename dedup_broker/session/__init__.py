"""The Pulsar binary protocol session: one client connection, commands in, replies out.

It turns the domain's outcomes into wire commands; the domain never builds one.
"""
