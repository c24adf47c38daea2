import Foundation
import HeraldLeanTransport
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldTelemetry
public import Logging
import NIOCore
import NIOPosix
public import ServiceLifecycle
import Synchronization
import Tracing
public import UnixSignals

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

    /// The connection to a peer of the service (``ServiceName/peers``).
    public func client(_ peer: ServiceName) -> RPCClient {
        // trap-ok: peers are declared in code; a unit test starts each service with them.
        guard let client = clients[peer.rawValue] else { preconditionFailure("\(peer) is not a peer of this service") }
        return client
    }
}

/// One Herald executable's start-up, as a value: `main` runs it as a process, and a test builds the
/// same service in-process with ``HeraldProcess/makeServiceGroup(_:reader:logger:shutdownSignals:)``.
public struct ServiceDefinition: Sendable {
    /// The service's name: `herald-<name>`, `<name>.sock`, `<name>.sqlite`.
    public let name: String
    /// The services it calls; a client of each is made and run before its own services.
    public let peers: [String]
    /// Its own configuration keys besides ``RuntimeConfig``'s.
    public let extraKeys: Set<String>
    let makeServices: @Sendable (ProcessContext) async throws -> [any Service]

    /// A process that runs `makeServices`' services (the edge: an HTTP server). Its peers are the
    /// topology's (``ServiceName/peers``).
    public init(
        _ service: ServiceName, extraKeys: Set<String> = [],
        makeServices: @escaping @Sendable (ProcessContext) async throws -> [any Service]
    ) {
        self.name = service.rawValue
        self.peers = service.peers.map(\.rawValue)
        self.extraKeys = extraKeys
        self.makeServices = makeServices
    }

    /// An RPC service: `makeParts` gives its method table (plus background work and health checks);
    /// the table and grpc.health.v1 are served over the lean protocol and over gRPC, each on its own
    /// Unix socket unless turned off, and on TCP+TLS when configured. Health reports SERVING once
    /// every listener is up.
    public static func rpc(
        _ service: ServiceName, extraKeys: Set<String> = [],
        makeParts: @escaping @Sendable (ProcessContext) async throws -> RPCServiceParts
    ) -> ServiceDefinition {
        ServiceDefinition(service, extraKeys: extraKeys.union(PeerPolicy.keys)) { context in
            try await HeraldProcess.rpcServices(parts: try await makeParts(context), context: context)
        }
    }

    /// `--help`: every setting the executable reads, each as a flag and as its environment variable;
    /// what each means and its default are in services/<name>/README.md and services/README.md.
    public var help: String {
        let keys = RuntimeConfig.keys(peers: peers).union(extraKeys).sorted()
        let width = keys.map(\.count).max() ?? 0
        var lines = [
            "herald-\(name): the \(name) service of a Herald stack (services/\(name)/README.md).",
            "", "USAGE: herald-\(name) [--<setting> <value>]…", "",
            "Every setting is also read from its environment variable (a flag wins); a flag without a value is true.",
            "Settings (what each means, and its default: services/\(name)/README.md and services/README.md):",
        ]
        for key in keys {
            lines.append(
                "  --\(key.padding(toLength: width, withPad: " ", startingAt: 0))  \(ConfigReader.environmentName(key))"
            )
        }
        lines += [
            "", "Tracing: off unless OpenTelemetry's variables turn it on (OTEL_EXPORTER_OTLP_ENDPOINT,",
            "OTEL_TRACES_EXPORTER, OTEL_TRACES_SAMPLER…): docs/operations.md#tracing.",
        ]
        return lines.joined(separator: "\n")
    }

    /// Its ``RuntimeConfig`` from `reader`, refusing keys nobody reads (a typo must not silently
    /// fall back to a default).
    func runtimeConfig(_ reader: ConfigReader) throws -> RuntimeConfig {
        try reader.rejectUnknownArguments(known: RuntimeConfig.keys(peers: peers).union(extraKeys))
        return try RuntimeConfig(service: name, peers: peers, reader: reader)
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

    /// Builds a service from configuration without running it and without touching process-wide
    /// state (logging, metrics, signals unless asked, `exit`): rejects unknown keys, creates the
    /// runtime and data folders (0750), makes clients for the peers, asks the definition for the
    /// service's own lifecycle services, and puts them all in one `ServiceGroup` (clients first, so
    /// they stop last). Run the group; `triggerGracefulShutdown()` drains it.
    public static func makeServiceGroup(
        _ definition: ServiceDefinition, reader: ConfigReader, logger: Logger, shutdownSignals: [UnixSignal] = []
    ) async throws -> ServiceGroup {
        try await makeServiceGroup(
            definition, config: definition.runtimeConfig(reader), reader: reader, logger: logger,
            shutdownSignals: shutdownSignals,
            watchdog: nil)
    }

    /// As above, with the settings already read (``main(_:)`` reads them once, before logging).
    /// With a `watchdog` (a process, never a test's in-process group) a group that does not stop
    /// ends the process with exit status 1 instead of ServiceLifecycle's `fatalError`.
    private static func makeServiceGroup(
        _ definition: ServiceDefinition, config: RuntimeConfig, reader: ConfigReader, logger: Logger,
        shutdownSignals: [UnixSignal],
        watchdog: ExitWatchdog?,
        background: [any Service] = []
    ) async throws -> ServiceGroup {
        let name = definition.name
        let peers = definition.peers
        try makePrivateDirectory(config.runtimeDir)
        try makePrivateDirectory(config.dataDir)
        var clients: [String: RPCClient] = [:]
        for peer in peers {
            clients[peer] = try RPCClient(
                endpoints: config.endpoints(of: peer), transport: config.rpcTransport, tls: config.tls,
                defaultTimeout: config.rpcTimeout, healthInterval: config.healthInterval,
                discovery: config.discovery(of: peer))
        }
        let context = ProcessContext(config: config, reader: reader, logger: logger, clients: clients)
        var own = try await definition.makeServices(context)
        if let listen = config.metricsListen {
            own.append(
                MetricsServer(
                    host: listen.host, port: listen.port, urlFile: "\(config.runtimeDir)/\(name).metrics.url",
                    logger: logger))
        }
        // The exporter first, so it stops last and sends the spans of the drain.
        let services: [any Service] = background + peers.compactMap { clients[$0] } + own
        return ServiceGroup(
            configuration: .init(
                services: services.map { .init(service: ReportedService($0, logger: logger, watchdog: watchdog)) },
                gracefulShutdownSignals: shutdownSignals,
                cancellationSignals: [],
                logger: logger
            ).withDrainTimeout(config.drainTimeout)
        )
    }

    /// Runs one executable until SIGTERM/SIGINT: reads config from the command line and environment,
    /// bootstraps logging and metrics, answers `--check-health`, then runs
    /// ``makeServiceGroup(_:reader:logger:shutdownSignals:)``'s group. Exits 2 with a one-line message
    /// on a configuration error, 1 on a start-up error.
    public static func main(_ definition: ServiceDefinition) async -> Never {
        let name = definition.name
        let arguments = CommandLine.arguments.dropFirst()
        if arguments.contains("--help") || arguments.contains("-h") {
            print(definition.help)
            exit(0)
        }
        do {
            let reader = try ConfigReader.fromProcess()
            let config = try definition.runtimeConfig(reader)
            // OpenTelemetry's own variables (OTEL_*), not Herald settings: read before logging,
            // whose lines then carry trace_id and span_id.
            let tracing = try TracingConfiguration(
                environment: ProcessInfo.processInfo.environment, defaultServiceName: "herald-\(name)")
            let logger = try bootstrapLogging(service: name, config: config, tracing: tracing != nil)
            HeraldMetrics.bootstrap()
            let exporter = tracing.map { OTLPExporter(configuration: $0, logger: logger) }
            if let exporter {
                // A service with no peers makes no RPC: nothing to pass its callers' traces on to.
                HeraldTracing.install(exporter.makeTracer(), callsOut: !definition.peers.isEmpty)
                logger.info(
                    "tracing on",
                    metadata: [
                        "herald.otlp_endpoint": "\(exporter.configuration.host):\(exporter.configuration.port)"
                    ])
            }
            if try reader.bool("check-health") {
                guard let own = config.ownSocket else { throw ConfigError("no socket to check: both are off") }
                exit(await checkHealth(socketPath: own.path, transport: own.transport) ? 0 : 1)
            }
            // Sockets 0660 and folders 0750 at most, from the first file this process creates.
            umask(0o027)
            let group = try await makeServiceGroup(
                definition, config: config, reader: reader, logger: logger, shutdownSignals: [.sigterm, .sigint],
                watchdog: ExitWatchdog(drainTimeout: config.drainTimeout), background: exporter.map { [$0] } ?? [])
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

    /// Points swift-log at standard error, as text or JSON lines (`log-format`), at `log-level`.
    /// With `tracing`, every line logged inside a traced task carries `trace_id` and `span_id` (only
    /// `trace_id` in a trace passed on unsampled: this process has no span of it).
    private static func bootstrapLogging(service name: String, config: RuntimeConfig, tracing: Bool) throws -> Logger {
        guard let level = Logger.Level(rawValue: config.logLevel) else {
            throw ConfigError("log-level must be one of trace|debug|info|notice|warning|error|critical")
        }
        let format = config.logFormat
        let provider: Logger.MetadataProvider? =
            tracing
            ? Logger.MetadataProvider {
                if let passed = HeraldTracing.passedOn { return ["trace_id": .string(String(passed.traceID))] }
                guard let trace = InstrumentationContext.current?.traceContext else { return [:] }
                return ["trace_id": "\(trace.traceID)", "span_id": "\(trace.spanID)"]
            } : nil
        LoggingSystem.bootstrap(
            { label, provider in
                switch format {
                case .text:
                    var handler = TextLogHandler(label: label, metadataProvider: provider)
                    handler.logLevel = level
                    return handler
                case .json:
                    var handler = JSONLogHandler(label: label, metadataProvider: provider)
                    handler.logLevel = level
                    return handler
                }
            }, metadataProvider: provider)
        return Logger(label: "herald-\(name)")
    }

    /// An RPC service's lifecycle services: its background work, the health probe, and a listener
    /// per configured socket, all serving `parts.table` plus grpc.health.v1.
    fileprivate static func rpcServices(parts: RPCServiceParts, context: ProcessContext) async throws -> [any Service] {
        let policy = try PeerPolicy(reader: context.reader)
        var table = parts.table
        let health = HealthReporter()
        health.register(into: &table)
        table.startOnEventLoop(HealthMethods.check)  // memory only
        let config = context.config
        if config.testMode {
            context.logger.warning(
                "test-mode on: ResetForTests deletes everything this service owns; never run it in production")
        }
        let listeners = [
            config.leanSocketPath != nil, config.grpcSocketPath != nil, config.leanTCP != nil, config.grpcTCP != nil,
        ]
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
        for (peer, rpc) in context.clients.sorted(by: { $0.key < $1.key }) {
            let client = HealthClient(rpc)
            checks.append(
                HealthCheck("peer:\(peer)") {
                    // Replicas: the client checks each itself; SERVING while any of them is.
                    if rpc.replicaHealth.count > 1 {
                        guard rpc.replicaHealth.contains(where: \.healthy) else {
                            throw ServiceError.unavailable("no replica of \(peer) answers SERVING")
                        }
                        return
                    }
                    let answer = try await client.check(HealthCheckRequest(service: ""), timeout: .seconds(1))
                    guard answer.status == .serving else {
                        throw ServiceError.unavailable("\(peer) is \(answer.status)")
                    }
                })
        }
        var servers: [any Service] = []
        if let path = config.leanSocketPath {
            servers.append(
                LeanServer(
                    table: table, socketPath: path, logger: context.logger, health: health, peers: policy,
                    onListening: onListening))
        }
        if let path = config.grpcSocketPath {
            servers.append(
                try RPCServer(
                    table: table, endpoint: .unix(path), tls: nil, logger: context.logger, health: health,
                    peers: policy,
                    onListening: onListening))
        }
        if let endpoint = config.leanTCP {
            servers.append(
                LeanServer(
                    table: table, endpoint: endpoint, tls: try config.tls.serverContext(), logger: context.logger,
                    health: health,
                    onListening: onListening))
        }
        if let endpoint = config.grpcTCP {
            servers.append(
                try RPCServer(
                    table: table, endpoint: endpoint, tls: config.tls, logger: context.logger, health: health,
                    onListening: onListening))
        }
        let probe = HealthProbe(health: health, checks: checks, interval: config.healthInterval, logger: context.logger)
        return parts.background + (checks.isEmpty ? [] : [probe]) + servers
    }

    /// One health check against a socket: true when the server as a whole is SERVING.
    public static func checkHealth(
        socketPath: String, transport: RPCTransport = .lean, timeout: Duration = .seconds(2)
    ) async -> Bool {
        do {
            let response = try await RPCClient.with(socketPath: socketPath, transport: transport, timeout: timeout) {
                client in
                try await HealthClient(client).check(HealthCheckRequest(service: ""))
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
    /// Conditions health reports on besides listening and peers, e.g. ``SQLDatabase/healthCheck``.
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
        // ServiceLifecycle's own bound ends a group that outlives it with `fatalError` (SIGILL), and a
        // process's first error was lost with it. A process's watchdog bounds the same time with a
        // logged exit 1. An in-process group (tests) has no bound: the library's fatalError took the
        // whole test process, sixty suites, with it (seen on a loaded machine, even at 30 s); a test
        // that runs a group sets its own time limit, which fails that test alone, by name.
        copy.maximumCancellationDuration = nil
        return copy
    }
}

/// One service of a group, reporting how it ended the moment it ends.
///
/// ServiceLifecycle logs a service's error at debug level only, then cancels the others; the error
/// reaches `main` only once every other service has stopped. A service that does not honour
/// cancellation (a listener still binding, a client still connecting) used to hold it back until
/// the library's cancellation bound killed the process by `fatalError`, so a start-up failure died
/// by SIGILL with its cause unsaid. Here the first failure is logged at error level as it happens,
/// and the process's ``ExitWatchdog`` gives the others a bounded time to stop.
struct ReportedService: Service, CustomStringConvertible {
    let inner: any Service
    let logger: Logger
    let watchdog: ExitWatchdog?

    init(_ inner: any Service, logger: Logger, watchdog: ExitWatchdog?) {
        self.inner = inner
        self.logger = logger
        self.watchdog = watchdog
    }

    var description: String { String(describing: type(of: inner)) }

    func run() async throws {
        do {
            try await withGracefulShutdownHandler {
                try await inner.run()
            } onGracefulShutdown: { [watchdog] in
                watchdog?.arm(
                    after: watchdog?.drainBound ?? .zero,
                    "the drain did not finish within drain-timeout-ms and its bound")
            }
        } catch {
            if Task.isCancelled || error is CancellationError {
                logger.debug("\(description) stopped on cancellation: \(error)")
            } else {
                logger.error("\(description) failed: \(error)", metadata: ["herald.error": "\(error)"])
                watchdog?.arm(
                    after: ExitWatchdog.cancellationBound, "\(description) failed (\(error)) and the group did not stop"
                )
            }
            throw error
        }
        if !Task.isCancelled, !Task.isShuttingDownGracefully {
            logger.error("\(description) stopped unexpectedly")
            watchdog?.arm(after: ExitWatchdog.cancellationBound, "\(description) stopped and the group did not stop")
        }
    }
}

/// Ends a process whose service group does not stop in time, with its reason on standard error and
/// exit status 1, on a thread of its own (the cooperative pool may be the thing that is stuck).
final class ExitWatchdog: Sendable {
    /// How long the rest of a group may take to stop once one service has failed.
    static let cancellationBound = Duration.seconds(5)

    /// How long a drain may take from SIGTERM: the drain timeout, then the cancellation it ends in.
    let drainBound: Duration
    private let armed = Mutex(false)

    init(drainTimeout: Duration) {
        drainBound = drainTimeout + Self.cancellationBound
    }

    /// Starts the countdown; the first call wins.
    func arm(after bound: Duration, _ reason: String) {
        let first = armed.withLock { armed in
            defer { armed = true }
            return !armed
        }
        guard first else { return }
        let seconds = Double(bound.components.seconds) + Double(bound.components.attoseconds) / 1e18
        Thread {
            Thread.sleep(forTimeInterval: seconds)
            printError("herald: \(reason); exiting after \(bound)")
            _exit(1)
        }.start()
    }
}
