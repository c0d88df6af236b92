// swift-tools-version:6.1
import PackageDescription

// SE-0461: an `async` function runs on its caller's executor (a request's task already runs on the pool's), with no
// executor switch at each call; 45 of them per `POST /v1/logs` cost about 200 instructions each (issue 59). A
// function that must run elsewhere says so (`@concurrent`). Changing this flag needs a clean build of the targets
// that import these modules (the mangling of their async function types changes).
let nonsending: [SwiftSetting] = [.enableUpcomingFeature("NonisolatedNonsendingByDefault")]

let package = Package(
    name: "poopypals",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "poopypals", targets: ["poopypals"]),
        .library(name: "PostgresClient", targets: ["PostgresClient"]),
        .library(name: "PoopyPalsData", targets: ["PoopyPalsData"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        // The HTTP service. Hummingbird's swift-configuration trait is left off: we do not use it.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1", traits: ["FullFoundation"]),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // Hummingbird's own transport, named for the parser-error handler (ParserErrorResponder).
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.7.1"),
        // SHA-256 for device keys and migration checksums; jwt-kit builds it anyway.
        .package(url: "https://github.com/apple/swift-crypto", from: "4.1.0"),
        // base64url for cursors and token headers; jwt-kit builds it anyway.
        .package(url: "https://github.com/swift-extras/swift-extras-base64", from: "1.2.0"),
        // Tests only: openapi.yaml read as YAML, not scanned line by line.
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
    ],
    targets: [
        // The C boundary: only PostgresClient imports this.
        .systemLibrary(
            name: "CLibPQ",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"]), .brew(["libpq"])]
        ),
        // Keeps a process that exits while threads are in libpq from crashing at its exit (Sources/CLibPQExit/exit.c).
        .target(name: "CLibPQExit"),
        // Value codecs every layer may use (UUID text, calendar dates, RFC 3339 timestamps, civil-day arithmetic,
        // durations): no dependency, not even the driver.
        .target(name: "Values"),
        .target(
            name: "PostgresClient",
            dependencies: [
                "CLibPQ",
                "CLibPQExit",
                "Values",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: nonsending
        ),
        .target(
            name: "PoopyPalsData",
            dependencies: [
                "PostgresClient",
                "Values",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ExtrasBase64", package: "swift-extras-base64"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: nonsending
        ),
        .target(
            name: "PoopyPalsHTTP",
            dependencies: [
                "PoopyPalsData",
                "PostgresClient",
                "Values",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: nonsending
        ),
        .executableTarget(
            name: "poopypals",
            dependencies: [
                "PoopyPalsData",
                "PoopyPalsHTTP",
                "PostgresClient",
                "Values",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Shared by the test targets only: databases of their own for integration tests.
        .target(
            name: "TestSupport",
            dependencies: ["PostgresClient", "PoopyPalsData", .product(name: "Logging", package: "swift-log")],
            path: "Tests/TestSupport"
        ),
        .testTarget(
            name: "ValuesTests",
            dependencies: ["Values"]
        ),
        .testTarget(
            name: "PostgresClientTests",
            dependencies: ["PostgresClient", "Values", "TestSupport"]
        ),
        .testTarget(
            name: "PoopyPalsHTTPTests",
            dependencies: [
                "PoopyPalsHTTP", "PoopyPalsData", "PostgresClient", "Values", "TestSupport", "poopypals",
                .product(name: "Crypto", package: "swift-crypto"),
                // The reference the response encoder is compared with: NIO's own, in an embedded channel.
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "Yams", package: "Yams"),
            ]
        ),
        .testTarget(
            name: "PoopyPalsDataTests",
            // Depends on the executable so `swift test` builds it for the CLI tests.
            dependencies: [
                "PoopyPalsData", "PostgresClient", "Values", "TestSupport", "poopypals",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ]
        ),
    ]
)
