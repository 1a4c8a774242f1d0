# The release binary on a slim Debian base. SQLite lives in the volume; set
# SPENDGATE_DATABASE_URL=postgres://… to use PostgreSQL instead.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin spendgate

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home-dir /var/lib/spendgate --create-home spendgate
COPY --from=build /src/target/release/spendgate /usr/local/bin/spendgate
USER spendgate
WORKDIR /var/lib/spendgate
ENV SPENDGATE_CONTROL_ADDR=0.0.0.0:3000 \
    SPENDGATE_PROXY_ADDR=0.0.0.0:8787 \
    SPENDGATE_DATABASE_URL=sqlite:///var/lib/spendgate/spendgate.db
VOLUME /var/lib/spendgate
EXPOSE 3000 8787
ENTRYPOINT ["spendgate"]
CMD ["serve"]
