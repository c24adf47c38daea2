internal import AuthService
internal import DispatchService
internal import Edge
internal import Foundation
internal import HeraldModel
internal import HeraldService
package import HeraldStack
internal import Logging
internal import PayloadService
internal import RegistrationService
internal import ServiceLifecycle
internal import Synchronization

/// The whole stack in this process: the five services' ``ServiceDefinition``s, each built from the
/// command line ``Stack`` would start its executable with, each run as its own `ServiceGroup`, over
/// real Unix sockets in a temporary folder and real databases.
///
/// What a test sees is what the executables give it: the same sockets, `edge.url`, SQLite files or
/// PostgreSQL schemas, logs in `<directory>/logs/<service>.log`; the `herald` command-line tool
/// works against it as against ``Stack``. What it cannot do is what needs a process: kill -9 or
/// SIGSTOP one service, restart it, give it its own environment (tracing), read its metrics
/// endpoint (the metrics system is per process). Those tests are in ProcessTests.
///
/// As Hummingbird's `LiveTestFramework` runs a real server on port 0 inside a `ServiceGroup`: no
/// process start, no dynamic linking of five debug executables, nothing left behind when a test
/// process dies.
package actor InProcessStack {
    package nonisolated let configuration: StackConfiguration
    private var running: [(service: String, group: ServiceGroup, run: Task<Void, any Error>)] = []
    /// The services whose group has returned or thrown, with how.
    private let ended = Ended()
    package private(set) var edgeURL = ""

    package init(configuration: StackConfiguration) {
        self.configuration = configuration
    }

    /// The definition each executable's `main` runs.
    static func definition(_ service: ServiceName) -> ServiceDefinition {
        switch service {
        case .auth: AuthServer.definition
        case .registration: RegistrationServer.definition
        case .payload: PayloadServer.definition
        case .dispatch: DispatchServer.definition
        case .edge: EdgeServer.definition
        }
    }

    /// Starts every service in dependency order and waits until each is ready (an RPC service
    /// SERVING on its socket, the edge's `edge.url` written). On failure, stops what started.
    package func start() async throws {
        let c = configuration
        guard c.tls == nil, c.launchers.isEmpty else {
            throw StackError(description: "TLS between services and launchers need processes: use Stack")
        }
        for dir in [c.directory, c.runtimeDirectory, c.dataDirectory, c.logDirectory] {
            try makePrivateDirectory(dir)
        }
        try? FileManager.default.removeItem(atPath: c.runtimeDirectory + "/edge.url")
        do {
            for service in ServiceName.allCases {
                try await launch(service)
                try await waitUntilReady(service.rawValue)
            }
            edgeURL = try String(contentsOfFile: c.runtimeDirectory + "/edge.url", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
        } catch {
            await stop()
            throw error
        }
    }

    private func launch(_ service: ServiceName) async throws {
        let arguments = configuration.arguments(for: service.rawValue)
        // The settings a process would read from its environment (HERALD_*); OTEL_* needs a process.
        let environment = configuration.environment.filter { $0.key.hasPrefix("HERALD_") }
        let reader = try ConfigReader(arguments: arguments, environment: environment)
        let logger = try serviceLogger(service, reader: reader)
        let group = try await HeraldProcess.makeServiceGroup(Self.definition(service), reader: reader, logger: logger)
        let ended = self.ended
        let name = service.rawValue
        let run = Task {
            do {
                try await group.run()
                ended.map.withLock { $0[name] = "stopped" }
            } catch {
                ended.map.withLock { $0[name] = "failed: \(error)" }
                throw error
            }
        }
        running.append((name, group, run))
    }

    /// A logger writing the service's lines to `<logDirectory>/<service>.log`, in its `log-format`
    /// at its `log-level` as the executable reads them, as the process's standard error would be
    /// captured.
    private func serviceLogger(_ service: ServiceName, reader: ConfigReader) throws -> Logger {
        let config = try RuntimeConfig(
            service: service.rawValue, peers: Self.definition(service).peers, reader: reader)
        guard let level = Logger.Level(rawValue: config.logLevel) else {
            throw ConfigError("log-level must be one of trace|debug|info|notice|warning|error|critical")
        }
        let file = try configuration.openLog(service.rawValue)
        let json = config.logFormat == .json
        return Logger(label: "herald-\(service.rawValue)") { label in
            var handler: any LogHandler =
                json ? JSONLogHandler(label: label, output: file) : TextFileLogHandler(label: label, output: file)
            handler.logLevel = level
            return handler
        }
    }

    private func waitUntilReady(_ service: String) async throws {
        let deadline = ContinuousClock.now + configuration.startTimeout
        while ContinuousClock.now < deadline {
            if let how = ended.map.withLock({ $0[service] }) {
                throw StackError(
                    description:
                        "herald-\(service) \(how) during start-up; see \(configuration.logDirectory)/\(service).log"
                )
            }
            if await Stack.isReady(service, in: configuration) { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw StackError(description: "herald-\(service) was not ready within \(configuration.startTimeout)")
    }

    /// Drains every service, the edge first (reverse start order), each to the end of its drain,
    /// as SIGTERM does to the processes.
    package func stop() async {
        for entry in running.reversed() {
            await entry.group.triggerGracefulShutdown()
            _ = await entry.run.result
        }
        running = []
        try? FileManager.default.removeItem(atPath: configuration.runtimeDirectory + "/edge.url")
    }

    /// Whether `service` has run since start without its group ending (the in-process form of "the
    /// process never exited").
    package func isRunning(_ service: String) -> Bool {
        running.contains { $0.service == service } && ended.map.withLock { $0[service] } == nil
    }
}

/// How each service's group ended, once it has.
private final class Ended: Sendable {
    let map = Mutex<[String: String]>([:])
}

/// swift-log's text format (`StreamLogHandler`'s) into a file: the library's handler writes to
/// standard output or error only.
struct TextFileLogHandler: LogHandler {
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info
    let label: String
    let output: FileHandle
    private static let lock = Mutex(())

    init(label: String, output: FileHandle) {
        self.label = label
        self.output = output
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var merged = metadata
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        let fields = merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        let time = Date().formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
        let line = "\(time) \(event.level) \(label): \(fields.isEmpty ? "" : "[\(fields)] ")\(event.message)\n"
        Self.lock.withLock { _ in output.write(Data(line.utf8)) }
    }
}
