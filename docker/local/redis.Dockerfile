# Debian's redis-server on the Debian 12 base built here. Like the redis image, it works in
# /data (append-only files land there) as the unprivileged redis user. Containers here run
# with host networking, so the default command listens on loopback only.
ARG BASE
FROM ${BASE}

RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data && chown redis:redis /data

WORKDIR /data
USER redis
EXPOSE 6379
CMD ["redis-server", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
