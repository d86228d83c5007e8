# Python 3.11 on the Debian 12 base built here (dedup_broker/devservers/images.py), in a
# virtual environment first on the PATH: Debian's own Python refuses `pip install` into the
# system (PEP 668), and docker/Dockerfile runs `pip install .` as on python:3.11-slim.
ARG BASE
FROM ${BASE}

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/python

# The build machine's CA bundle, for pip: where HTTPS to PyPI passes a proxy that signs
# with a CA of its own, only the machine's bundle trusts it. Taken from the machine at
# build time (PIP_CERT, REQUESTS_CA_BUNDLE, SSL_CERT_FILE or Debian's bundle).
COPY host-ca-certificates.crt /usr/local/share/dedup-broker/host-ca-certificates.crt

ENV PATH=/opt/python/bin:$PATH \
    PIP_CERT=/usr/local/share/dedup-broker/host-ca-certificates.crt \
    LANG=C.UTF-8

CMD ["python3"]
