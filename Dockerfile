# Build with the Swift image and libpq-dev; run on a slim Debian with libpq only.
# Swift 6.2 or newer: the dependency minimums (swift-log 1.16.2, hummingbird 2.28.1, jwt-kit 5.7.1) declare
# swift-tools-version 6.2.
ARG SWIFT_VERSION=6.2
FROM swift:${SWIFT_VERSION}-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends libpq-dev pkg-config && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Dependencies first, in a layer of their own: editing a source file does not fetch them again.
# Package.resolved is not in the repository (see README), so this resolves the newest allowed versions.
COPY Package.swift ./
RUN swift package resolve
COPY Sources ./Sources
COPY Tests ./Tests
RUN swift build -c release --product poopypals --static-swift-stdlib \
    && cp "$(swift build -c release --show-bin-path)/poopypals" /poopypals

FROM debian:bookworm-slim
# The release (Sources/PoopyPalsData/Migrations/Release.swift; a test holds this default equal to it).
ARG POOPYPALS_VERSION=1.1.0
LABEL org.opencontainers.image.title="poopypals" org.opencontainers.image.version="${POOPYPALS_VERSION}"
RUN apt-get update && apt-get install -y --no-install-recommends libpq5 ca-certificates tzdata \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --no-create-home --uid 10001 poopypals
COPY --from=build /poopypals /usr/local/bin/poopypals
# Its own migrations (sql/ and sql/post/): `migrate` in this image applies what this release needs.
COPY sql /app/sql
WORKDIR /app
USER poopypals
ENV POOPYPALS_MIGRATIONS_DIR=/app/sql POOPYPALS_HOST=0.0.0.0 PORT=8080
EXPOSE 8080
ENTRYPOINT ["poopypals"]
CMD ["serve"]
