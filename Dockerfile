# syntax=docker/dockerfile:1
# kalypso as a Kubernetes operator (charts/kalypso-scheduler). The image runs
# `kalypso operator`; `/manager` is kept as an alias so that the original
# kalypso-scheduler Deployment (command: /manager, args: --health-probe-bind-address=:8081
# --metrics-bind-address=:8443 --leader-elect) runs it with only the image swapped.

FROM rust:1.95-bookworm AS build
# libgit2, libssh2, OpenSSL and zlib are built from source (the image has the C compiler,
# perl and make that takes) and linked in; kube uses rustls. No system library is needed.
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin kalypso \
 && cp target/release/kalypso /kalypso

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /kalypso /usr/local/bin/kalypso
RUN printf '#!/bin/sh\nexec /usr/local/bin/kalypso operator "$@"\n' > /manager && chmod 0755 /manager
# Mirrors of GitOps repositories (the chart mounts an emptyDir here).
ENV KALYPSO_CACHE_DIR=/var/cache/kalypso
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kalypso"]
CMD ["operator"]
