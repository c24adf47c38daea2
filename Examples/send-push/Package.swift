// swift-tools-version:6.1
import PackageDescription

/// Another team's service calling Herald: adds the `HeraldClient` product and sends a push.
/// In your own Package.swift, point at Herald's repository instead of this relative path:
///     .package(url: "https://<your git host>/herald.git", from: "<version>")
let package = Package(
    name: "send-push",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "herald", path: "../..")
    ],
    targets: [
        .executableTarget(
            name: "send-push",
            dependencies: [.product(name: "HeraldClient", package: "herald")]
        )
    ]
)
