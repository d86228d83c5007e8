"""The broker domain: topics, producers, subscriptions and the broker that holds them.

It knows no wire format and no socket: operations return outcomes as values (see
``outcomes``) and reach clients only through the links the session layer gives it.
"""
