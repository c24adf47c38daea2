import ArgumentParser
import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import HeraldStack
import Hummingbird
import Logging
import RegistrationService
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// `herald-bench edge`: HTTP requests/s and p99 through the whole stack, driven by wrk with 64
/// connections, next to a Hummingbird hello-world route on the same machine.
struct EdgeBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "edge",
        abstract: "GET api/notifications/{id} and PUT api/register/{id} with wrk, against a hello-world baseline.")
    @OptionGroup var options: BenchOptions
    @Option(help: "wrk connections.")
    var connections = 64
    @Option(
        help: """
            postgres://…: every service keeps its data there (schemas herald_<service>, emptied first) instead of \
            SQLite. scripts/postgres.sh start DIR makes a throw-away server.
            """)
    var database: String?
    @Option(
        help: """
            Run the services from this folder (another build's, for a before/after with one bench); \
            herald-bench's own folder by default.
            """)
    var servicesBin: String?
    @Flag(
        help: """
            Only the tracing rows measured side by side (1% and 100% against tracing off): both stacks up \
            at once, wrk on each in turn.
            """)
    var sideBySideOnly = false

    func run() async throws { try await execute() }

    func execute() async throws {
        try options.show(
            try await EdgeScenario(
                options: options, connections: connections, database: database, servicesBin: servicesBin,
                sideBySideOnly: sideBySideOnly
            ).run(),
            scenarios: ["edge"])
    }
}

struct EdgeScenario {
    var options: BenchOptions
    var connections = 64
    /// nil: SQLite; else the PostgreSQL URL every service uses.
    var database: String?
    /// The services' folder when not herald-bench's own.
    var servicesBin: String?
    /// Only the side-by-side tracing rows.
    var sideBySideOnly = false

    /// The tracing rows, measured after each other and side by side: label, sampled ratio, target.
    static let tracingRows: [(label: String, ratio: Double, target: String)] = [
        ("tracing 1%", 0.01, "≤ 3% below tracing off"), ("tracing 100%, exported", 1.0, "≤ 25% below tracing off"),
    ]

    func run() async throws -> Report {
        guard let wrk = which("wrk") else {
            throw BenchError("wrk is missing: apt-get install -y wrk (scripts/setup.sh --bench does it)")
        }
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        if sideBySideOnly {
            var report = Report()
            let lines = try await sideBySide(wrk, dir: dir, into: &report)
            report.tables = [lines.joined(separator: "\n")]
            return report
        }

        let hello = try await HelloServer.start(dir: dir)
        defer {
            hello.process.terminate()
            hello.process.waitUntilExit()
        }
        let helloRun = try runWrk(wrk, url: hello.url + "/hello", script: nil, dir: dir)
        let (measured, put) = try await routes(wrk, dir: dir, get: true)
        guard let get = measured else { throw BenchError("GET api/notifications/{id} was not measured") }
        // The same routes with tracing on: 1% of traces sampled, and every trace sampled and
        // exported, to a collector in this process (what tracing costs stays measured).
        var traced: [(label: String, target: String, get: WrkRun, put: WrkRun, exports: Int)] = []
        for row in Self.tracingRows {
            let run = try await OTLPSink.serving { sink, port in
                let (get, put) = try await routes(wrk, dir: dir, get: true, tracing: (row.ratio, port))
                return (get, put, sink.exports.load(ordering: .relaxed))
            }
            guard let get = run.0 else { throw BenchError("GET with \(row.label) was not measured") }
            traced.append((row.label, row.target, get, run.1, run.2))
        }
        // Tracing off once more, after the traced stacks: each stack is new, and a machine drifts
        // over a run, so the traced rows are held against the mean of the untraced stack before
        // them and this one after (a stack started later was the traced one, always, which put the
        // run's order into the figure).
        let (measuredAgain, putAgain) = try await routes(wrk, dir: dir, get: true)
        guard let getAgain = measuredAgain else {
            throw BenchError("GET api/notifications/{id} was not measured again")
        }
        let offGet = (get.requestsPerSecond + getAgain.requestsPerSecond) / 2
        let offPut = (put.requestsPerSecond + putAgain.requestsPerSecond) / 2
        func meanCPU(_ a: WrkRun, _ b: WrkRun) -> Double? {
            guard let x = a.cpuMicrosPerRequest, let y = b.cpuMicrosPerRequest else { return nil }
            return (x + y) / 2
        }
        let offGetCPU = meanCPU(get, getAgain)
        let offPutCPU = meanCPU(put, putAgain)

        var report = Report()
        let helloName = "Hummingbird hello world"
        for (name, run, target) in [
            ("GET api/notifications/{id}", get, "≥ 40% of hello world"),
            ("PUT api/register/{id}", put, nil as String?),
        ] {
            report.records.append(
                Record(
                    "edge", "\(name): requests/s", unit: "req/s", value: run.requestsPerSecond, baseline: helloName,
                    baselineValue: helloRun.requestsPerSecond, better: "higher", target: target))
            report.records.append(
                Record(
                    "edge", "\(name): p99 latency", unit: "ms", value: run.p99Millis, baseline: helloName,
                    baselineValue: helloRun.p99Millis, better: "lower"))
        }
        for run in traced {
            for (name, measured, off) in [
                ("GET api/notifications/{id}", run.get, offGet), ("PUT api/register/{id}", run.put, offPut),
            ] {
                report.records.append(
                    Record(
                        "edge", "\(name), \(run.label): requests/s", unit: "req/s", value: measured.requestsPerSecond,
                        baseline: "\(name), tracing off (before and after)", baselineValue: off, better: "higher",
                        target: run.target))
            }
            for (name, measured, off) in [
                ("GET api/notifications/{id}", run.get, offGetCPU), ("PUT api/register/{id}", run.put, offPutCPU),
            ] {
                guard let cpu = measured.cpuMicrosPerRequest, let off else { continue }
                report.records.append(
                    Record(
                        "edge", "\(name), \(run.label): services' CPU per request", unit: "µs", value: cpu,
                        baseline: "\(name), tracing off (before and after)", baselineValue: off, better: "lower"))
            }
        }
        var lines = [
            "## edge: HTTP through the whole stack, wrk -c\(connections), \(options.wrkSeconds) s per route (tutorial auth: user == password; every service on \(database == nil ? "SQLite" : "PostgreSQL"))",
            "",
            "| route | requests/s | p50 ms | p99 ms | % of hello world |",
            "|---|---:|---:|---:|---:|",
        ]
        for (name, run) in [
            ("hello world (baseline)", helloRun), ("GET api/notifications/{id}", get),
            ("PUT api/register/{id}", put),
        ] {
            lines.append(
                "| \(name) | \(format(run.requestsPerSecond)) | \(format(run.p50Millis)) | \(format(run.p99Millis)) | \(String(format: "%.0f%%", 100 * run.requestsPerSecond / helloRun.requestsPerSecond)) |"
            )
        }
        lines += [
            "",
            "Tracing on (every service; `OTEL_TRACES_SAMPLER=parentbased_traceidratio`, spans exported over OTLP/gRPC to a collector that discards them), against the mean of tracing off before the traced stacks and after them (GET \(format(get.requestsPerSecond)) and \(format(getAgain.requestsPerSecond)), PUT \(format(put.requestsPerSecond)) and \(format(putAgain.requestsPerSecond)) requests/s; the five services' CPU per request \(format(get.cpuMicrosPerRequest ?? 0)) and \(format(getAgain.cpuMicrosPerRequest ?? 0)), \(format(put.cpuMicrosPerRequest ?? 0)) and \(format(putAgain.cpuMicrosPerRequest ?? 0)) µs). CPU per request moves far less than requests/s with what else the machine does between stacks:",
            "",
            "| route | tracing | requests/s | p99 ms | against tracing off | services' CPU µs per request | against tracing off | exports received |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for run in traced {
            for (name, measured, off, offCPU) in [
                ("GET api/notifications/{id}", run.get, offGet, offGetCPU),
                ("PUT api/register/{id}", run.put, offPut, offPutCPU),
            ] {
                let cpu = measured.cpuMicrosPerRequest.map { format($0) } ?? "—"
                let cpuChange =
                    if let now = measured.cpuMicrosPerRequest, let offCPU {
                        String(format: "%+.0f%%", 100 * (now / offCPU - 1))
                    } else { "—" }
                lines.append(
                    "| \(name) | \(run.label) | \(format(measured.requestsPerSecond)) | \(format(measured.p99Millis)) | \(String(format: "%+.0f%%", 100 * (measured.requestsPerSecond / off - 1))) | \(cpu) | \(cpuChange) | \(run.exports) |"
                )
            }
        }
        // The tracing rows once more, each traced stack side by side with an untraced one: the
        // sequential stacks above differ by more than the 1% target between runs of the same
        // binaries (docs/performance.md).
        if !options.quick { lines += [""] + (try await sideBySide(wrk, dir: dir, into: &report)) }
        report.tables = [lines.joined(separator: "\n")]
        return report
    }

    /// The rows of ``tracingRows``, each measured by ``interleaved(_:dir:ratio:rounds:)``: their
    /// records go into `report`; returns their table.
    func sideBySide(_ wrk: String, dir: String, into report: inout Report) async throws -> [String] {
        func runs(_ values: [Double]) -> String { values.map { format($0) }.joined(separator: ", ") }
        func micros(_ values: [Double]) -> String { String(format: "%.1f", Interleaved.median(values)) }
        let rounds = 6
        var lines = [
            "Tracing side by side with tracing off: both stacks up at once, wrk on each in turn (\(rounds) rounds of 2 s per route, the order swapped each round), medians:",
            "",
            "| route | tracing | tracing off, req/s | traced, req/s | against tracing off | target | services' CPU µs/request, off → traced | the collector's CPU µs/request |",
            "|---|---|---|---|---:|---|---|---:|",
        ]
        for (index, row) in Self.tracingRows.enumerated() {
            let measured = try await interleaved(
                wrk, dir: dir + "/side-by-side-\(index)", ratio: row.ratio, rounds: rounds)
            for (name, route) in [
                ("GET api/notifications/{id}", measured.get), ("PUT api/register/{id}", measured.put),
            ] {
                report.records.append(
                    Record(
                        "edge", "\(name), \(row.label), side by side with tracing off: requests/s",
                        unit: "req/s", value: Interleaved.median(route.traced),
                        baseline: "\(name), tracing off, side by side", baselineValue: Interleaved.median(route.off),
                        better: "higher", target: row.target))
                lines.append(
                    "| \(name) | \(row.label) | \(runs(route.off)) | \(runs(route.traced)) | \(String(format: "%+.1f%%", 100 * route.change)) | \(row.target) | \(micros(route.offCPU)) → \(micros(route.tracedCPU)) | \(micros(route.collector)) |"
                )
            }
        }
        return lines
    }

    /// `PUT api/register/{id}` alone, as `herald-bench peers` compares it.
    func putRun() async throws -> WrkRun {
        guard let wrk = which("wrk") else {
            throw BenchError("wrk is missing: apt-get install -y wrk (scripts/setup.sh --bench does it)")
        }
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        return try await routes(wrk, dir: dir, get: false).put
    }

    /// A stack with one device and one stored secure payload; wrk on GET (when `get`) and PUT.
    /// `tracing`: every service traces, sampling that ratio of new traces, and exports to the
    /// OTLP collector on that loopback port.
    private func routes(_ wrk: String, dir: String, get measureGet: Bool, tracing: (ratio: Double, port: Int)? = nil)
        async throws -> (get: WrkRun?, put: WrkRun)
    {
        let seeded = try await seededStack(dir: dir, tracing: tracing)
        do {
            let get = measureGet ? try seeded.get(self, wrk) : nil
            let put = try seeded.put(self, wrk)
            await seeded.stack.stop()
            return (get, put)
        } catch {
            await seeded.stack.stop()
            throw error
        }
    }

    /// A running stack seeded for the two routes, and how to drive each with wrk.
    struct SeededStack {
        let stack: Stack
        let dir: String
        let getURL: String
        let putURL: String
        let pids: [Int32]

        func get(_ scenario: EdgeScenario, _ wrk: String, seconds: Int? = nil) throws -> WrkRun {
            try scenario.runWrk(
                wrk, url: getURL, script: dir + "/get.lua", dir: dir, serving: pids, seconds: seconds)
        }

        func put(_ scenario: EdgeScenario, _ wrk: String, seconds: Int? = nil) throws -> WrkRun {
            try scenario.runWrk(
                wrk, url: putURL, script: dir + "/put.lua", dir: dir, serving: pids, seconds: seconds)
        }
    }

    /// Starts a stack in `dir` and seeds it: one device, one stored secure payload, wrk's scripts.
    private func seededStack(dir: String, tracing: (ratio: Double, port: Int)?) async throws -> SeededStack {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        var configuration = StackConfiguration.bench(dir: dir)
        if let servicesBin { configuration.binDirectory = servicesBin }
        if let tracing {
            configuration.environment = [
                "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:\(tracing.port)",
                "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "\(tracing.ratio)",
            ]
        }
        if let database {
            // A fresh start: the schemas are dropped, so each run measures the same table sizes.
            try resetPostgres(database)
            configuration.databaseURL = database
        }
        let stack = Stack(configuration: configuration)
        try await stack.start()
        do {
            let base = await stack.edgeURL
            // Seed through the services' own RPCs: one device, one stored secure payload.
            let token = String(repeating: "ab", count: 32)
            let registrationID = try await RPCClient.with(socketPath: configuration.socketPath("registration")) {
                client in
                let id = try await RegistrationServiceClient(client).createRegistrationId(
                    CreateRegistrationIdRequest(owner: "bench", handle: token)
                ).registrationID
                _ = try await RegistrationServiceClient(client).upsertRegistration(
                    UpsertRegistrationRequest(
                        owner: "bench", registrationID: id, platform: .apns, handle: token, tags: ["news"]))
                return id
            }
            let payloadID = try await RPCClient.with(socketPath: configuration.socketPath("payload")) { client in
                try await PayloadServiceClient(client).storePayload(
                    StorePayloadRequest(recipient: "bench", kind: .secure, content: Array("Secure confirmation.".utf8))
                ).id
            }
            let authorization = "Basic " + Data("bench:bench".utf8).base64EncodedString()
            try "wrk.headers[\"Authorization\"] = \"\(authorization)\"\n".write(
                toFile: dir + "/get.lua", atomically: true, encoding: .utf8)
            try """
            wrk.method = "PUT"
            wrk.body = '{"Platform":"apns","Handle":"\(token)","Tags":["news"]}'
            wrk.headers["Content-Type"] = "application/json"
            wrk.headers["Authorization"] = "\(authorization)"

            """.write(toFile: dir + "/put.lua", atomically: true, encoding: .utf8)
            let pids = try await InstructionsScenario.pids(of: Stack.services, in: stack)
            return SeededStack(
                stack: stack, dir: dir, getURL: base + "/api/notifications/\(payloadID)",
                putURL: base + "/api/register/\(registrationID)", pids: pids)
        } catch {
            await stack.stop()
            throw error
        }
    }

    /// Tracing off and tracing at `ratio` side by side: both stacks up at once (the one not
    /// measured is idle), wrk on each in turn for `rounds` rounds of short runs, the order swapped
    /// each round. A machine's drift over the minute then falls on both sides alike; each side's
    /// figure is the median of its runs. On the 2-core machine of docs/performance.md it resolves
    /// about 3–5%: two untraced stacks measured so differed by that much.
    func interleaved(_ wrk: String, dir: String, ratio: Double, rounds: Int) async throws -> Interleaved {
        try await OTLPSink.serving { _, port in
            let off = try await seededStack(dir: dir + "/interleaved-off", tracing: nil)
            let traced: SeededStack
            do {
                traced = try await seededStack(dir: dir + "/interleaved-traced", tracing: (ratio, port))
            } catch {
                await off.stack.stop()
                throw error
            }
            var result = Interleaved()
            // What the collector (this process: nothing else of it runs while wrk does) spends per
            // request of a traced round: work the same machine does for the traced stack only.
            let bench = getpid()
            do {
                // A first short run on each, not counted: the stack measured first in the first round
                // was otherwise also the one warming up (an A/A run, both stacks untraced, put the
                // second 5% ahead with it counted, 3% without).
                for stack in [off, traced] {
                    _ = try stack.get(self, wrk, seconds: 1)
                    _ = try stack.put(self, wrk, seconds: 1)
                }
                for round in 0..<rounds {
                    let order = round % 2 == 0 ? [(off, false), (traced, true)] : [(traced, true), (off, false)]
                    for (stack, isTraced) in order {
                        let beforeGet = try RPCScenario.cpuSeconds(pid: bench)
                        let get = try stack.get(self, wrk, seconds: 2)
                        let beforePut = try RPCScenario.cpuSeconds(pid: bench)
                        let put = try stack.put(self, wrk, seconds: 2)
                        let after = try RPCScenario.cpuSeconds(pid: bench)
                        result.get.record(get, traced: isTraced, collectorSeconds: beforePut - beforeGet)
                        result.put.record(put, traced: isTraced, collectorSeconds: after - beforePut)
                    }
                }
            } catch {
                await off.stack.stop()
                await traced.stack.stop()
                throw error
            }
            await off.stack.stop()
            await traced.stack.stop()
            return result
        }
    }

    struct Interleaved {
        /// One route's rounds, a value per round and stack.
        struct Route {
            /// Requests/s.
            var off: [Double] = []
            var traced: [Double] = []
            /// The five services' CPU per request, µs.
            var offCPU: [Double] = []
            var tracedCPU: [Double] = []
            /// The collector's CPU per request of the traced stack, µs.
            var collector: [Double] = []

            /// The traced stack's median requests/s against the untraced one's.
            var change: Double { Interleaved.median(traced) / Interleaved.median(off) - 1 }

            /// Adds a round of one stack; `collectorSeconds`: what the collector spent during it.
            mutating func record(_ run: WrkRun, traced isTraced: Bool, collectorSeconds: Double) {
                if isTraced {
                    traced.append(run.requestsPerSecond)
                    tracedCPU.append(run.cpuMicrosPerRequest ?? 0)
                    collector.append(collectorSeconds * 1e6 / max(run.requests, 1))
                } else {
                    off.append(run.requestsPerSecond)
                    offCPU.append(run.cpuMicrosPerRequest ?? 0)
                }
            }
        }

        var get = Route()
        var put = Route()

        static func median(_ values: [Double]) -> Double {
            let sorted = values.sorted()
            guard !sorted.isEmpty else { return 0 }
            return sorted.count % 2 == 1
                ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
        }
    }

    struct WrkRun {
        var requestsPerSecond: Double
        var p50Millis: Double
        var p99Millis: Double
        /// CPU (user + system) the `serving` processes spent per request answered; nil without them.
        /// Unlike requests/s, it does not move with what else the machine does between stacks.
        var cpuMicrosPerRequest: Double?
        /// Requests answered (wrk's count).
        var requests: Double
    }

    func runWrk(
        _ wrk: String, url: String, script: String?, dir: String, serving: [Int32] = [], seconds: Int? = nil
    ) throws -> WrkRun {
        var arguments = ["-t2", "-c\(connections)", "-d\(seconds ?? options.wrkSeconds)s", "--latency"]
        if let script { arguments += ["-s", script] }
        let cpuBefore = try serving.reduce(0) { $0 + (try RPCScenario.cpuSeconds(pid: $1)) }
        let output = try runProcess(wrk, arguments + [url])
        let cpu = try serving.reduce(0) { $0 + (try RPCScenario.cpuSeconds(pid: $1)) } - cpuBefore
        let answered = output.firstMatch(of: /(\d+) requests in/).flatMap { Double($0.1) }
        if let bad = output.firstMatch(of: /Non-2xx or 3xx responses: (\d+)/) {
            throw BenchError("wrk \(url): \(bad.1) responses were not 2xx; the benchmark measures successes only")
        }
        guard let rate = output.firstMatch(of: /Requests\/sec:\s+([\d.]+)/).flatMap({ Double($0.1) }),
            let p50 = Self.latency(output, "50"), let p99 = Self.latency(output, "99")
        else { throw BenchError("cannot read wrk's output:\n\(output)") }
        let cpuPerRequest = serving.isEmpty ? nil : answered.map { cpu * 1e6 / max($0, 1) }
        return WrkRun(
            requestsPerSecond: rate, p50Millis: p50, p99Millis: p99, cpuMicrosPerRequest: cpuPerRequest,
            requests: answered ?? rate * Double(seconds ?? options.wrkSeconds))
    }

    /// A line of wrk's latency distribution ("     99%    2.34ms") in milliseconds.
    static func latency(_ output: String, _ percent: String) -> Double? {
        for line in output.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count == 2, parts[0] == "\(percent)%" else { continue }
            let text = String(parts[1])
            for (suffix, scale) in [("us", 0.001), ("ms", 1.0), ("s", 1000.0), ("m", 60_000.0)]
            where text.hasSuffix(suffix) {
                return Double(text.dropLast(suffix.count)).map { $0 * scale }
            }
        }
        return nil
    }
}
