import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2Posix
import GRPCNIOTransportCore
import NIOCore
import NIOPosix
import HeraldProto
public import Logging
public import ServiceLifecycle
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// What a process's own code gets at start-up.
public struct ProcessContext: Sendable {
    public let config: RuntimeConfig
    public let reader: ConfigReader
    public let logger: Logger
    /// Clients of the declared peers, by name; already part of the process's service group.
    public let clients: [String: RPCClient]

    /// The client of a declared peer.
    public func client(_ peer: String) -> RPCClient {
        guard let client = clients[peer] else { preconditionFailure("\(peer) is not a declared peer") }
        return client
    }
}

/// The start-up every Herald executable shares, so `@main`s stay a few lines.
public enum HeraldProcess {
    /// Makes SwiftNIO's event loops Swift Concurrency's global executor, so handler tasks run on
    /// the threads that do the socket I/O instead of hopping to and from a separate pool on every
    /// call. Call it first thing in `main`, on the main thread, before any task runs.
    @discardableResult
    public static func installEventLoopExecutor() -> Bool {
        NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }

    /// Runs one executable until SIGTERM/SIGINT: reads config (rejecting unknown flags), bootstraps
    /// logging, creates the runtime and data folders (0750), makes clients for `peers`, asks `makeServices`
    /// for the process's own lifecycle services, and runs all of them in one `ServiceGroup` (clients
    /// first, so they stop last). Exits 1 with a one-line message on a configuration or start-up error.
    public static func main(
        service name: String,
        peers: [String] = [],
        extraKeys: Set<String> = [],
        makeServices: @Sendable (ProcessContext) async throws -> [any Service]
    ) async -> Never {
        do {
            let reader = try ConfigReader.fromProcess()
            try reader.rejectUnknownArguments(known: RuntimeConfig.keys(peers: peers).union(extraKeys))
            let config = try RuntimeConfig(service: name, peers: peers, reader: reader)
            guard let level = Logger.Level(rawValue: config.logLevel) else {
                throw ConfigError("log-level must be one of trace|debug|info|notice|warning|error|critical")
            }
            let format = config.logFormat
            LoggingSystem.bootstrap { label in
                switch format {
                case .text:
                    var handler = StreamLogHandler.standardError(label: label)
                    handler.logLevel = level
                    return handler
                case .json:
                    var handler = JSONLogHandler(label: label)
                    handler.logLevel = level
                    return handler
                }
            }
            let logger = Logger(label: "herald-\(name)")
            HeraldMetrics.bootstrap()

            if try reader.bool("check-health") {
                guard let own = config.ownSocket else { throw ConfigError("no socket to check: both are off") }
                exit(await checkHealth(socketPath: own.path, transport: own.transport) ? 0 : 1)
            }

            // Sockets 0660 and folders 0750 at most, from the first file this process creates.
            umask(0o027)
            try makePrivateDirectory(config.runtimeDir)
            try makePrivateDirectory(config.dataDir)
            var clients: [String: RPCClient] = [:]
            for peer in peers {
                clients[peer] = try RPCClient(
                    endpoint: config.endpoint(of: peer), transport: config.rpcTransport, tls: config.tls,
                    defaultTimeout: config.rpcTimeout)
            }
            let context = ProcessContext(config: config, reader: reader, logger: logger, clients: clients)
            var own = try await makeServices(context)
            if let listen = config.metricsListen {
                own.append(MetricsServer(
                    host: listen.host, port: listen.port, urlFile: "\(config.runtimeDir)/\(name).metrics.url", logger: logger))
            }
            let group = ServiceGroup(
                configuration: .init(
                    services: peers.map { .init(service: clients[$0]!) } + own.map { .init(service: $0) },
                    gracefulShutdownSignals: [.sigterm, .sigint],
                    cancellationSignals: [],
                    logger: logger
                ).withDrainTimeout(config.drainTimeout)
            )
            try await group.run()
            logger.info("stopped")
            exit(0)
        } catch let error as ConfigError {
            printError("herald-\(name): \(error)")
            exit(2)
        } catch {
            printError("herald-\(name): \(error)")
            exit(1)
        }
    }

    /// Runs an RPC service: `makeTable` registers its handlers, and the table (plus grpc.health.v1) is
    /// served over the lean protocol and over gRPC, each on its own Unix socket unless turned off.
    /// Health reports SERVING once every listener is up.
    public static func main(
        rpcService name: String,
        peers: [String] = [],
        extraKeys: Set<String> = [],
        makeTable: @escaping @Sendable (ProcessContext) async throws -> MethodTable
    ) async -> Never {
        await main(rpcService: name, peers: peers, extraKeys: extraKeys) { context in
            RPCServiceParts(table: try await makeTable(context))
        }
    }

    /// As ``main(rpcService:peers:extraKeys:makeTable:)``, for a service that also runs background
    /// work (``Periodic`` housekeeping) beside its listeners.
    public static func main(
        rpcService name: String,
        peers: [String] = [],
        extraKeys: Set<String> = [],
        makeParts: @escaping @Sendable (ProcessContext) async throws -> RPCServiceParts
    ) async -> Never {
        await main(service: name, peers: peers, extraKeys: extraKeys.union(PeerPolicy.keys)) { context in
            let parts = try await makeParts(context)
            let policy = try PeerPolicy(reader: context.reader)
            var table = parts.table
            let health = HealthReporter()
            health.register(into: &table)
            let config = context.config
            let listeners = [config.leanSocketPath != nil, config.grpcSocketPath != nil, config.leanTCP != nil, config.grpcTCP != nil]
                .filter { $0 }.count
            guard listeners > 0 else {
                throw ConfigError("socket and grpc-socket are both off and no TCP listener is set: nothing to serve on")
            }
            let listening = Mutex(0)
            health.setCondition("listening", false)
            health.track(table.services + [""])
            let onListening: @Sendable () -> Void = {
                let all = listening.withLock { count in
                    count += 1
                    return count == listeners
                }
                if all { health.setCondition("listening", true) }
            }
            // Conditions checked every health-interval: the database takes a write, peers answer SERVING.
            var checks = parts.healthChecks
            for peer in context.clients.keys.sorted() {
                let client = context.clients[peer]!
                checks.append(HealthCheck("peer:\(peer)") {
                    let answer = try await client.call(HealthMethods.check, HealthCheckRequest(service: ""), timeout: .seconds(1))
                    guard answer.status == .serving else { throw ServiceError.unavailable("\(peer) is \(answer.status)") }
                })
            }
            var servers: [any Service] = []
            if let path = config.leanSocketPath {
                servers.append(LeanServer(
                    table: table, socketPath: path, logger: context.logger, health: health, peers: policy, onListening: onListening))
            }
            if let path = config.grpcSocketPath {
                servers.append(RPCServer(
                    table: table, socketPath: path, logger: context.logger, health: health, peers: policy, onListening: onListening))
            }
            if let endpoint = config.leanTCP {
                servers.append(LeanServer(
                    table: table, endpoint: endpoint, tls: try config.tls.serverContext(), logger: context.logger, health: health,
                    onListening: onListening))
            }
            if let endpoint = config.grpcTCP {
                servers.append(try RPCServer(
                    table: table, endpoint: endpoint, tls: config.tls, logger: context.logger, health: health,
                    onListening: onListening))
            }
            let probe = HealthProbe(health: health, checks: checks, interval: config.healthInterval, logger: context.logger)
            return parts.background + (checks.isEmpty ? [] : [probe]) + servers
        }
    }

    /// One health check against a socket: true when the server as a whole is SERVING.
    public static func checkHealth(
        socketPath: String, transport: RPCTransport = .lean, timeout: Duration = .seconds(2)
    ) async -> Bool {
        do {
            let response = try await RPCClient.with(socketPath: socketPath, transport: transport, timeout: timeout) { client in
                try await client.call(HealthMethods.check, HealthCheckRequest(service: ""))
            }
            return response.status == .serving
        } catch {
            return false
        }
    }
}

/// What an RPC service runs: its method table, and background services beside the listeners.
public struct RPCServiceParts: Sendable {
    public var table: MethodTable
    public var background: [any Service]
    /// Conditions health reports on besides listening and peers, e.g. ``HealthCheck/database(_:)``.
    public var healthChecks: [HealthCheck]

    public init(table: MethodTable, background: [any Service] = [], healthChecks: [HealthCheck] = []) {
        self.table = table
        self.background = background
        self.healthChecks = healthChecks
    }
}

/// Writes one line to standard error (for start-up failures, before or instead of logging).
public func printError(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

/// Creates `path` (and its parents) with mode 0750 when missing.
public func makePrivateDirectory(_ path: String) throws {
    try FileManager.default.createDirectory(
        atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o750]
    )
}

extension ServiceGroupConfiguration {
    fileprivate func withDrainTimeout(_ timeout: Duration) -> Self {
        var copy = self
        copy.maximumGracefulShutdownDuration = timeout
        copy.maximumCancellationDuration = .seconds(2)
        return copy
    }
}

/// A method table served over gRPC on a Unix socket, as a lifecycle service.
///
/// Once bound, the socket is made 0660 and `onListening` runs; on graceful shutdown `health` reports
/// NOT_SERVING, in-flight calls drain, and the socket file is removed.
public final class RPCServer: Service {
    private let server: GRPCServer<HTTP2ServerTransport.Posix>
    private let health: HealthReporter?
    private let endpoint: RPCEndpoint
    private let logger: Logger
    private let onListening: @Sendable () -> Void
    private let draining = DrainFlag()

    /// With `peers`, a connection from a process the policy does not allow is logged and closed
    /// at once (grpc-swift has no per-connection hook that could answer a status instead).
    public convenience init(
        table: MethodTable, socketPath: String, logger: Logger, health: HealthReporter? = nil, peers: PeerPolicy? = nil,
        onListening: @escaping @Sendable () -> Void = {}
    ) {
        try! self.init(
            table: table, endpoint: .unix(socketPath), tls: nil, logger: logger, health: health, peers: peers,
            onListening: onListening)
    }

    /// On TCP, `tls` (required there) gives the server's identity and, optionally, the client CA.
    public init(
        table: MethodTable, endpoint: RPCEndpoint, tls: TLSFiles?, logger: Logger, health: HealthReporter? = nil,
        peers: PeerPolicy? = nil, onListening: @escaping @Sendable () -> Void = {}
    ) throws {
        self.health = health
        self.endpoint = endpoint
        self.logger = logger
        self.onListening = onListening
        let address: GRPCNIOTransportCore.SocketAddress
        let security: HTTP2ServerTransport.Posix.TransportSecurity
        var peers = peers
        switch endpoint {
        case .unix(let path):
            address = .unixDomainSocket(path: path)
            security = .plaintext
        case .tcp(let host, let port):
            address = host.contains(":") ? .ipv6(host: host, port: port) : .ipv4(host: host, port: port)
            guard let tls else { throw ConfigError("listening on TCP needs tls-cert and tls-key") }
            security = try tls.grpcServerSecurity()
            peers = nil  // peer credentials exist on Unix sockets only
        }
        let transport = HTTP2ServerTransport.Posix(
            address: address,
            transportSecurity: security,
            config: .defaults { config in
                // Coalescing delays every flush by up to 100 µs; internal calls are latency-bound.
                config.connection.flushCoalescing = nil
                config.rpc.maxRequestPayloadSize = RPCLimits.maxMessageBytes
                if let peers {
                    config.channelDebuggingCallbacks.onAcceptTCPConnection = { channel in
                        peers.refusal(for: channel).flatMap { refusal in
                            guard let refusal else { return channel.eventLoop.makeSucceededVoidFuture() }
                            logger.warning("refused a caller (grpc)", metadata: ["herald.peer": "\(refusal)"])
                            return channel.close()
                        }
                    }
                }
            }
        )
        self.server = GRPCServer(transport: transport, services: [GRPCBinding(table: table, logger: logger, draining: draining)])
    }

    public func run() async throws {
        let socketPath = endpoint.unixPath
        defer { if let socketPath { unlink(socketPath) } }
        try await withGracefulShutdownHandler {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await self.server.serve() }
                if try await server.listeningAddress != nil {
                    if let socketPath { chmod(socketPath, 0o660) }
                    logger.info("listening (grpc)", metadata: ["herald.endpoint": "\(endpoint)"])
                    onListening()
                }
                try await group.waitForAll()
            }
        } onGracefulShutdown: {
            self.logger.info("draining")
            self.draining.set()
            self.health?.beginDraining()
            self.server.beginGracefulShutdown()
        }
    }
}
