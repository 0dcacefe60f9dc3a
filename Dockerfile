# Multi-stage build of the `agent-runtime` binary (serve, gateway, executor, migrate).
#   docker build -t agent-runtime:local .
# The base images are arguments so that a machine without Docker Hub can build from its own
# (scripts/compose-images.sh does, for CI); the defaults are the public ones.
ARG BUILD_IMAGE=rust:1-bookworm
ARG RUNTIME_BASE=debian:bookworm-slim

FROM ${BUILD_IMAGE} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p agent-runtime-cli --bin agent-runtime

# What runs the binary: a slim Debian with CA certificates and an unprivileged user.
FROM ${RUNTIME_BASE} AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/agent-runtime --create-home agent
USER agent
WORKDIR /var/lib/agent-runtime
EXPOSE 8787 7001
ENTRYPOINT ["/usr/local/bin/agent-runtime"]
CMD ["serve", "--listen", "0.0.0.0:8787"]

# A binary built outside Docker, in the build context (CI's own build; needs BuildKit, which
# skips the build stage): docker build --target prebuilt --build-arg BINARY=agent-runtime <dir>
FROM runtime AS prebuilt
ARG BINARY=agent-runtime
COPY ${BINARY} /usr/local/bin/agent-runtime

# The default: the binary of the build stage.
FROM runtime AS release
COPY --from=build /src/target/release/agent-runtime /usr/local/bin/agent-runtime
