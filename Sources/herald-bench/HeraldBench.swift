import ArgumentParser
import Foundation
import HeraldLeanTransport
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack
import Logging
import ServiceLifecycle
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Benchmarks that print figures, each beside a baseline measured in the same run. Build with
/// `-c release`: debug builds are several times slower and say nothing about production.
struct HeraldBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald-bench",
        abstract: "Measure Herald against the machine's own limits.",
        subcommands: [
            AllBench.self, RPCBench.self, EdgeBench.self, FanoutBench.self, NHBench.self, SoakBench.self,
            ServeBench.self, HelloServer.self,
            APNsDoubleCommand.self, InstructionsBench.self, ReplicasBench.self, ConsoleBench.self, ExportBench.self,
            TemplateLoop.self, PeersBench.self, TenantsBench.self,
        ],
        defaultSubcommand: AllBench.self
    )
}

/// The request every path carries: an AuthenticateRequest of 62 bytes on the wire.
let benchRequest = AuthenticateRequest(authorization: String(repeating: "x", count: 60))

/// `herald-bench serve`: the server side, in a process of its own so its CPU can be measured alone.
struct ServeBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve", abstract: "Serve the benchmark's echo RPC (lean, gRPC) and a raw echo.",
        shouldDisplay: false)

    @Option var dir: String

    func run() async throws { try await execute() }

    func execute() async throws {
        var table = MethodTable()
        // An echo: the cheapest handler, so the figures are the transport's.
        table.register(AuthServiceMethods.authenticate) { request, _ in
            AuthenticateResponse(user: request.authorization)
        }
        let health = HealthReporter()
        health.register(into: &table)
        // As Herald's own cheap handlers (Authenticate, Health.Check) are started.
        table.startOnEventLoop(AuthServiceMethods.authenticate)
        table.startOnEventLoop(HealthMethods.check)
        for service in table.services + [""] { health.set(service, .serving) }
        let logger = Logger(label: "bench-server", factory: { _ in SwiftLogNoOpLogHandler() })
        try RawEcho.serve(path: "\(dir)/raw.sock")
        let group = ServiceGroup(
            services: [
                LeanServer(table: table, socketPath: "\(dir)/bench.sock", logger: logger),
                try RPCServer(table: table, socketPath: "\(dir)/bench.grpc.sock", logger: logger),
            ],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger)
        try await group.run()
    }
}

extension ServeBench {
    /// Starts `herald-bench serve` under `launcher` and waits until its lean echo answers.
    static func start(dir: String, launcher: [String], binDirectory: String) async throws -> Process {
        let process = Process()
        let command = launcher + [binDirectory + "/herald-bench", "serve", "--dir", dir]
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        try process.run()
        let deadline = ContinuousClock.now + .seconds(120)
        while ContinuousClock.now < deadline, process.isRunning {
            if await HeraldProcess.checkHealth(socketPath: "\(dir)/bench.sock") { return process }
            try await Task.sleep(for: .milliseconds(100))
        }
        process.terminate()
        throw BenchError("herald-bench serve did not start")
    }
}

/// `herald-bench rpc`: unary latency, throughput and server CPU per call over each path.
///
/// Three RPCs: an echo (the transports' own cost), and two real ones served by a real
/// herald-payload process: `grpc.health.v1.Health/Check` (cheap) and `FetchPayload` of a stored
/// secure payload (SQLite). Each over the lean protocol and gRPC, next to a raw Unix-socket echo of
/// the same request size: the floor nothing can beat.
struct RPCBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rpc", abstract: "Unary RPC over a Unix socket: raw echo floor, lean protocol, gRPC.")

    @OptionGroup var options: BenchOptions
    @Option(help: "Concurrent callers in the throughput phase.")
    var concurrency = 16

    func run() async throws { try await execute() }

    func execute() async throws {
        try options.show(try await RPCScenario(options: options, concurrency: concurrency).run(), scenarios: ["rpc"])
    }
}

/// The rpc scenario's work (a plain struct: ArgumentParser types are only made by parsing).
struct RPCScenario {
    var options: BenchOptions
    var concurrency = 16

    struct Figures: Codable {
        var path: String
        var p50Micros: Double
        var p99Micros: Double
        var callsPerSecondSequential: Double
        var callsPerSecondConcurrent: Double
        var serverCPUMicrosPerCall: Double
    }

    var seconds: Double { options.phaseSeconds }

    func run() async throws -> Report {
        var template = Array("/tmp/herald-bench-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw BenchError("cannot make a folder under /tmp") }
        let dir = String(cString: made)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let binDirectory = Stack.defaultBinDirectory()
        let server = Process()
        server.executableURL = URL(fileURLWithPath: binDirectory + "/herald-bench")
        server.arguments = ["serve", "--dir", dir]
        let payload = Process()
        payload.executableURL = URL(fileURLWithPath: binDirectory + "/herald-payload")
        payload.arguments = ["--runtime-dir", dir, "--data-dir", dir, "--log-level", "error"]
        // A write: UpsertRegistration (PUT api/register/{id}), one SQLite transaction per call or per batch.
        let registration = Process()
        registration.executableURL = URL(fileURLWithPath: binDirectory + "/herald-registration")
        registration.arguments = ["--runtime-dir", dir, "--data-dir", dir, "--log-level", "error"]
        try server.run()
        try payload.run()
        try registration.run()
        defer {
            for process in [server, payload, registration] {
                process.terminate()
                process.waitUntilExit()
            }
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while true {
            let echo = await HeraldProcess.checkHealth(socketPath: "\(dir)/bench.sock")
            let payloadUp = await HeraldProcess.checkHealth(socketPath: "\(dir)/payload.sock")
            let registrationUp = await HeraldProcess.checkHealth(socketPath: "\(dir)/registration.sock")
            if echo, payloadUp, registrationUp, FileManager.default.fileExists(atPath: "\(dir)/raw.sock") { break }
            guard ContinuousClock.now < deadline else { throw ValidationError("benchmark servers did not start") }
            try await Task.sleep(for: .milliseconds(50))
        }
        let stored = try await RPCClient.with(socketPath: "\(dir)/payload.sock") { client in
            try await PayloadServiceClient(client).storePayload(
                StorePayloadRequest(recipient: "bench", kind: .secure, content: Array("Secure confirmation.".utf8)))
        }
        let fetch = FetchPayloadRequest(id: stored.id, requester: "bench")
        let handle = String(repeating: "ab", count: 32)
        let registrationID = try await RPCClient.with(socketPath: "\(dir)/registration.sock") { client in
            try await RegistrationServiceClient(client).createRegistrationId(
                CreateRegistrationIdRequest(owner: "bench", handle: handle)
            )
            .registrationID
        }
        let upsert = UpsertRegistrationRequest(
            owner: "bench", registrationID: registrationID, platform: .apns, handle: handle, tags: ["news"])
        let health = HealthCheckRequest(service: "")

        var report = Report()
        var tables: [String] = []
        let rpcs:
            [(
                name: String, request: [UInt8], pid: Int32, sockets: (String, String),
                call: @Sendable (RPCClient) async throws -> Void
            )] = [
                (
                    "echo", try benchRequest.serializedBytes(), server.processIdentifier,
                    ("\(dir)/bench.sock", "\(dir)/bench.grpc.sock"),
                    { _ = try await AuthServiceClient($0).authenticate(benchRequest) }
                ),
                (
                    "Health/Check", try health.serializedBytes(), payload.processIdentifier,
                    ("\(dir)/payload.sock", "\(dir)/payload.grpc.sock"),
                    { _ = try await HealthClient($0).check(health) }
                ),
                (
                    "FetchPayload", try fetch.serializedBytes(), payload.processIdentifier,
                    ("\(dir)/payload.sock", "\(dir)/payload.grpc.sock"),
                    { _ = try await PayloadServiceClient($0).fetchPayload(fetch) }
                ),
                (
                    "UpsertRegistration", try upsert.serializedBytes(), registration.processIdentifier,
                    ("\(dir)/registration.sock", "\(dir)/registration.grpc.sock"),
                    { _ = try await RegistrationServiceClient($0).upsertRegistration(upsert) }
                ),
            ]
        for rpc in rpcs {
            let size = max(rpc.request.count, 1)
            let floor = try await measureRaw(
                dir: dir, request: [UInt8](repeating: 0x78, count: size), serverPID: server.processIdentifier)
            var rows = [floor]
            for transport in [RPCTransport.lean, .grpc] {
                let socket = transport == .lean ? rpc.sockets.0 : rpc.sockets.1
                let figures = try await measure(
                    transport: transport, socket: socket, serverPID: rpc.pid, call: rpc.call)
                rows.append(figures)
                let label = "\(rpc.name) over \(transport == .lean ? "lean" : "gRPC")"
                report.records.append(
                    Record(
                        "rpc", "\(label): p50 latency", unit: "µs", value: figures.p50Micros,
                        baseline: "raw echo \(size) B", baselineValue: floor.p50Micros, better: "lower",
                        target: transport == .lean && rpc.name != "UpsertRegistration" ? "≤ 3× raw" : nil))
                report.records.append(
                    Record(
                        "rpc", "\(label): p99 latency", unit: "µs", value: figures.p99Micros,
                        baseline: "raw echo \(size) B", baselineValue: floor.p99Micros, better: "lower"))
                report.records.append(
                    Record(
                        "rpc", "\(label): calls/s, \(concurrency) callers", unit: "calls/s",
                        value: figures.callsPerSecondConcurrent,
                        baseline: "raw echo \(size) B", baselineValue: floor.callsPerSecondConcurrent, better: "higher",
                        target: transport == .lean && rpc.name != "UpsertRegistration" ? "≥ 10,000/s" : nil))
            }
            tables.append(
                Self.table(rows, title: "\(rpc.name), \(rpc.request.count)-byte request", concurrency: concurrency))
        }
        report.tables = ["## rpc: unary RPC over a Unix socket (client and server share the machine's cores)"] + tables
        return report
    }

    // MARK: measuring

    func measure(
        transport: RPCTransport, socket: String, serverPID: Int32,
        call rpc: @escaping @Sendable (RPCClient) async throws -> Void
    ) async throws -> Figures {
        try await RPCClient.with(socketPath: socket, transport: transport, timeout: .seconds(10)) { client in
            let call: @Sendable () async throws -> Void = { try await rpc(client) }
            for _ in 0..<(options.quick ? 50 : 500) { try await call() }  // warm-up: connection, caches
            var latencies: [Duration] = []
            let sequentialEnd = ContinuousClock.now + .seconds(seconds)
            while ContinuousClock.now < sequentialEnd {
                let start = ContinuousClock.now
                try await call()
                latencies.append(ContinuousClock.now - start)
            }
            let cpuBefore = try Self.cpuSeconds(pid: serverPID)
            let concurrentStart = ContinuousClock.now
            let concurrentEnd = concurrentStart + .seconds(seconds)
            let calls = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<concurrency {
                    group.addTask {
                        var count = 0
                        while ContinuousClock.now < concurrentEnd {
                            try await call()
                            count += 1
                        }
                        return count
                    }
                }
                return try await group.reduce(0, +)
            }
            let elapsed = ContinuousClock.now - concurrentStart
            let cpu = try Self.cpuSeconds(pid: serverPID) - cpuBefore
            return Self.figures(
                path: transport == .lean ? "lean protocol" : "gRPC (HTTP/2)", latencies: latencies,
                sequentialSeconds: seconds,
                calls: calls, elapsed: elapsed, serverCPU: cpu)
        }
    }

    func measureRaw(dir: String, request: [UInt8], serverPID: Int32) async throws -> Figures {
        let path = "\(dir)/raw.sock"
        let seconds = self.seconds
        let concurrency = self.concurrency
        // Blocking sockets on threads of their own, off Swift's cooperative pool.
        let sequential: [Duration] = try await onThread {
            let fd = try RawEcho.connect(path: path)
            defer { close(fd) }
            var reply = [UInt8](repeating: 0, count: request.count)
            for _ in 0..<100 { RawEcho.roundTrip(fd, request, &reply) }
            var latencies: [Duration] = []
            let end = ContinuousClock.now + .seconds(seconds)
            while ContinuousClock.now < end {
                let start = ContinuousClock.now
                RawEcho.roundTrip(fd, request, &reply)
                latencies.append(ContinuousClock.now - start)
            }
            return latencies
        }
        let cpuBefore = try Self.cpuSeconds(pid: serverPID)
        let start = ContinuousClock.now
        let end = start + .seconds(seconds)
        let calls = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<concurrency {
                group.addTask {
                    try await onThread {
                        let fd = try RawEcho.connect(path: path)
                        defer { close(fd) }
                        var reply = [UInt8](repeating: 0, count: request.count)
                        var count = 0
                        while ContinuousClock.now < end {
                            RawEcho.roundTrip(fd, request, &reply)
                            count += 1
                        }
                        return count
                    }
                }
            }
            return try await group.reduce(0, +)
        }
        let elapsed = ContinuousClock.now - start
        let cpu = try Self.cpuSeconds(pid: serverPID) - cpuBefore
        return Self.figures(
            path: "raw socket echo, \(request.count) B (floor)", latencies: sequential, sequentialSeconds: seconds,
            calls: calls,
            elapsed: elapsed,
            serverCPU: cpu)
    }

    static func figures(
        path: String, latencies: [Duration], sequentialSeconds: Double, calls: Int, elapsed: Duration, serverCPU: Double
    ) -> Figures {
        let sorted = latencies.sorted()
        func micros(_ q: Double) -> Double {
            let d = sorted[min(sorted.count - 1, Int(Double(sorted.count) * q))]
            return Double(d.components.seconds) * 1e6 + Double(d.components.attoseconds) / 1e12
        }
        let elapsedSeconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return Figures(
            path: path, p50Micros: micros(0.5), p99Micros: micros(0.99),
            callsPerSecondSequential: Double(latencies.count) / sequentialSeconds,
            callsPerSecondConcurrent: Double(calls) / elapsedSeconds,
            serverCPUMicrosPerCall: serverCPU * 1e6 / Double(max(calls, 1)))
    }

    /// User + system CPU seconds of a process, from /proc/<pid>/stat.
    static func cpuSeconds(pid: Int32) throws -> Double {
        let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        // Fields after the parenthesised command name; utime and stime are the 14th and 15th fields.
        guard let close = stat.lastIndex(of: ")") else { throw BenchError("/proc/\(pid)/stat has no command name") }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else {
            throw BenchError("/proc/\(pid)/stat has no CPU times")
        }
        let ticks = user + system
        return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    static func table(_ results: [Figures], title: String, concurrency: Int) -> String {
        func f(_ x: Double, _ digits: Int = 0) -> String { String(format: "%.\(digits)f", x) }
        var lines = [
            "\(title):",
            "",
            "| path | p50 µs | p99 µs | calls/s, 1 caller | calls/s, \(concurrency) callers | server CPU µs/call |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in results {
            lines.append(
                "| \(r.path) | \(f(r.p50Micros, 1)) | \(f(r.p99Micros, 1)) | \(f(r.callsPerSecondSequential)) | \(f(r.callsPerSecondConcurrent)) | \(f(r.serverCPUMicrosPerCall, 1)) |"
            )
        }
        return lines.joined(separator: "\n")
    }
}

/// Runs blocking work on a thread of its own.
func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}
