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

/// `herald-bench fanout`: one send to a tag carried by 100,000 registrations (1,000,000 with
/// `--large`), timed until the push provider has recorded every delivery; plus the memory of each
/// service idle and after the fan-out.
///
/// Registrations are written straight into herald-registration's SQLite file before the stack
/// starts (through its own store and schema): the scenario measures the send, not 100,000 HTTP
/// registrations. Baseline: recording the same number of deliveries the inbox provider's way (rows
/// into the same table shape, 500 per transaction) in this process: the machine's floor for it.
struct FanoutBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fanout", abstract: "One send to 100,000 registrations; deliveries/s and each service's memory.")
    @OptionGroup var options: BenchOptions
    @Option(
        help:
            "inbox (the embedded provider), apns or fcm (the real sender, to a double in its own process), apns-nghttpd (the APNs sender to nghttpd)."
    )
    var provider = "inbox"

    func run() async throws { try await execute() }

    func execute() async throws {
        switch provider {
        case "inbox":
            try options.show(try await FanoutScenario(options: options).run(), scenarios: ["fanout", "memory"])
        case "apns": try options.show(try await APNsFanoutScenario(options: options).run(), scenarios: ["fanout-apns"])
        case "apns-nghttpd":
            try options.show(
                try await APNsFanoutScenario(options: options, nghttpd: true).run(), scenarios: ["fanout-apns-nghttpd"])
        case "fcm":
            try options.show(
                try await APNsFanoutScenario(options: options, platform: .fcm).run(), scenarios: ["fanout-fcm"])
        default: throw ValidationError("--provider must be inbox, apns, apns-nghttpd or fcm")
        }
    }
}

struct FanoutScenario {
    var options: BenchOptions

    func run() async throws -> Report {
        let count = options.fanoutSize
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let configuration = StackConfiguration.bench(dir: dir)
        try seedRegistrations(count, path: configuration.dataDirectory + "/registration.sqlite")
        let floor = try baselineInserts(count, path: dir + "/baseline.sqlite")

        let hello = try await HelloServer.start(dir: dir)
        let helloRSS = try residentMegabytes(hello.process.processIdentifier)
        let helloDetail = try Memory.read(hello.process.processIdentifier)
        hello.process.terminate()
        hello.process.waitUntilExit()

        let stack = Stack(configuration: configuration)
        try await stack.start()
        do {
            var idle: [String: Double] = [:]
            var idleDetail: [String: Memory] = [:]
            for service in Stack.services {
                idle[service] = try residentMegabytes(await stack.pid(of: service))
                idleDetail[service] = try Memory.read(await stack.pid(of: service))
            }

            let sent = try await FanoutRun.send(socket: configuration.socketPath("dispatch"), platform: .apns)
            let elapsed = sent.elapsed
            let commit = sent.commit
            let delivered = sent.delivered
            let recorded = try countRows(configuration.dataDirectory + "/dispatch.sqlite", table: "inbox")
            guard delivered == count, recorded == count else {
                throw BenchError("fan-out delivered \(delivered) and recorded \(recorded) of \(count)")
            }
            var after: [String: Double] = [:]
            for service in Stack.services { after[service] = try residentMegabytes(await stack.pid(of: service)) }
            let dispatchPeak = try residentMegabytes(await stack.pid(of: "dispatch"), peak: true)
            await stack.stop()

            let seconds = elapsed.seconds
            let rate = Double(count) / seconds
            var report = Report()
            report.records.append(
                Record(
                    "fanout", "\(count) deliveries: deliveries/s", unit: "/s", value: rate,
                    baseline: "inbox rows inserted in-process", baselineValue: floor, better: "higher",
                    target: "≥ 60,000/s"))
            report.records.append(
                Record(
                    "fanout", "\(count) deliveries: herald-dispatch peak RSS", unit: "MB", value: dispatchPeak,
                    baseline: "hello world idle",
                    baselineValue: helloRSS, better: "lower", target: count >= 1_000_000 ? "≤ 150 MB" : nil))
            for service in Stack.services {
                report.records.append(
                    Record(
                        "memory", "herald-\(service) idle RSS", unit: "MB", value: idle[service, default: 0],
                        baseline: "hello world idle",
                        baselineValue: helloRSS, better: "lower", target: "≤ 30 MB"))
                report.records.append(
                    Record(
                        "memory", "herald-\(service) RSS after the fan-out", unit: "MB",
                        value: after[service, default: 0],
                        baseline: "hello world idle", baselineValue: helloRSS, better: "lower"))
            }
            var memory = [
                "## memory: resident set of each service (hello world idle: \(format(helloRSS)) MB)",
                "",
                "RSS counts every page of the executable and the shared Swift libraries it touched; PSS splits",
                "shared pages between the processes mapping them; heap is anonymous memory (the service's own data).",
                "RSS and PSS are mostly those file pages, and how many the kernel maps around each page touched",
                "depends on how it cached the file: the same binary measured up to 2 MB apart copied to another",
                "folder (docs/performance.md). Heap does not.",
                "",
                "| service | idle RSS MB | idle PSS MB | idle heap MB | RSS after the fan-out MB |",
                "|---|---:|---:|---:|---:|",
                "| hello world (baseline) | \(format(helloRSS)) | \(format(helloDetail.pss)) | \(format(helloDetail.anonymous)) | |",
            ]
            for service in Stack.services {
                guard let detail = idleDetail[service] else { continue }
                memory.append(
                    "| herald-\(service) | \(format(idle[service, default: 0])) | \(format(detail.pss)) | \(format(detail.anonymous)) | \(format(after[service, default: 0])) |"
                )
            }
            report.tables = [
                """
                ## fanout: one send to \(count) registrations under one tag, inbox provider

                | | deliveries | seconds | deliveries/s |
                |---|---:|---:|---:|
                | Herald: Send → outbox → every delivery recorded | \(count) | \(String(format: "%.2f", seconds)) | \(format(rate)) |
                | of which: Send answered (audience read, outbox committed) | \(count) | \(String(format: "%.2f", commit.seconds)) | \(format(Double(count) / commit.seconds)) |
                | baseline: the same rows inserted in-process | \(count) | \(String(format: "%.2f", Double(count) / floor)) | \(format(floor)) |

                herald-dispatch's peak RSS (VmHWM) over the run: \(format(dispatchPeak)) MB.
                """,
                memory.joined(separator: "\n"),
            ]
            return report
        } catch {
            await stack.stop()
            throw error
        }
    }

    /// `count` complete registrations of `platform` tagged "fanout", written with herald-registration's schema.
    /// `count` registrations tagged "fanout", owned by user0…user999 in turn, or all by `owner`.
    func seedRegistrations(_ count: Int, path: String, platform: Platform = .apns, owner: String? = nil) throws {
        try makePrivateDirectory(URL(fileURLWithPath: path).deletingLastPathComponent().path)
        let pool = try DatabasePool(path: path, configuration: HeraldDatabase.configuration)
        try SQLiteDatabase.migrator(for: RegistrationSchema.schema).migrate(pool)
        let now = unixMillis()
        try pool.write { db in
            let registration = try db.makeStatement(
                sql:
                    "INSERT INTO registration (id, owner, platform, handle, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)"
            )
            let tag = try db.makeStatement(sql: "INSERT INTO registration_tag (tag, registration_id) VALUES (?, ?)")
            for index in 0..<count {
                let id = String(format: "r-bench-%08d", index)
                let owner = owner ?? "user\(index % 1000)"
                try registration.execute(arguments: [
                    id, owner, platform.rawValue, String(format: "%064x", index), now, now,
                ])
                try tag.execute(arguments: ["fanout", id])
                try tag.execute(arguments: ["username:\(owner)", id])
            }
        }
        try pool.close()
    }

    /// Rows/s inserting `count` inbox-shaped rows, 500 per transaction, as the inbox provider writes them.
    func baselineInserts(_ count: Int, path: String) throws -> Double {
        let pool = try DatabasePool(path: path, configuration: HeraldDatabase.configuration)
        try pool.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE inbox (sequence INTEGER PRIMARY KEY AUTOINCREMENT, notification_id TEXT NOT NULL,
                    registration_id TEXT NOT NULL, platform INTEGER NOT NULL, handle TEXT NOT NULL, headers TEXT NOT NULL,
                    payload BLOB NOT NULL, recorded_at INTEGER NOT NULL)
                    """)
        }
        let body = Data(#"{"aps":{"alert":"fan-out"}}"#.utf8)
        let headers = #"[["apns-push-type","alert"],["apns-priority","10"],["content-type","application/json"]]"#
        let started = ContinuousClock.now
        var index = 0
        while index < count {
            let end = min(index + 500, count)
            try pool.write { db in
                let insert = try db.cachedStatement(
                    sql: """
                        INSERT INTO inbox (notification_id, registration_id, platform, handle, headers, payload, recorded_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?)
                        """)
                for i in index..<end {
                    try insert.execute(arguments: [
                        "n-bench", String(format: "r-bench-%08d", i), 1, String(format: "%064x", i), headers, body,
                        unixMillis(),
                    ])
                }
            }
            index = end
        }
        let rate = Double(count) / (ContinuousClock.now - started).seconds
        try pool.close()
        return rate
    }

    func countRows(_ path: String, table: String) throws -> Int {
        var configuration = Configuration()
        configuration.readonly = true
        let queue = try DatabaseQueue(path: path, configuration: configuration)
        return try queue.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM \(table)") ?? 0 }
    }
}
