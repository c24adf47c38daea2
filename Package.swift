// swift-tools-version:6.1
import PackageDescription

/// Herald: one package, six executables. Each executable is a thin `main` over one library; the
/// libraries share `HeraldProto` (message types; the only module that touches the protobuf-c C
/// structs), `HeraldModel` (names, errors, settings, time), `HeraldRPC` (method table, both
/// transports, typed clients) and `HeraldService` (process start-up, config, health, metrics).

/// `HERALD_FUZZ=1` (set by scripts/fuzz.sh): Herald's own modules are compiled with libFuzzer's
/// coverage and AddressSanitizer, and the `herald-fuzz` target exists. Dependencies are compiled as
/// usual. Only `swift build --product herald-fuzz` links in that mode; the normal build never sees it.
let fuzzing = Context.environment["HERALD_FUZZ"] != nil

/// `HERALD_BENCH=1` (set by scripts/bench.sh, and by scripts/test.sh's full run, which runs the quick
/// benchmark): the `herald-bench` executable exists. Without it a build never compiles
/// it (as Hummingbird keeps its benchmarks out of the package's own build).
let benchmarks = Context.environment["HERALD_BENCH"] != nil

let swiftSettings: [SwiftSetting] =
    [.enableUpcomingFeature("ExistentialAny")] + (fuzzing ? [.unsafeFlags(["-sanitize=fuzzer,address"])] : [])

/// How Herald's executables are linked: by lld, with the relative relocations packed (DT_RELR,
/// glibc 2.36+, Debian 12). A position-independent Swift executable carries one relocation per
/// pointer in its metadata and witness tables; as 24-byte RELA entries that was 2.1 MB in
/// herald-dispatch, all read at every start and resident for the process's life. Packed, it is
/// 0.45 MB, and each service's idle RSS is about 2 MB smaller (docs/performance.md). lld ships with
/// the Swift toolchain, and links faster than gold. The fuzz target keeps the default linker.
let linkerSettings: [LinkerSetting] =
    fuzzing
    ? [] : [.unsafeFlags(["-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs"])]

/// Stamps out a thin executable target over its library (penny-bot style): every `herald-<svc>`
/// is the same shape, so they are declared once here.
func executable(_ name: String, library: String) -> Target {
    .executableTarget(
        name: name,
        dependencies: [.target(name: library), "HeraldService"],
        swiftSettings: swiftSettings,
        linkerSettings: linkerSettings
    )
}

/// The unit tests of one service library (`<Library>Tests`): the library, the shared runtime, GRDB for
/// in-memory stores, and the injected clock of HeraldTestSupport.
func serviceTests(_ library: String, extra: [Target.Dependency] = []) -> Target {
    .testTarget(
        name: "\(library)Tests",
        dependencies: [
            .target(name: library), "HeraldTestSupport", "HeraldRPC", "HeraldTelemetry", "HeraldModel", "HeraldProto",
            "HeraldService",
            "HeraldSQL",
            "NotificationHubs",
            .product(name: "GRDB", package: "GRDB.swift"),
        ] + extra,
        swiftSettings: swiftSettings
    )
}

/// Benchmarks that print figures (never run as tests): scripts/bench.sh; only with `HERALD_BENCH`.
let benchTarget: Target = .executableTarget(
    name: "herald-bench",
    dependencies: [
        "HeraldRPC", "HeraldLeanTransport", "HeraldModel", "HeraldService", "HeraldSQL", "HeraldStack",
        "RegistrationService", "NotificationHubs",
        // The template loop counts dispatch's rendering (package access).
        "DispatchService", "PushProviders",
        // The APNs double answers by the rules the tests' double does.
        "ProviderDoubles",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
        .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        .product(name: "GRDB", package: "GRDB.swift"),
        // The edge scenario's baseline: a hello-world route on the same HTTP server.
        .product(name: "Hummingbird", package: "hummingbird"),
        // The soak scenario's HTTP client (already built for `herald device`).
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
        // The nh scenario signs its SAS token (HMAC-SHA256); the APNs double checks ES256.
        .product(name: "Crypto", package: "swift-crypto"),
        // The APNs double (fanout --provider apns): HTTP/2 over TLS on NIO.
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOPosix", package: "swift-nio"),
        .product(name: "NIOSSL", package: "swift-nio-ssl"),
        .product(name: "NIOHTTP2", package: "swift-nio-http2"),
        .product(name: "NIOHPACK", package: "swift-nio-http2"),
        // The edge scenario's tracing rows: an OTLP/gRPC collector that discards what it gets.
        "HeraldTelemetry",
        .product(name: "GRPCCore", package: "grpc-swift-2"),
        .product(name: "GRPCNIOTransportHTTP2Posix", package: "grpc-swift-nio-transport"),
    ],
    swiftSettings: swiftSettings,
    linkerSettings: linkerSettings
)

/// What the two whole-stack test targets use.
let stackTestDependencies: [Target.Dependency] = [
    "StackTestSupport", "HeraldStack", "HeraldRPC", "HeraldModel", "HeraldProto", "HeraldService", "HeraldSQL", "Edge",
    "HeraldTestSupport", "HeraldClient", "NotificationHubs", "PushProviders", "ProviderDoubles",
    .product(name: "AsyncHTTPClient", package: "async-http-client"),
    // The erase drill reads every table of the services' schemas.
    .product(name: "PostgresNIO", package: "postgres-nio"),
    .product(name: "GRDB", package: "GRDB.swift"),
    .product(name: "Logging", package: "swift-log"),
    .product(name: "NIOCore", package: "swift-nio"),
    .product(name: "NIOPosix", package: "swift-nio"),
    .product(name: "NIOHTTP1", package: "swift-nio"),
    .product(name: "NIOHTTP2", package: "swift-nio-http2"),
    .product(name: "NIOSSL", package: "swift-nio-ssl"),
    .product(name: "Crypto", package: "swift-crypto"),
]

let package = Package(
    name: "herald",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "herald", targets: ["herald"]),
        .executable(name: "herald-auth", targets: ["herald-auth"]),
        .executable(name: "herald-registration", targets: ["herald-registration"]),
        .executable(name: "herald-payload", targets: ["herald-payload"]),
        .executable(name: "herald-dispatch", targets: ["herald-dispatch"]),
        .executable(name: "herald-edge", targets: ["herald-edge"]),
        // For other teams' Swift services: `import HeraldClient`, typed clients of every RPC
        // (Examples/send-push shows one).
        .library(name: "HeraldClient", targets: ["HeraldClient"]),
    ] + (benchmarks ? [.executable(name: "herald-bench", targets: ["herald-bench"])] : []),
    dependencies: [
        .package(url: "https://github.com/grpc/grpc-swift-2.git", from: "2.4.3"),
        .package(url: "https://github.com/grpc/grpc-swift-nio-transport.git", from: "2.9.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1", traits: []),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        // NIOHTTPTypes: the HTTP parts the edge's ConnectionGuard sees (already in Hummingbird's graph).
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        // HTTPField names in the edge's route tests (already in Hummingbird's graph).
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.4.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        // Metrics: the swift-metrics API with a Prometheus text backend.
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // TLS for the lean protocol over TCP (grpc-swift's transport already depends on it).
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        // Already in the graph through grpc-swift's transport; named for SHA-256, HMAC and scrypt.
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        // JOSE for the push senders: ES256 (APNs provider tokens, VAPID) and RS256 (FCM's OAuth grant).
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        // X.509 parsing: an APNs certificate's subject (its topic). Already in the graph through jwt-kit.
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        // HTTP/2 framing for the loopback push-service doubles in the tests (already in the graph).
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        // PostgreSQL, the store replicas share (`database-url postgres://…`); SQLite stays the default.
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        // The web console: Mustache templates rendered on the server. Its multipart/form-data
        // uploads are read by HeraldModel's Multipart: multipart-kit 4.7.1 traps on a part header
        // name byte of 0x80 or more (Sources/HeraldModel/Multipart.swift).
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        // Tracing: the Tracer API Hummingbird already records its spans through, and W3C
        // `traceparent`/`tracestate` parsing. The OTLP exporter is Herald's own (docs/operations.md
        // says why not swift-otel).
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        .package(url: "https://github.com/swift-otel/swift-w3c-trace-context.git", from: "1.0.0"),
    ],
    targets: [
        // protobuf-c runtime from Debian's libprotobuf-c-dev.
        .systemLibrary(
            name: "CProtobufC",
            path: "Sources/CProtobufC",
            pkgConfig: "libprotobuf-c",
            providers: [.apt(["libprotobuf-c-dev"])]
        ),
        // protoc-c output, committed; regenerate with scripts/generate-proto.sh. Never edited by hand.
        .target(
            name: "CHeraldProto", dependencies: ["CProtobufC"],
            cSettings: fuzzing ? [.unsafeFlags(["-fsanitize=fuzzer-no-link,address"])] : []
        ),
        // Swift value types over the C structs + grpc-swift serializers. Partly generated (see scripts/).
        .target(
            name: "HeraldProto",
            dependencies: ["CHeraldProto", .product(name: "GRPCCore", package: "grpc-swift-2")],
            swiftSettings: swiftSettings
        ),
        // The vocabulary every module shares: names and tags, Web Push subscriptions, encodings,
        // Unix-millisecond time, status codes and ServiceError, settings (ConfigReader).
        .target(
            name: "HeraldModel",
            dependencies: ["HeraldProto"],
            swiftSettings: swiftSettings
        ),
        // Notification Hubs' wire formats, in one place: installation JSON and JSON-Patch, the
        // registrations' Atom XML (a bounded XML reader of its own), the template language, platform
        // headers as delivery options, platform names, SAS audiences, NH's time formats, batch bodies.
        // No I/O: the edge, registration, dispatch and auth use it.
        .target(
            name: "NotificationHubs",
            dependencies: ["HeraldModel", "HeraldProto", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: swiftSettings
        ),
        // Tracing: Herald's swift-distributed-tracing tracer (W3C trace context, sampling) and its
        // OTLP/gRPC exporter; the transports carry its context, the services open its spans.
        .target(
            name: "HeraldTelemetry",
            dependencies: [
                "HeraldModel",
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCNIOTransportHTTP2Posix", package: "grpc-swift-nio-transport"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
            ],
            swiftSettings: swiftSettings
        ),
        // RPC, as grpc-swift-2 splits it (GRPCCore, then each transport on its own): the core is what
        // any transport serves and calls through (the method table, a call's context and span, its
        // metrics, endpoints, limits, peer policy), with no transport in it.
        .target(
            name: "HeraldRPCCore",
            dependencies: [
                "HeraldProto", "HeraldModel", "HeraldTelemetry",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        // The lean protocol (docs/rpc-protocol.md): its frames, server and client on SwiftNIO. No
        // gRPC in it.
        .target(
            name: "HeraldLeanTransport",
            dependencies: [
                "HeraldRPCCore", "HeraldModel", "HeraldTelemetry",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // RPC as services use it: the typed clients and handler protocols generated from proto/,
        // `RPCClient` (either transport, replicas, discovery), the gRPC binding and server, TLS,
        // grpc.health.v1. It re-exports the core, as Hummingbird does HummingbirdCore's types.
        .target(
            name: "HeraldRPC",
            dependencies: [
                "HeraldRPCCore", "HeraldLeanTransport", "HeraldProto", "HeraldModel", "HeraldTelemetry",
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCNIOTransportHTTP2Posix", package: "grpc-swift-nio-transport"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
            ],
            swiftSettings: swiftSettings
        ),
        // The SQL seam: statements written once for SQLite (GRDB) and PostgreSQL (postgres-nio),
        // migrations, database URLs. No process, RPC or metrics code: a store and its tests need
        // only this and HeraldModel.
        .target(
            name: "HeraldSQL",
            dependencies: [
                "HeraldModel",
                .product(name: "GRDB", package: "GRDB.swift"), .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // A service process: start-up (ServiceDefinition, HeraldProcess), RuntimeConfig, logging and
        // metrics bootstrap, health probes, periodic jobs, opening its database.
        .target(
            name: "HeraldService",
            dependencies: [
                "HeraldModel", "HeraldRPC", "HeraldLeanTransport", "HeraldTelemetry", "HeraldProto", "HeraldSQL",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                // `ProcessContext.openDatabase` opens a SQLite file with GRDB's pool.
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                // SecretBox: AES-GCM envelope encryption of secrets at rest.
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The published client: re-exports the messages, the typed clients and the errors, plus a
        // HeraldClient holding one connection per service.
        .target(
            name: "HeraldClient",
            dependencies: [
                "HeraldModel", "HeraldProto", "HeraldRPC",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "AuthService",
            dependencies: [
                "HeraldRPC", "HeraldModel", "HeraldService", "HeraldSQL", "NotificationHubs",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "RegistrationService",
            dependencies: [
                "HeraldRPC", "HeraldTelemetry", "HeraldModel", "HeraldService", "HeraldSQL", "NotificationHubs",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"), .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PayloadService",
            dependencies: [
                "HeraldRPC", "HeraldModel", "HeraldService", "HeraldSQL", .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"), .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The push services' senders (APNs, FCM v1, WNS, Web Push), their HTTP/2 pool and HTTP
        // clients, and each provider's payload rules: what a delivery is and how it goes out. No
        // outbox, database or RPC: herald-dispatch's service owns those.
        .target(
            name: "PushProviders",
            dependencies: [
                "HeraldModel", "HeraldProto",
                // Outbound HTTP/1.1 or 2 to FCM, WNS, Web Push and OAuth token endpoints.
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                // The lean APNs path: HTTP/2 frames on a few pooled connections (HTTP2Pool).
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "X509", package: "swift-certificates"),
                // ECDH, HKDF and AES-GCM for Web Push's aes128gcm encoding.
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The push services' double (PushDouble: one HTTP/2 server on loopback) and what it holds
        // Herald's senders to (APNs' request rules, ES256 tokens), written once for the tests and
        // herald-bench; not a product, and not built on Herald's own modules, so a double does not
        // agree with a sender by sharing its code.
        .target(
            name: "ProviderDoubles",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "DispatchService",
            dependencies: [
                "HeraldRPC", "HeraldTelemetry", "HeraldModel", "HeraldService", "HeraldSQL", "NotificationHubs",
                "PushProviders",
                .product(name: "GRDB", package: "GRDB.swift"), .product(name: "Metrics", package: "swift-metrics"),
                // Credentials from the hub's settings become senders' HTTP clients (HubSenders).
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "Edge",
            dependencies: [
                "HeraldRPC", "HeraldTelemetry", "HeraldModel", "HeraldService", "HeraldClient", "NotificationHubs",
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Hummingbird", package: "hummingbird"),
                // HTTPS on the edge's own port (http-tls-cert/-key): NH's clients insist on https.
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "Mustache", package: "swift-mustache"),
                // The console's CSRF tokens (SHA-256 of the session's).
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // Supervises the five executables: used by `herald up` and by the integration tests.
        // Also backs up and restores the stack's SQLite files (`herald backup`, `herald restore`).
        .target(
            name: "HeraldStack",
            dependencies: [
                "HeraldRPC", "HeraldModel", "HeraldService", "HeraldSQL", .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings),
        executable("herald-auth", library: "AuthService"),
        executable("herald-registration", library: "RegistrationService"),
        executable("herald-payload", library: "PayloadService"),
        executable("herald-dispatch", library: "DispatchService"),
        executable("herald-edge", library: "Edge"),
        .executableTarget(
            name: "herald",
            dependencies: [
                "HeraldStack", "HeraldRPC", "HeraldModel", "HeraldService", "HeraldClient",
                // Only for the migrations each service knows: `herald restore` refuses a backup
                // a newer Herald made.
                "AuthService", "RegistrationService", "PayloadService", "DispatchService",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                // `herald device` speaks HTTP to the edge like the tutorial's app.
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            swiftSettings: swiftSettings,
            linkerSettings: linkerSettings
        ),
    ]
        + (benchmarks ? [benchTarget] : [])
        + (fuzzing
            ? [
                // libFuzzer targets (scripts/fuzz.sh); no `main`: libFuzzer's own drives LLVMFuzzerTestOneInput.
                .executableTarget(
                    name: "herald-fuzz",
                    dependencies: ["FuzzTargets"],
                    swiftSettings: swiftSettings + [.unsafeFlags(["-parse-as-library"])],
                    linkerSettings: [.unsafeFlags(["-sanitize=fuzzer,address"])]
                )
            ] : []) + [
            .testTarget(
                name: "HeraldProtoTests",
                dependencies: [
                    "HeraldProto", "HeraldTestSupport", .product(name: "GRPCCore", package: "grpc-swift-2"),
                ],
                swiftSettings: swiftSettings
            ),
            // Test targets: one per library (unit tests), plus IntegrationTests over the real executables.
            .target(
                name: "HeraldTestSupport",
                dependencies: [
                    "HeraldSQL", "HeraldModel", "HeraldTelemetry", .product(name: "Crypto", package: "swift-crypto"),
                    .product(name: "PostgresNIO", package: "postgres-nio"),
                    // The stall watch's timers on NIO's singleton event loops.
                    .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                    .product(name: "Logging", package: "swift-log"), .product(name: "GRDB", package: "GRDB.swift"),
                ],
                path: "Tests/HeraldTestSupport", swiftSettings: swiftSettings
            ),
            .testTarget(
                name: "HeraldModelTests", dependencies: ["HeraldModel", "HeraldProto", "HeraldTestSupport"],
                swiftSettings: swiftSettings),
            .testTarget(
                name: "NotificationHubsTests",
                dependencies: ["NotificationHubs", "HeraldModel", "HeraldProto", "HeraldTestSupport"],
                swiftSettings: swiftSettings),
            // herald up's supervisor without its processes.
            .testTarget(
                name: "HeraldStackTests",
                dependencies: ["HeraldStack", "HeraldModel", "HeraldRPC", "HeraldTestSupport"],
                swiftSettings: swiftSettings),
            .testTarget(
                name: "HeraldTelemetryTests",
                dependencies: [
                    "HeraldTelemetry", "HeraldModel", "HeraldTestSupport",
                    .product(name: "Tracing", package: "swift-distributed-tracing"),
                    .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
                ],
                swiftSettings: swiftSettings
            ),
            .testTarget(
                name: "HeraldRPCTests",
                dependencies: [
                    "HeraldRPC", "HeraldRPCCore", "HeraldLeanTransport", "HeraldTelemetry", "HeraldModel",
                    "HeraldProto",
                    "HeraldService", "HeraldSQL", "HeraldTestSupport",
                    .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                    .product(name: "NIOCore", package: "swift-nio"),
                    .product(name: "NIOEmbedded", package: "swift-nio"),
                    .product(name: "NIOPosix", package: "swift-nio"),
                    .product(name: "Tracing", package: "swift-distributed-tracing"),
                    .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
                ],
                swiftSettings: swiftSettings
            ),
            // The SQL seam on both stores, without the process module.
            .testTarget(
                name: "HeraldSQLTests",
                dependencies: [
                    "HeraldSQL", "HeraldModel", "HeraldRPC", "HeraldTestSupport",
                    .product(name: "GRDB", package: "GRDB.swift"),
                    .product(name: "PostgresNIO", package: "postgres-nio"),
                ],
                swiftSettings: swiftSettings
            ),
            .testTarget(
                name: "HeraldServiceTests",
                dependencies: [
                    "HeraldService", "HeraldSQL", "HeraldRPC", "HeraldModel", "HeraldProto", "PayloadService",
                    "HeraldTestSupport",
                    .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                    .product(name: "GRDB", package: "GRDB.swift"),
                    .product(name: "PostgresNIO", package: "postgres-nio"),
                    .product(name: "Metrics", package: "swift-metrics"),
                    .product(name: "NIOCore", package: "swift-nio"),
                    .product(name: "NIOEmbedded", package: "swift-nio"),
                    .product(name: "NIOHTTP1", package: "swift-nio"),
                    .product(name: "NIOPosix", package: "swift-nio"),
                ],
                swiftSettings: swiftSettings
            ),
            serviceTests("AuthService", extra: [.product(name: "NIOPosix", package: "swift-nio")]),
            serviceTests("RegistrationService"),
            serviceTests("PayloadService"),
            serviceTests(
                "DispatchService",
                extra: [
                    "PushProviders", .product(name: "Tracing", package: "swift-distributed-tracing"),
                    .product(name: "MetricsTestKit", package: "swift-metrics"),
                    .product(name: "Crypto", package: "swift-crypto"),
                ]),
            // The senders, the HTTP/2 pool (over a loopback HTTP/2 server) and the providers' rules,
            // without dispatch's outbox or process.
            .testTarget(
                name: "ProviderDoublesTests",
                dependencies: [
                    "ProviderDoubles", "HeraldTestSupport",
                    // A client nobody here wrote, over HTTP/2 and HTTP/1.1.
                    .product(name: "AsyncHTTPClient", package: "async-http-client"),
                    .product(name: "NIOCore", package: "swift-nio"),
                    .product(name: "NIOHTTP1", package: "swift-nio"),
                    .product(name: "NIOSSL", package: "swift-nio-ssl"),
                ],
                swiftSettings: swiftSettings
            ),
            .testTarget(
                name: "PushProvidersTests",
                dependencies: [
                    "PushProviders", "HeraldModel", "HeraldProto", "HeraldTestSupport",
                    // Herald's APNs requests against the rules the doubles answer by.
                    "ProviderDoubles",
                    .product(name: "Crypto", package: "swift-crypto"), .product(name: "JWTKit", package: "jwt-kit"),
                    .product(name: "NIOSSL", package: "swift-nio-ssl"),
                    .product(name: "NIOCore", package: "swift-nio"),
                    .product(name: "NIOPosix", package: "swift-nio"),
                    .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                    .product(name: "NIOHPACK", package: "swift-nio-http2"),
                    .product(name: "NIOHTTP1", package: "swift-nio"),
                ],
                swiftSettings: swiftSettings
            ),
            // The fuzz targets (what each checks: FuzzTargets.swift), for herald-fuzz's libFuzzer
            // driver and for FuzzCorpusTests, which replays every seed in the ordinary test run.
            .target(
                name: "FuzzTargets",
                dependencies: [
                    "HeraldProto", "HeraldModel", "HeraldRPC", "HeraldLeanTransport", "HeraldService", "HeraldSQL",
                    "Edge", "AuthService",
                    "RegistrationService", "DispatchService", "PushProviders", "NotificationHubs",
                    "EdgeTestSupport",
                    .product(name: "NIOCore", package: "swift-nio"),
                    .product(name: "NIOEmbedded", package: "swift-nio"),
                    .product(name: "GRDB", package: "GRDB.swift"), .product(name: "Logging", package: "swift-log"),
                    .product(name: "HTTPTypes", package: "swift-http-types"),
                    .product(name: "Hummingbird", package: "hummingbird"),
                    // LibraryFuzz.swift: the HTTP/1 handlers' output and the RSA PEM parse of FCM keys.
                    .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                    .product(name: "JWTKit", package: "jwt-kit"),
                ],
                path: "Tests/FuzzTargets", swiftSettings: swiftSettings
            ),
            .testTarget(
                name: "FuzzCorpusTests", dependencies: ["FuzzTargets", "HeraldTestSupport"],
                swiftSettings: swiftSettings
            ),
            // The four services' clients faked (EdgeTests, and the fuzz router target).
            .target(
                name: "EdgeTestSupport",
                dependencies: [
                    "Edge", "HeraldRPC", "HeraldModel", "HeraldProto", "RegistrationService",
                    .product(name: "Logging", package: "swift-log"),
                    .product(name: "Hummingbird", package: "hummingbird"),
                    .product(name: "HTTPTypes", package: "swift-http-types"),
                ],
                path: "Tests/EdgeTestSupport", swiftSettings: swiftSettings
            ),
            // The edge's routes in-process over fake service clients (HummingbirdTesting's `.router`).
            .testTarget(
                name: "EdgeTests",
                dependencies: [
                    "EdgeTestSupport", "HeraldTestSupport", "HeraldTelemetry",
                    "Edge", "HeraldRPC", "HeraldModel", "HeraldProto", "HeraldService", "HeraldSQL", "NotificationHubs",
                    // NH registrations in-process: the edge over a real RegistrationServer on an
                    // in-memory SQLite (NHRegistrationRouteTests).
                    "RegistrationService", .product(name: "GRDB", package: "GRDB.swift"),
                    .product(name: "Logging", package: "swift-log"),
                    .product(name: "Hummingbird", package: "hummingbird"),
                    .product(name: "HummingbirdTesting", package: "hummingbird"),
                    .product(name: "HTTPTypes", package: "swift-http-types"),
                ],
                swiftSettings: swiftSettings
            ),
            // The whole stack in a test: LiveStack runs the five services in this process
            // (InProcessStack) or as the executables (Stack); the push-service doubles; fixtures.
            .target(
                name: "StackTestSupport",
                dependencies: [
                    "HeraldStack", "HeraldRPC", "HeraldModel", "HeraldProto", "HeraldService", "HeraldSQL",
                    "HeraldTestSupport",
                    "AuthService", "RegistrationService", "PayloadService", "DispatchService", "Edge",
                    "PushProviders", "ProviderDoubles",
                    .product(name: "AsyncHTTPClient", package: "async-http-client"),
                    .product(name: "Logging", package: "swift-log"),
                    .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                    // The push-service doubles: HTTP/2 over TLS on loopback, checking ES256 signatures.
                    .product(name: "NIOCore", package: "swift-nio"),
                    .product(name: "NIOPosix", package: "swift-nio"),
                    .product(name: "NIOHTTP1", package: "swift-nio"),
                    .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                    .product(name: "NIOSSL", package: "swift-nio-ssl"),
                    .product(name: "Crypto", package: "swift-crypto"),
                ],
                path: "Tests/StackTestSupport", swiftSettings: swiftSettings
            ),
            // The whole stack in one test process: the tutorial contract, NH, the console,
            // hardening, erasure and export, push delivery to the doubles.
            .testTarget(
                name: "StackTests",
                dependencies: stackTestDependencies,
                swiftSettings: swiftSettings
            ),
            // What needs the services as processes: kill -9 and SIGSTOP drills, the supervisor,
            // backup/restore, replicas, tracing, metrics, TLS between services, clients in other
            // languages and the executables' command lines.
            .testTarget(
                name: "ProcessTests",
                dependencies: stackTestDependencies,
                swiftSettings: swiftSettings
            ),
        ]
)
