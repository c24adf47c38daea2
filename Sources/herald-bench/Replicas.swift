import ArgumentParser
import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack

#if canImport(Glibc)
    import Glibc
#endif

/// `herald-bench replicas --database postgres://…`: what PostgreSQL and replicas of
/// herald-dispatch cost and bring, in one run on one machine:
/// - one send to N APNs registrations through the real sender (to ``APNsDoubleCommand``), with
///   SQLite's single dispatch, then on PostgreSQL with 1, 2 and 3 dispatch replicas sharing the
///   outbox; deliveries/s, and the CPU each process took (every dispatch, and PostgreSQL's
///   backends), which says where the limit is;
/// - the edge scenario (GET api/notifications/{id}, PUT api/register/{id}: registration upserts)
///   on SQLite and on PostgreSQL.
struct ReplicasBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replicas",
        abstract: "Fan-out with 1–3 dispatch replicas on PostgreSQL next to SQLite's one, and the edge on both.")
    @OptionGroup var options: BenchOptions
    @Option(
        help:
            "postgres://… (scripts/postgres.sh start DIR makes a throw-away server); its herald_* schemas are emptied first."
    )
    var database: String
    @Option(help: "Registrations the send goes to (default 50,000; 500 with --quick).")
    var devices: Int?
    @Option(help: "The most dispatch replicas to run on PostgreSQL.")
    var replicas = 3
    @Option(
        help:
            "Where the edge scenario runs after the fan-outs: both (SQLite, then PostgreSQL), postgres (CI: `all` has run SQLite's), or none."
    )
    var edge: EdgeStores = .both

    enum EdgeStores: String, ExpressibleByArgument, Sendable {
        case both, postgres, none
    }

    func run() async throws { try await execute() }

    func execute() async throws {
        let scenario = ReplicasScenario(
            options: options, database: database, devices: devices ?? (options.quick ? 500 : 50_000),
            replicas: replicas,
            edge: edge)
        try options.show(try await scenario.run(), scenarios: ["replicas", "edge"])
    }
}

struct ReplicasScenario {
    var options: BenchOptions
    var database: String
    var devices: Int
    var replicas: Int
    var edge: ReplicasBench.EdgeStores = .both

    /// One fan-out run's figures.
    struct Run {
        var store: String
        var replicas: Int
        var elapsed: Duration
        var commit: Duration
        /// CPU seconds of each dispatch process, and of PostgreSQL's processes together.
        var dispatchCPU: [Double]
        var postgresCPU: Double
        var rate: Double { Double(delivered) / elapsed.seconds }
        var delivered: Int
    }

    func run() async throws -> Report {
        var runs = [try await fanout(database: nil, replicas: 1)]
        for count in 1...max(1, replicas) { runs.append(try await fanout(database: database, replicas: count)) }
        var report = Report()
        let sqlite = runs[0]
        for run in runs.dropFirst() {
            report.records.append(
                Record(
                    "replicas", "\(devices) APNs deliveries, PostgreSQL, \(run.replicas) dispatch: deliveries/s",
                    unit: "/s",
                    value: run.rate, baseline: "SQLite, one dispatch", baselineValue: sqlite.rate, better: "higher"))
        }
        var lines = [
            "## replicas: one send to \(devices) APNs registrations through the real sender, SQLite's one dispatch and PostgreSQL's 1–\(replicas) replicas",
            "",
            "| store | dispatch replicas | Send answered s | all recorded s | deliveries/s | CPU µs per delivery: each dispatch | PostgreSQL |",
            "|---|---:|---:|---:|---:|---|---:|",
        ]
        for run in runs {
            let perDelivery = run.dispatchCPU.map { format($0 * 1e6 / Double(devices)) }.joined(separator: " + ")
            lines.append(
                "| \(run.store) | \(run.replicas) | \(String(format: "%.2f", run.commit.seconds)) | \(String(format: "%.2f", run.elapsed.seconds)) | \(format(run.rate)) | \(perDelivery) | \(run.store == "SQLite" ? "–" : format(run.postgresCPU * 1e6 / Double(devices))) |"
            )
        }
        lines.append(
            "\nCPU is each process's user + system time during the run (/proc), per delivery; the machine has \(ProcessInfo.processInfo.activeProcessorCount) cores, shared by every process above, the APNs double and PostgreSQL."
        )
        report.tables.append(lines.joined(separator: "\n"))
        if edge == .both { report.add(try await EdgeScenario(options: options).run()) }
        if edge != .none { report.add(try await EdgeScenario(options: options, database: database).run()) }
        return report
    }

    /// One send to `devices` registrations through the APNs sender, with `replicas` herald-dispatch
    /// processes on `database` (nil: SQLite, one process).
    func fanout(database: String?, replicas: Int) async throws -> Run {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var configuration = StackConfiguration.bench(dir: dir)
        let double = try await APNsDoubleProcess.start(dir: dir)
        defer { double.stop() }
        configuration.extraArguments["dispatch", default: []] += double.dispatchArguments
        if let database {
            try resetPostgres(database)
            configuration.databaseURL = database
        } else {
            try FanoutScenario(options: options).seedRegistrations(
                devices, path: configuration.dataDirectory + "/registration.sqlite")
        }
        let stack = Stack(configuration: configuration)
        try await stack.start()
        var extra: [Process] = []
        do {
            if let database {
                try seedPostgresFanout(database, count: devices)
                for index in 1..<max(1, replicas) {
                    extra.append(
                        try await startReplica(
                            index, configuration: configuration, dir: dir, database: database, double: double))
                }
            }
            guard let main = await stack.pid(of: "dispatch") else { throw BenchError("herald-dispatch is not running") }
            let pids = [main] + extra.map(\.processIdentifier)
            let before = try pids.map { try RPCScenario.cpuSeconds(pid: $0) }
            let postgresBefore = Self.postgresCPU()
            let sent = try await FanoutRun.send(socket: configuration.socketPath("dispatch"), platform: .apns)
            let dispatchCPU = try zip(pids, before).map { try RPCScenario.cpuSeconds(pid: $0) - $1 }
            let postgresCPU = Self.postgresCPU() - postgresBefore
            for process in extra {
                process.terminate()
                process.waitUntilExit()
            }
            await stack.stop()
            let stats = try await double.waitFor(delivered: devices)
            guard sent.delivered == devices, stats.delivered >= devices, stats.refused == 0 else {
                throw BenchError(
                    "fan-out with \(replicas) replicas: outcome says \(sent.delivered) delivered, the double answered \(stats.delivered) with 200 and refused \(stats.refused), of \(devices)"
                )
            }
            return Run(
                store: database == nil ? "SQLite" : "PostgreSQL", replicas: replicas, elapsed: sent.elapsed,
                commit: sent.commit,
                dispatchCPU: dispatchCPU, postgresCPU: postgresCPU, delivered: sent.delivered)
        } catch {
            for process in extra where process.isRunning { process.terminate() }
            await stack.stop()
            throw error
        }
    }

    /// Another herald-dispatch on the stack's outbox, with its own sockets (so its own replica id).
    func startReplica(
        _ index: Int, configuration: StackConfiguration, dir: String, database: String, double: APNsDoubleProcess
    ) async throws -> Process {
        let folder = "\(dir)/replica-\(index)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "\(configuration.binDirectory)/herald-dispatch")
        process.arguments =
            [
                "--runtime-dir", folder, "--data-dir", folder, "--log-level", "notice", "--database-url", database,
                "--registration-socket", configuration.leanSocketPath("registration"),
                // Replicas of one database share its keyring.
                "--encryption-keys", "\(configuration.dataDirectory)/dispatch.keys",
            ] + double.dispatchArguments
        let log = "\(folder)/dispatch.log"
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        process.standardError = process.standardOutput
        try process.run()
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline, process.isRunning {
            if await HeraldProcess.checkHealth(socketPath: "\(folder)/dispatch.sock", timeout: .milliseconds(500)) {
                return process
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        process.terminate()
        throw BenchError("dispatch replica \(index) did not start; see \(log)")
    }

    /// CPU seconds of every process named `postgres` now (the server and its backends).
    static func postgresCPU() -> Double {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        var total = 0.0
        for entry in entries {
            guard let pid = Int32(entry),
                let comm = try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8),
                comm.hasPrefix("postgres")
            else { continue }
            total += (try? RPCScenario.cpuSeconds(pid: pid)) ?? 0
        }
        return total
    }
}

/// `count` APNs registrations tagged `fanout` in PostgreSQL (as ``FanoutScenario`` seeds SQLite's
/// file), then `more` SQL, in one psql call.
func seedPostgresFanout(_ database: String, count: Int, more: String = "") throws {
    _ = try runProcess(
        "/usr/bin/psql",
        [
            try psqlURL(database), "-qAtc",
            """
            INSERT INTO herald_registration.registration (id, owner, platform, handle, created_at, updated_at)
            SELECT 'r-bench-' || lpad(g::text, 8, '0'), 'user' || (g % 1000), \(Platform.apns.rawValue),
                   lpad(to_hex(g), 64, '0'), 1, 1 FROM generate_series(0, \(count - 1)) g;
            INSERT INTO herald_registration.registration_tag (tag, registration_id)
            SELECT 'fanout', 'r-bench-' || lpad(g::text, 8, '0') FROM generate_series(0, \(count - 1)) g;
            \(more)
            ANALYZE herald_registration.registration, herald_registration.registration_tag;
            """,
        ])
}

/// `url` as psql takes it: without Herald's own parameters (`schema`, `statement_cache`).
func psqlURL(_ url: String) throws -> String {
    guard var components = URLComponents(string: url) else { throw BenchError("--database is not a URL") }
    components.queryItems = components.queryItems?.filter { !["schema", "statement_cache"].contains($0.name) }
    if components.queryItems?.isEmpty == true { components.queryItems = nil }
    return components.string ?? url
}

/// Drops every Herald service's schema, so each run starts from the same empty tables.
func resetPostgres(_ url: String) throws {
    for service in Stack.postgresServices {
        _ = try runProcess(
            "/usr/bin/psql", [try psqlURL(url), "-qAtc", "DROP SCHEMA IF EXISTS herald_\(service) CASCADE"], quiet: true
        )
    }
}
