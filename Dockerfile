# Multi-stage build of the `agent-runtime` binary (serve, gateway, executor, migrate).
#   docker build -t agent-runtime:local .
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p agent-runtime-cli --bin agent-runtime

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/agent-runtime --create-home agent
COPY --from=build /src/target/release/agent-runtime /usr/local/bin/agent-runtime
USER agent
WORKDIR /var/lib/agent-runtime
EXPOSE 8787 7001
ENTRYPOINT ["/usr/local/bin/agent-runtime"]
CMD ["serve", "--listen", "0.0.0.0:8787"]
