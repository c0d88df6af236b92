// swift-tools-version:6.2
// `make bench`: the service's data layer and API beside pgbench and vapor/postgres-nio on the same SQL. A package
// of its own, depending on the service by path, so that the service's build and `make test` never compile the
// benchmark's dependencies.
import Foundation
import PackageDescription

// A path dependency is known by its directory's name, whatever the clone is called.
let service = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

let package = Package(
    name: "poopypals-bench",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/swiftlang/swift-subprocess", from: "1.0.2"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
        // The peer: what a Swift developer would otherwise pick (only here, never in the service's build).
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // The HTTP peer's server (the service builds it too, so it costs the bench nothing extra).
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1", traits: ["FullFoundation"]),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
    ],
    targets: [
        .executableTarget(
            name: "poopypals-bench",
            dependencies: [
                .product(name: "PoopyPalsData", package: service),
                .product(name: "PostgresClient", package: service),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Subprocess", package: "swift-subprocess"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ]
        ),
    ]
)
