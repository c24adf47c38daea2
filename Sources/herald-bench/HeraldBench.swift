import ArgumentParser
import Foundation
import HeraldProto
import HeraldRPC
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
        subcommands: [RPCBench.self, ServeBench.self]
    )
}

/// The request every path carries: an AuthenticateRequest of 62 bytes on the wire.
let benchRequest = AuthenticateRequest(authorization: String(repeating: "x", count: 60))

/// `herald-bench serve`: the server side, in a process of its own so its CPU can be measured alone.
struct ServeBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve", abstract: "Serve the benchmark's echo RPC (lean, gRPC) and a raw echo.", shouldDisplay: false)

    @Option var dir: String

    func run() async throws { try await execute() }

    func execute() async throws {
        var table = MethodTable()
        // An echo: the cheapest handler, so the figures are the transport's.
        table.register(AuthServiceMethods.authenticate) { request, _ in AuthenticateResponse(user: request.authorization) }
        let health = HealthReporter()
        health.register(into: &table)
        for service in table.services + [""] { health.set(service, .serving) }
        let logger = Logger(label: "bench-server", factory: { _ in SwiftLogNoOpLogHandler() })
        try RawEcho.serve(path: "\(dir)/raw.sock")
        let group = ServiceGroup(
            services: [
                LeanServer(table: table, socketPath: "\(dir)/bench.sock", logger: logger),
                RPCServer(table: table, socketPath: "\(dir)/bench.grpc.sock", logger: logger),
            ],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger)
        try await group.run()
    }
}

/// `herald-bench rpc`: unary latency, throughput and server CPU per call over each path.
struct RPCBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rpc", abstract: "Unary RPC over a Unix socket: raw echo floor, lean protocol, gRPC.")

    @Option(help: "Seconds each phase runs.")
    var seconds: Double = 3
    @Option(help: "Concurrent callers in the throughput phase.")
    var concurrency = 16
    @Option(help: "Also write the figures as JSON to this file.")
    var json: String?

    struct Figures: Codable {
        var path: String
        var p50Micros: Double
        var p99Micros: Double
        var callsPerSecondSequential: Double
        var callsPerSecondConcurrent: Double
        var serverCPUMicrosPerCall: Double
    }

    func run() async throws { try await execute() }

    func execute() async throws {
        var template = Array("/tmp/herald-bench-XXXXXX".utf8CString)
        let dir = String(cString: mkdtemp(&template)!)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let server = Process()
        server.executableURL = URL(fileURLWithPath: try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
        server.arguments = ["serve", "--dir", dir]
        try server.run()
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while !(await HeraldProcess.checkHealth(socketPath: "\(dir)/bench.sock")) || !FileManager.default.fileExists(atPath: "\(dir)/raw.sock") {
            guard ContinuousClock.now < deadline else { throw ValidationError("benchmark server did not start") }
            try await Task.sleep(for: .milliseconds(50))
        }

        let requestBytes: [UInt8] = try benchRequest.serializedBytes()
        var results: [Figures] = []
        results.append(try await measureRaw(dir: dir, request: requestBytes, serverPID: server.processIdentifier))
        for transport in [RPCTransport.lean, .grpc] {
            let socket = "\(dir)/bench\(transport == .lean ? "" : ".grpc").sock"
            results.append(try await measure(transport: transport, socket: socket, serverPID: server.processIdentifier))
        }
        print(Self.table(results, requestBytes: requestBytes.count, concurrency: concurrency))
        if let json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try encoder.encode(results).write(to: URL(fileURLWithPath: json))
        }
    }

    // MARK: measuring

    func measure(transport: RPCTransport, socket: String, serverPID: Int32) async throws -> Figures {
        try await RPCClient.with(socketPath: socket, transport: transport, timeout: .seconds(10)) { client in
            let call: @Sendable () async throws -> Void = {
                _ = try await client.call(AuthServiceMethods.authenticate, benchRequest)
            }
            for _ in 0..<500 { try await call() }  // warm-up: connection, caches
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
                path: transport == .lean ? "lean protocol" : "gRPC (HTTP/2)", latencies: latencies, sequentialSeconds: seconds,
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
            for _ in 0..<500 { RawEcho.roundTrip(fd, request, &reply) }
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
            path: "raw socket echo (floor)", latencies: sequential, sequentialSeconds: seconds, calls: calls, elapsed: elapsed,
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
        let fields = stat[stat.index(after: stat.lastIndex(of: ")")!)...].split(separator: " ")
        let ticks = Double(fields[11])! + Double(fields[12])!
        return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    static func table(_ results: [Figures], requestBytes: Int, concurrency: Int) -> String {
        func f(_ x: Double, _ digits: Int = 0) -> String { String(format: "%.\(digits)f", x) }
        var lines = [
            "Unary RPC over a Unix socket, \(requestBytes)-byte request; client and server share the machine's cores.",
            "",
            "| path | p50 µs | p99 µs | calls/s, 1 caller | calls/s, \(concurrency) callers | server CPU µs/call |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in results {
            lines.append(
                "| \(r.path) | \(f(r.p50Micros, 1)) | \(f(r.p99Micros, 1)) | \(f(r.callsPerSecondSequential)) | \(f(r.callsPerSecondConcurrent)) | \(f(r.serverCPUMicrosPerCall, 1)) |")
        }
        if let lean = results.first(where: { $0.path.hasPrefix("lean") }), let grpc = results.first(where: { $0.path.hasPrefix("gRPC") }) {
            lines.append("")
            lines.append("Server CPU per call, gRPC ÷ lean: \(f(grpc.serverCPUMicrosPerCall / lean.serverCPUMicrosPerCall, 1))×; "
                + "p50, gRPC ÷ lean: \(f(grpc.p50Micros / lean.p50Micros, 1))×.")
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
