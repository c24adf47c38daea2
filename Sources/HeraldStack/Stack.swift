import Foundation
public import HeraldModel
public import HeraldRPC
import HeraldService
public import Logging
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// How to run the whole stack on one machine: the five executables under one folder.
public struct StackConfiguration: Sendable {
    /// The stack's folder: sockets in `run/`, SQLite files in `data/`, logs in `logs/` when captured.
    public var directory: String
    public var httpHost = "127.0.0.1"
    /// 0 picks a free port (tests).
    public var httpPort = 8080
    /// `accounts` (users from `herald users add`) or `tutorial` (user == password).
    public var authMode = AuthMode.accounts
    public var profile = EdgeProfile.secure
    public var logLevel = "info"
    /// What the services speak between themselves (each serves both).
    public var rpcTransport = RPCTransport.lean
    /// Where the `herald-*` executables are; default: beside the running executable.
    public var binDirectory: String
    /// Write each child's output to `<directory>/logs/<service>.log` instead of this process's.
    public var captureLogs = false
    /// How long start-up may take before it fails.
    public var startTimeout: Duration = .seconds(60)
    /// When set, the services call each other over TCP with (mutual) TLS on loopback instead of
    /// their Unix sockets, which stay on for health checks and the CLI.
    public var tls: StackTLS?
    /// With ``tls``: each service names its peers `dns:///localhost:<port>` (found by look-up, TLS
    /// checked against the name) instead of `127.0.0.1:<port>`.
    public var peersByName = false
    /// `postgres://…`: every service in ``Stack/postgresServices`` keeps its data there, each in
    /// its own schema (`herald_<service>`); the others stay on SQLite files. nil: SQLite only.
    public var databaseURL: String?
    /// Extra `--key value` settings per service (e.g. "payload": ["--default-ttl-seconds", "5"]).
    public var extraArguments: [String: [String]] = [:]
    /// A command to run a service under, per service (e.g. "edge": ["valgrind", "--tool=callgrind"]).
    public var launchers: [String: [String]] = [:]
    /// Environment variables for every service besides this process's own (e.g. OTEL_* for tracing).
    public var environment: [String: String] = [:]

    public init(directory: String, binDirectory: String? = nil) {
        self.directory = URL(fileURLWithPath: directory).standardizedFileURL.path
        self.runtimeDirectory = self.directory + "/run"
        self.dataDirectory = self.directory + "/data"
        self.binDirectory = binDirectory ?? Stack.defaultBinDirectory()
    }

    /// The sockets' folder; `<directory>/run` unless set.
    public var runtimeDirectory: String
    /// The SQLite files' folder; `<directory>/data` unless set.
    public var dataDirectory: String
    public var logDirectory: String { directory + "/logs" }

    /// The socket of a service for ``rpcTransport``.
    public func socketPath(_ service: String) -> String {
        switch rpcTransport {
        case .lean: leanSocketPath(service)
        case .grpc: grpcSocketPath(service)
        }
    }

    /// The lean-protocol socket of a service.
    public func leanSocketPath(_ service: String) -> String { "\(runtimeDirectory)/\(service).sock" }
    /// The standard gRPC socket of a service.
    public func grpcSocketPath(_ service: String) -> String { "\(runtimeDirectory)/\(service).grpc.sock" }

    /// `<logDirectory>/<service>.log`, created if missing, open for appending: where a service's
    /// output goes, as a process (``captureLogs``) or in a test's in-process stack.
    package func openLog(_ service: String) throws -> FileHandle {
        let path = "\(logDirectory)/\(service).log"
        if !FileManager.default.fileExists(atPath: path) {
            _ = FileManager.default.createFile(atPath: path, contents: nil)
        }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        log.seekToEndOfFile()
        return log
    }

    /// The command line of `service` in this stack: the one ``Stack`` starts its executable with,
    /// and the one an in-process stack builds its service from. `tcpPorts` are the loopback ports
    /// (lean, gRPC) of each RPC service when ``tls`` is set; `httpPort`, the edge's once it has one.
    package func arguments(
        for service: String, tcpPorts: [String: (lean: Int, grpc: Int)] = [:], httpPort: Int? = nil
    ) -> [String] {
        let c = self
        var arguments = [
            "--runtime-dir", c.runtimeDirectory, "--data-dir", c.dataDirectory, "--log-level", c.logLevel,
            "--rpc-transport", c.rpcTransport.rawValue,
        ]
        switch service {
        case ServiceName.auth.rawValue: arguments += ["--auth-mode", c.authMode.rawValue]
        // Their secrets at rest sealed under a keyring beside the data (never inside a backup),
        // unless the stack names a command that prints it (a KMS).
        case ServiceName.dispatch.rawValue, ServiceName.payload.rawValue:
            if !(c.extraArguments[service] ?? []).contains("--encryption-key-command") {
                arguments += ["--encryption-keys", "\(c.dataDirectory)/\(service).keys"]
            }
        default: break
        }
        if let tls = c.tls {
            arguments += [
                "--tls-cert", tls.certificate, "--tls-key", tls.key, "--tls-ca", tls.ca, "--tls-require-client-cert",
            ]
            if let ports = tcpPorts[service] {
                arguments += [
                    "--listen-tcp", "127.0.0.1:\(ports.lean)", "--grpc-listen-tcp", "127.0.0.1:\(ports.grpc)",
                ]
            }
            let host = c.peersByName ? "dns:///localhost" : "127.0.0.1"
            for peer in (ServiceName(rawValue: service)?.peers ?? []).map(\.rawValue) {
                guard let ports = tcpPorts[peer] else { continue }
                // The peer's socket is pointed nowhere: the call can only go over TCP.
                switch c.rpcTransport {
                case .lean:
                    arguments += [
                        "--\(peer)-address", "\(host):\(ports.lean)", "--\(peer)-socket",
                        "\(c.runtimeDirectory)/none-\(peer).sock",
                    ]
                case .grpc:
                    arguments += [
                        "--\(peer)-grpc-address", "\(host):\(ports.grpc)", "--\(peer)-grpc-socket",
                        "\(c.runtimeDirectory)/none-\(peer).sock",
                    ]
                }
            }
        }
        switch service {
        case ServiceName.edge.rawValue:
            arguments += [
                "--http-host", c.httpHost, "--http-port", String(httpPort ?? c.httpPort), "--profile",
                c.profile.rawValue,
            ]
        default: break
        }
        if let url = c.databaseURL, Stack.postgresServices.contains(service) { arguments += ["--database-url", url] }
        return arguments + (c.extraArguments[service] ?? [])
    }
}

/// PEM files for a stack whose services talk TCP + TLS: one certificate (valid for 127.0.0.1)
/// serves as every service's server and client identity, signed by `ca`.
public struct StackTLS: Sendable {
    public var certificate: String
    public var key: String
    public var ca: String

    public init(certificate: String, key: String, ca: String) {
        self.certificate = certificate
        self.key = key
        self.ca = ca
    }
}

/// Why the stack could not start.
public struct StackError: Error, CustomStringConvertible {
    public var description: String
    public init(description: String) { self.description = description }
}

/// Runs the five Herald executables as child processes, in dependency order, and supervises them.
///
/// `start()` returns once every RPC service answers SERVING on grpc.health.v1 and the edge is
/// listening. A child that dies afterwards is restarted (with backoff) until `stop()`, which sends
/// SIGTERM in reverse order, lets each drain, and kills what is left after its drain timeout.
/// `herald up` and the integration tests both run the stack through this type.
public actor Stack {
    /// Start order: every service after those it calls.
    public static let services = ServiceName.allCases.map(\.rawValue)
    public static let rpcServices = ServiceName.rpcServices.map(\.rawValue)
    /// The services that keep their data in a database: each can keep it in PostgreSQL.
    public static let postgresServices = ["auth", "payload", "registration", "dispatch"]
    /// Loopback ports (lean, gRPC) per RPC service when ``StackConfiguration/tls`` is set.
    private var tcpPorts: [String: (lean: Int, grpc: Int)] = [:]

    public nonisolated let configuration: StackConfiguration
    private let logger: Logger
    private var children: [String: Process] = [:]
    private var restarts: [String: Int] = [:]
    /// Restarts in a row without a healthy run between them: what the backoff grows with.
    private var crashLoop: [String: Int] = [:]
    /// When each child was started.
    private var startedAt: [String: ContinuousClock.Instant] = [:]
    /// A child that ran this long before it exited was healthy: its next restart starts the
    /// backoff again from 100 ms. Without it, a service that had once crashed a few times stayed at
    /// 10 s for good, and one request every 10 s could keep it down.
    package static let healthyRun = Duration.seconds(30)
    private var exits: [String: [Int32]] = [:]
    private var supervising = false
    private var stopping = false
    /// The edge's base URL, known once `start()` returns.
    public private(set) var edgeURL = ""
    /// The port the edge listens on once started (the one it picked when `httpPort` is 0).
    private var boundHTTPPort: Int?

    public init(configuration: StackConfiguration, logger: Logger = Logger(label: "herald")) {
        self.configuration = configuration
        self.logger = logger
    }

    /// The folder of the running executable (where SwiftPM puts all products).
    public static func defaultBinDirectory() -> String {
        let exe =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: exe).deletingLastPathComponent().path
    }

    /// Starts every service and waits until all are healthy. On failure, stops what started.
    public func start() async throws {
        let c = configuration
        for dir in [c.directory, c.runtimeDirectory, c.dataDirectory] + (c.captureLogs ? [c.logDirectory] : []) {
            try makePrivateDirectory(dir)
        }
        try? FileManager.default.removeItem(atPath: c.runtimeDirectory + "/edge.url")
        if c.tls != nil, tcpPorts.isEmpty {
            for service in Self.rpcServices { tcpPorts[service] = (try Self.freePort(), try Self.freePort()) }
        }
        do {
            for service in Self.services {
                try spawn(service)
                try await waitUntilReady(service)
            }
            edgeURL = try String(contentsOfFile: c.runtimeDirectory + "/edge.url", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            // A restarted edge must come back where its clients are: on the port it picked, not a new one.
            boundHTTPPort = URL(string: edgeURL)?.port
            supervising = true
        } catch {
            await stop()
            throw error
        }
    }

    /// Stops every child: SIGTERM in reverse start order, SIGKILL after 15 s.
    public func stop() async {
        stopping = true
        supervising = false
        for service in Self.services.reversed() {
            guard let process = children[service] else { continue }
            if process.isRunning { kill(process.processIdentifier, SIGTERM) }
            let deadline = ContinuousClock.now + .seconds(15)
            while process.isRunning, ContinuousClock.now < deadline {
                try? await Task.sleep(for: .milliseconds(20))
            }
            if process.isRunning {
                logger.warning("herald-\(service) did not stop in time; killing it")
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
            }
            children[service] = nil
        }
        try? FileManager.default.removeItem(atPath: configuration.runtimeDirectory + "/edge.url")
    }

    /// The process id of a running service (tests use it to kill one).
    public func pid(of service: String) -> Int32? {
        children[service].map { $0.processIdentifier }
    }

    /// How many times a service has been restarted after dying.
    public func restartCount(of service: String) -> Int { restarts[service] ?? 0 }

    /// The exit statuses of a service's processes so far, oldest first.
    public func exitStatuses(of service: String) -> [Int32] { exits[service] ?? [] }

    // MARK: children

    private func arguments(for service: String) -> [String] {
        configuration.arguments(for: service, tcpPorts: tcpPorts, httpPort: boundHTTPPort)
    }

    private func spawn(_ service: String) throws {
        let c = configuration
        let executable = "\(c.binDirectory)/herald-\(service)"
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw StackError(description: "\(executable) not found; build first (swift build)")
        }
        let process = Process()
        if let launcher = c.launchers[service], let command = launcher.first {
            process.executableURL = URL(fileURLWithPath: command)
            process.arguments = Array(launcher.dropFirst()) + [executable] + arguments(for: service)
        } else {
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments(for: service)
        }
        if !c.environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(c.environment) { $1 }
        }
        if c.captureLogs {
            let log = try c.openLog(service)
            process.standardOutput = log
            process.standardError = log
        }
        process.terminationHandler = { [weak self] ended in
            let status = ended.terminationStatus
            Task { await self?.exited(service, process: ended, status: status) }
        }
        try process.run()
        children[service] = process
        startedAt[service] = .now
        logger.debug("started herald-\(service)", metadata: ["herald.pid": "\(process.processIdentifier)"])
    }

    private func exited(_ service: String, process: Process, status: Int32) async {
        exits[service, default: []].append(status)
        guard children[service] === process, supervising, !stopping else { return }
        restarts[service, default: 0] += 1
        let count = Self.crashesInARow(
            previous: crashLoop[service] ?? 0, ranFor: startedAt[service].map { ContinuousClock.now - $0 })
        crashLoop[service] = count
        let delay = Self.restartDelay(afterCrashes: count)
        logger.warning("herald-\(service) exited with status \(status); restarting in \(delay)")
        try? await Task.sleep(for: delay)
        guard supervising, !stopping, children[service] === process else { return }
        do {
            try spawn(service)
        } catch {
            logger.error("cannot restart herald-\(service): \(error)")
        }
    }

    /// The crashes in a row counting this one: a run of ``healthyRun`` or longer ends the series.
    package static func crashesInARow(previous: Int, ranFor uptime: Duration?) -> Int {
        if let uptime, uptime >= healthyRun { return 1 }
        return previous + 1
    }

    /// 100 ms after the first crash of a run of crashes, doubling up to 10 s.
    package static func restartDelay(afterCrashes count: Int) -> Duration {
        .milliseconds(min(100 << min(max(count, 1) - 1, 8), 10_000))
    }

    private func waitUntilReady(_ service: String) async throws {
        let deadline = ContinuousClock.now + configuration.startTimeout
        while ContinuousClock.now < deadline {
            if let process = children[service], !process.isRunning {
                throw StackError(
                    description: "herald-\(service) exited with status \(process.terminationStatus) during start-up"
                        + (configuration.captureLogs ? "; see \(configuration.logDirectory)/\(service).log" : ""))
            }
            if await Self.isReady(service, in: configuration) { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw StackError(description: "herald-\(service) was not ready within \(configuration.startTimeout)")
    }

    /// Whether `service` of the stack `configuration` describes is up: an RPC service answers
    /// SERVING on its socket, the edge has written `edge.url`.
    package static func isReady(_ service: String, in configuration: StackConfiguration) async -> Bool {
        if service == ServiceName.edge.rawValue {
            return FileManager.default.fileExists(atPath: configuration.runtimeDirectory + "/edge.url")
        }
        let socket = configuration.socketPath(service)
        guard FileManager.default.fileExists(atPath: socket) else { return false }
        return await HeraldProcess.checkHealth(
            socketPath: socket, transport: configuration.rpcTransport, timeout: .milliseconds(500))
    }

    /// Ports this process has handed out: two stacks of one test run never get the same one.
    private static let handedOut = Mutex<Set<Int>>([])

    /// A loopback TCP port nothing listens on right now, for a service to bind a moment later.
    ///
    /// Taken below Linux's ephemeral range (32768–60999 by default), not from `bind(0)`: a port the
    /// kernel picks is one it also gives to outgoing connections, and in CI one did, between this
    /// check and the service's bind (herald-dispatch failed to start in the TLS-over-TCP test).
    package static func freePort() throws -> Int {
        for _ in 0..<1000 {
            let port = Int.random(in: 20000..<32768)
            guard handedOut.withLock({ $0.insert(port).inserted }), canBind(port) else { continue }
            return port
        }
        throw StackError(description: "no free loopback port in 20000-32767")
    }

    /// Whether a listener could bind 127.0.0.1:`port` now.
    private static func canBind(_ port: Int) -> Bool { onLoopback(port) { bind($0, $1, $2) } }

    /// Whether something accepts TCP connections on 127.0.0.1:`port` now (a server that names no
    /// file to wait for, as herald-bench's nghttpd).
    package static func isListening(_ port: Int) -> Bool { onLoopback(port) { connect($0, $1, $2) } }

    /// `call` (bind or connect) on a new TCP socket with 127.0.0.1:`port`; the socket is closed after.
    private static func onLoopback(
        _ port: Int, _ call: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Int32
    ) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        let length = socklen_t(MemoryLayout<sockaddr_in>.size)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { call(fd, $0, length) }
        } == 0
    }

    /// Waits until a restarted service is healthy again (tests after killing one).
    public func waitUntilHealthy(_ service: String, timeout: Duration = .seconds(30)) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if children[service]?.isRunning == true, await Self.isReady(service, in: configuration) { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw StackError(description: "herald-\(service) did not become healthy within \(timeout)")
    }
}
