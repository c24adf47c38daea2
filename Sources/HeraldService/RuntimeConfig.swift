import Foundation
public import HeraldModel
public import HeraldRPC
import HeraldSQL

/// Settings every Herald process shares. Keys (environment variable `HERALD_<KEY>`), with defaults:
///
/// - `runtime-dir` (`.herald/run`): the folder of the Unix sockets; created with mode 0750.
/// - `data-dir` (`.herald/data`): the folder of the SQLite files; created with mode 0750.
/// - `socket` (`<runtime-dir>/<service>.sock`): the lean-protocol socket (mode 0660); `off` disables it.
/// - `grpc-socket` (`<runtime-dir>/<service>.grpc.sock`): the standard gRPC socket; `off` disables it.
/// - `database` (`<data-dir>/<service>.sqlite`): this service's own SQLite file.
/// - `database-url` (`sqlite:<database>`): this service's store, SQLite or PostgreSQL (see
///   ``DatabaseURL``); `postgres://…` lets replicas of the service share one database.
/// - `rpc-transport` (`lean`): what this process's clients speak, `lean` or `grpc`.
/// - `<peer>-socket` (`<runtime-dir>/<peer>.sock`), `<peer>-grpc-socket` (`<runtime-dir>/<peer>.grpc.sock`):
///   where a service it calls listens, per transport; a comma-separated list names replicas, which
///   calls are spread over (see ``RPCClient``).
/// - `log-level` (`info`): trace, debug, info, notice, warning, error or critical.
/// - `rpc-timeout-ms` (5000): deadline of the calls this process makes.
/// - `drain-timeout-ms` (10000): how long shutdown waits for in-flight calls.
/// - `log-format` (`text`): `text`, or `json` (one JSON object per line, for containers).
/// - `listen-tcp` (`off`), `grpc-listen-tcp` (`off`): `host:port` to also serve the lean protocol /
///   gRPC on TCP, always with TLS (see ``TLSFiles``), for callers on other machines.
/// - `<peer>-address`, `<peer>-grpc-address` (unset): `host:port` of a called service on TCP (TLS),
///   used instead of its socket; a comma-separated list names replicas; `dns:///name:port` names
///   them by every address `name` resolves to (a Kubernetes headless Service), looked up again
///   every `dns-refresh-seconds` (5), TLS checking each against `name` (see ``RPCDiscovery``).
/// - `metrics-listen` (`off`): `host:port` of an HTTP listener serving `GET /metrics` (Prometheus
///   text); port 0 picks one, written to `<runtime-dir>/<service>.metrics.url`.
/// - `health-interval-ms` (2000): how often health re-checks the database and the services this
///   one calls; any failing check makes it NOT_SERVING until it passes again.
/// - `encryption-keys` (off): the folder of the key-encryption keys that seal this service's secrets
///   at rest (herald-dispatch's push credentials, herald-payload's content; see ``Keyring``);
///   given a first key when it has none. Replicas sharing a PostgreSQL database share the folder's
///   keys. `herald up` sets `<data-dir>/<service>.keys`. Off: stored as they are, with a warning.
/// - `encryption-key-command` (off): instead of the folder, a command (`/bin/sh -c`) that prints the
///   keys, `<name> <base64>` a line, the current first: a KMS or a secret manager (``Keyring``).
public struct RuntimeConfig: Sendable {
    public var service: String
    public var runtimeDir: String
    public var dataDir: String
    /// nil when turned off.
    public var leanSocketPath: String?
    /// nil when turned off.
    public var grpcSocketPath: String?
    public var databasePath: String
    public var databaseURL: DatabaseURL
    public var rpcTransport: RPCTransport
    public var logLevel: String
    public var rpcTimeout: Duration
    public var drainTimeout: Duration
    public var logFormat: LogFormat
    public var healthInterval: Duration
    /// nil when off.
    public var metricsListen: (host: String, port: Int)?
    /// TCP listeners (TLS), nil when off.
    public var leanTCP: RPCEndpoint?
    public var grpcTCP: RPCEndpoint?
    public var tls: TLSFiles
    /// `encryption-keys`: the keyring's folder; nil when off.
    public var encryptionKeys: String?
    /// `encryption-key-command`: the command that prints the keyring; nil when off.
    public var encryptionKeyCommand: String?
    /// `test-mode`: the service answers ResetForTests (and the edge serves `/v1/test/*`). For
    /// integration-test stacks only (docker-compose.test.yml); off by default and in production.
    public var testMode: Bool
    private var peerAddresses: [String: [RPCEndpoint]] = [:]
    private var peerNames: [String: RPCDiscovery] = [:]
    private var peerSockets: [String: [String]]

    public enum LogFormat: String, CaseIterable, Sendable {
        case text, json
    }

    /// The keys this struct reads, for ``ConfigReader/rejectUnknownArguments(known:)``.
    public static func keys(peers: [String]) -> Set<String> {
        Set(
            [
                "runtime-dir", "data-dir", "socket", "grpc-socket", "database", "database-url", "rpc-transport",
                "log-level",
                "rpc-timeout-ms", "drain-timeout-ms", "check-health", "log-format", "health-interval-ms",
                "metrics-listen", "listen-tcp",
                "grpc-listen-tcp", "test-mode", "dns-refresh-seconds", "encryption-keys", "encryption-key-command",
            ]
                + peers.flatMap { ["\($0)-socket", "\($0)-grpc-socket", "\($0)-address", "\($0)-grpc-address"] }
        )
        .union(TLSFiles.keys)
    }

    /// The longest Unix socket path Linux accepts (`sun_path` is 108 bytes with its NUL).
    public static let maxSocketPathBytes = 107

    public init(service: String, peers: [String], reader: ConfigReader) throws {
        self.service = service
        runtimeDir = reader.string("runtime-dir", default: ".herald/run")
        dataDir = reader.string("data-dir", default: ".herald/data")
        func socket(_ key: String, _ fallback: String) throws -> String? {
            let path = reader.string(key, default: fallback)
            if path == "off" { return nil }
            guard path.utf8.count <= Self.maxSocketPathBytes else {
                throw ConfigError(
                    "\(key) \(path) is \(path.utf8.count) bytes; Unix socket paths are at most \(Self.maxSocketPathBytes)"
                )
            }
            return path
        }
        leanSocketPath = try socket("socket", "\(runtimeDir)/\(service).sock")
        grpcSocketPath = try socket("grpc-socket", "\(runtimeDir)/\(service).grpc.sock")
        databasePath = reader.string("database", default: "\(dataDir)/\(service).sqlite")
        databaseURL = try DatabaseURL(
            reader.string("database-url", default: "sqlite:\(databasePath)"), service: service)
        if case .sqlite(let path) = databaseURL { databasePath = path }
        rpcTransport = try reader.choice("rpc-transport", default: .lean)
        logLevel = reader.string("log-level", default: "info")
        rpcTimeout = .milliseconds(try reader.int("rpc-timeout-ms", default: 5000))
        drainTimeout = .milliseconds(try reader.int("drain-timeout-ms", default: 10000))
        logFormat = try reader.choice("log-format", default: .text)
        let interval = try reader.int("health-interval-ms", default: 2000)
        guard interval > 0 else { throw ConfigError("health-interval-ms must be positive") }
        healthInterval = .milliseconds(interval)
        let listen = reader.string("metrics-listen", default: "off")
        if listen == "off" {
            metricsListen = nil
        } else {
            guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]),
                (0...65535).contains(port)
            else { throw ConfigError("metrics-listen must be off or host:port, e.g. 127.0.0.1:9100") }
            metricsListen = (String(listen[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]")), port)
        }
        func tcp(_ key: String) throws -> RPCEndpoint? {
            let text = reader.string(key, default: "off")
            return text == "off" ? nil : try RPCEndpoint.tcp(text, key: key)
        }
        leanTCP = try tcp("listen-tcp")
        grpcTCP = try tcp("grpc-listen-tcp")
        tls = try TLSFiles(reader: reader)
        testMode = try reader.bool("test-mode")
        let keys = reader.string("encryption-keys", default: "off")
        encryptionKeys = keys == "off" || keys.isEmpty ? nil : keys
        let command = reader.string("encryption-key-command", default: "off")
        encryptionKeyCommand = command == "off" || command.isEmpty ? nil : command
        if encryptionKeys != nil, encryptionKeyCommand != nil {
            throw ConfigError("set encryption-keys or encryption-key-command, not both")
        }
        let refresh = try reader.int("dns-refresh-seconds", default: 5)
        guard (1...3600).contains(refresh) else { throw ConfigError("dns-refresh-seconds must be 1...3600") }
        for peer in peers {
            let key = rpcTransport == .lean ? "\(peer)-address" : "\(peer)-grpc-address"
            let text = reader.string(key, default: "off")
            guard text != "off" else { continue }
            let items = try Self.list(text, key: key)
            if let named = try items.lazy.compactMap({ try RPCDiscovery.parse($0, key: key) }).first {
                guard items.count == 1 else {
                    throw ConfigError("\(key): a dns:/// name stands alone, not in a list: \(text)")
                }
                peerNames[peer] = .dns(name: named.name, port: named.port, refresh: .seconds(refresh))
                peerAddresses[peer] = [.tcp(host: named.name, port: named.port)]
                continue
            }
            peerAddresses[peer] = try items.map { try RPCEndpoint.tcp($0, key: key) }
        }
        var peerSockets: [String: [String]] = [:]
        for peer in peers {
            let key = rpcTransport == .lean ? "\(peer)-socket" : "\(peer)-grpc-socket"
            let fallback = rpcTransport == .lean ? "\(runtimeDir)/\(peer).sock" : "\(runtimeDir)/\(peer).grpc.sock"
            let text = reader.string(key, default: fallback)
            if text == "off" { throw ConfigError("the socket of \(peer) cannot be off: \(service) calls it") }
            peerSockets[peer] = try Self.list(text, key: key).map { path in
                guard path.utf8.count <= Self.maxSocketPathBytes else {
                    throw ConfigError(
                        "\(key) \(path) is \(path.utf8.count) bytes; Unix socket paths are at most \(Self.maxSocketPathBytes)"
                    )
                }
                return path
            }
        }
        self.peerSockets = peerSockets
    }

    /// The items of a comma-separated setting, none empty.
    private static func list(_ text: String, key: String) throws -> [String] {
        let items = text.split(separator: ",", omittingEmptySubsequences: false).map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        guard !items.contains(where: \.isEmpty) else { throw ConfigError("\(key) has an empty item: \(text)") }
        return items
    }

    /// Where a peer's replicas are for ``rpcTransport``: their TCP addresses when set, else their
    /// sockets. One, unless the setting lists several.
    public func endpoints(of peer: String) -> [RPCEndpoint] {
        peerAddresses[peer] ?? socketPaths(of: peer).map { .unix($0) }
    }

    /// How a peer's replicas are found by name (`dns:///name:port`); nil when they are listed.
    public func discovery(of peer: String) -> RPCDiscovery? { peerNames[peer] }

    /// The first socket of a peer named in `peers` at init, for ``rpcTransport``.
    public func socketPath(of peer: String) -> String { socketPaths(of: peer)[0] }

    /// The sockets of a peer's replicas, for ``rpcTransport``.
    public func socketPaths(of peer: String) -> [String] {
        // trap-ok: peers are declared in code; a unit test starts each service with them.
        guard let paths = peerSockets[peer] else { preconditionFailure("\(peer) is not a declared peer of \(service)") }
        return paths
    }

    /// This service's own socket for ``rpcTransport`` (or the other one when that is off).
    public var ownSocket: (path: String, transport: RPCTransport)? {
        switch (rpcTransport, leanSocketPath, grpcSocketPath) {
        case (.lean, let lean?, _): (lean, .lean)
        case (.grpc, _, let grpc?): (grpc, .grpc)
        case (_, let lean?, _): (lean, .lean)
        case (_, _, let grpc?): (grpc, .grpc)
        default: nil
        }
    }
}
