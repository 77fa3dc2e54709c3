# replog node image. Built by `make image` from wheels made on the host (`pip wheel`), so the
# build needs no PyPI access from inside the container; the same file builds anywhere the
# base image can be pulled. Run as non-root; data lives in /var/lib/replog.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 replog \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/replog --shell /usr/sbin/nologin replog \
    && mkdir -p /var/lib/replog \
    && chown 10001:10001 /var/lib/replog

COPY dist/wheels /tmp/wheels
RUN python3 -m venv /opt/replog \
    && /opt/replog/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels 'replog[console]' \
    && rm -rf /tmp/wheels

ENV PATH=/opt/replog/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    REPLOG_DATA_DIR=/var/lib/replog
USER 10001:10001
WORKDIR /var/lib/replog
VOLUME ["/var/lib/replog"]
EXPOSE 7070 9464
# `replog serve` installs its own SIGTERM handler (graceful drain + flush), so it can be PID 1.
ENTRYPOINT ["replog", "serve"]
