# A Java 17 runtime on the Debian 12 base built here, for the Kafka image.
ARG BASE
FROM ${BASE}

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*

ENV LANG=C.UTF-8
