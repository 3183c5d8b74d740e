# Core Lightning plus what satsgate needs to run as its plugin: Python 3.11
# (Debian bookworm's) in a venv, and the Pango libraries WeasyPrint loads.
# satsgate itself is installed from the mounted checkout at start-up
# (cln-entrypoint.sh), not baked in.
ARG CLN_VERSION=v25.09
FROM elementsproject/lightningd:${CLN_VERSION}

RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        python3 python3-venv python3-pip \
        libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz0b fonts-dejavu-core \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/satsgate

COPY cln-entrypoint.sh /usr/local/bin/satsgate-cln-entrypoint
ENTRYPOINT ["/usr/local/bin/satsgate-cln-entrypoint"]
