// swift-tools-version:6.1
// A Swift client for the PoopyPals API, generated from the repository's openapi.yaml by Apple's
// swift-openapi-generator with its default configuration (only `accessModifier: public`, so that an app can
// import the library). Its own package: the service's build never compiles the generator.
import PackageDescription

let package = Package(
    name: "PoopyPalsClient",
    platforms: [.macOS(.v15), .iOS(.v17)],
    products: [
        .library(name: "PoopyPalsAPI", targets: ["PoopyPalsAPI"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-openapi-generator", from: "1.14.3"),
        .package(url: "https://github.com/apple/swift-openapi-runtime", from: "1.13.4"),
        .package(url: "https://github.com/apple/swift-openapi-urlsession", from: "1.4.0"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
    ],
    targets: [
        .target(
            name: "PoopyPalsAPI",
            dependencies: [
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "OpenAPIURLSession", package: "swift-openapi-urlsession"),
            ],
            plugins: [.plugin(name: "OpenAPIGenerator", package: "swift-openapi-generator")]
        ),
        // Every route against a live `poopypals serve` (scripts/client.sh, a step of `make test`).
        .testTarget(
            name: "PoopyPalsAPITests",
            dependencies: [
                "PoopyPalsAPI",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "OpenAPIURLSession", package: "swift-openapi-urlsession"),
            ]
        ),
    ]
)
