import ArgumentParser
import Crypto
import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import HeraldStack

/// `herald-bench tenants`: the hub `default` broadcasts to every seeded device while
/// hub `b` sends a one-person alert every 100 ms and `default` itself a one-person (secure) push
/// every second. Figures: p50 and p99 from each small send's commit (when Send answers) to its
/// delivery (its inbox row, written when the delivery is claimed), and the broadcast's deliveries/s. `--services-bin`
/// runs the services of another build (an earlier commit's, for a before/after table) under this
/// herald-bench. `--provider apns` sends everything to the APNs double instead (hub `b` with
/// credentials of its own for the same double), and the latency runs to the push's arrival at
/// the double (which notes when each push to the small sends' device came, by apns-id).
/// `--database postgres://… --replicas N` runs it on PostgreSQL with N dispatch replicas sharing
/// the outbox (with the APNs double: a replica's inbox is not read here).
struct TenantsBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tenants",
        abstract: "A broadcast beside other hubs' and its own one-person sends: their latency, its throughput.")
    @OptionGroup var options: BenchOptions
    @Option(help: "Run the services from this folder (another build's); herald-bench's own folder by default.")
    var servicesBin: String?
    @Option(help: "inbox (the default) or apns (the APNs double, in a process of its own).")
    var provider: String = "inbox"
    @Option(
        help: "postgres://… (scripts/postgres.sh start DIR): run on PostgreSQL; its herald_* schemas are emptied first."
    )
    var database: String?
    @Option(help: "herald-dispatch replicas on PostgreSQL.")
    var replicas = 2

    func run() async throws { try await execute() }

    func execute() async throws {
        guard ["inbox", "apns"].contains(provider) else { throw BenchError("--provider is inbox or apns") }
        guard database == nil || provider == "apns" else { throw BenchError("--database needs --provider apns") }
        try options.show(
            try await TenantsScenario(
                options: options, servicesBin: servicesBin, apns: provider == "apns", database: database,
                replicas: max(1, replicas)
            ).run(),
            scenarios: ["tenants"])
    }
}

struct TenantsScenario {
    var options: BenchOptions
    var servicesBin: String?
    var apns = false
    var database: String? = nil
    var replicas = 1

    /// One small send: what it was, and when dispatch committed it (Unix ms, the clock the inbox's
    /// `recorded_at` reads, on the same machine), which is when Send answers.
    struct Small {
        var id: String
        var secure: Bool
        var committedAt: Int64
    }

    func run() async throws -> Report {
        let count = options.fanoutSize
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var configuration = StackConfiguration.bench(dir: dir)
        if let servicesBin { configuration.binDirectory = servicesBin }
        if let database {
            try resetPostgres(database)
            configuration.databaseURL = database
        } else {
            let registrations = configuration.dataDirectory + "/registration.sqlite"
            try FanoutScenario(options: options).seedRegistrations(count, path: registrations)
            try Self.seedPeople(path: registrations)
        }
        let double = apns ? try await APNsDoubleProcess.start(dir: dir, watch: Self.personalHandle) : nil
        defer { double?.stop() }
        if let double { configuration.extraArguments["dispatch", default: []] += double.dispatchArguments }

        let stack = Stack(configuration: configuration)
        try await stack.start()
        let run: (broadcast: Outcome, started: Int64, small: [Small], finished: [String: Int64])
        // CPU seconds during the traffic: each dispatch process, then the double's.
        var cpu: [Double] = []
        var messageIDs: [String: String] = [:]
        var extra: [Process] = []
        defer { for process in extra where process.isRunning { process.terminate() } }
        do {
            if let database, let double {
                try Self.seedPostgres(database, count: count)
                let replicas = ReplicasScenario(
                    options: options, database: database, devices: count, replicas: replicas)
                for index in 1..<replicas.replicas {
                    extra.append(
                        try await replicas.startReplica(
                            index, configuration: configuration, dir: dir, database: database, double: double))
                }
            }
            if let double {
                // Hub b's own credentials: the same double, key and topic (the double knows one).
                try await RPCClient.with(socketPath: configuration.socketPath("dispatch"), timeout: .seconds(30)) {
                    var request = SetHubCredentialsRequest(hub: "b")
                    request.apns = ApnsCredentials(
                        key: double.key.pemRepresentation, keyID: APNsDoubleProcess.keyID,
                        teamID: APNsDoubleProcess.teamID, topic: APNsDoubleProcess.topic, url: double.url)
                    _ = try await DispatchServiceClient($0).setHubCredentials(request)
                }
            }
            // CPU per delivery is steadier than deliveries/s on a shared machine: what dispatch
            // (every replica) and the double spent while the traffic ran.
            var measured = try await InstructionsScenario.pids(of: ["dispatch"], in: stack)
            measured += extra.map(\.processIdentifier)
            if let double { measured.append(double.process.processIdentifier) }
            let before = try measured.map { try RPCScenario.cpuSeconds(pid: $0) }
            run = try await Self.traffic(socket: configuration.socketPath("dispatch"))
            cpu = try zip(measured, before).map { try RPCScenario.cpuSeconds(pid: $0) - $1 }
            if double != nil {
                messageIDs = try await Self.messageIDs(
                    of: run.small.map(\.id), socket: configuration.socketPath("dispatch"))
            }
            for process in extra {
                process.terminate()
                process.waitUntilExit()
            }
            await stack.stop()
        } catch {
            await stack.stop()
            throw error
        }
        let delivered = run.broadcast.platforms.reduce(0) { $0 + Int($1.success) }
        guard delivered == count else { throw BenchError("the broadcast delivered \(delivered) of \(count)") }
        // With the double: when each small send's push reached it (its apns-id is the delivery's
        // message id); with the inbox: its inbox row.
        var recorded: [String: Int64] = [:]
        if let double {
            try await Task.sleep(for: .milliseconds(200))
            let arrivals = double.watched()
            for (id, message) in messageIDs { recorded[id] = arrivals[message.lowercased()] }
        } else {
            recorded = try Self.deliveredAt(run.small.map(\.id), path: configuration.dataDirectory + "/dispatch.sqlite")
        }
        func latencies(secure: Bool) throws -> [Double] {
            try run.small.filter { $0.secure == secure }.map { small in
                guard let at = recorded[small.id] else { throw BenchError("send \(small.id) was never delivered") }
                // At least 1 ms: the inbox's clock reads milliseconds.
                return Double(max(1, at - small.committedAt))
            }.sorted()
        }
        let alerts = try latencies(secure: false)
        let secure = try latencies(secure: true)
        let seconds = Double(run.broadcast.finishedAtUnixMs - run.started) / 1000
        let rate = Double(count) / max(seconds, 0.001)
        // Its two phases: staging the audience (until a worker first took one of its deliveries),
        // then pushing.
        let staging = Double(run.broadcast.startedAtUnixMs - run.started) / 1000
        let pushing = Double(run.broadcast.finishedAtUnixMs - run.broadcast.startedAtUnixMs) / 1000
        let label =
            (servicesBin.map { "services from \($0)" } ?? "this build")
            + (database == nil ? ", SQLite" : ", PostgreSQL with \(replicas) dispatch replica(s)")
        let dispatchCPU = cpu.dropLast(apns ? 1 : 0).map { format(1e6 * $0 / Double(count)) + " µs" }
            .joined(separator: " + ")
        var report = Report()
        for (name, values) in [("hub b's one-person alerts", alerts), ("hub default's own one-person pushes", secure)] {
            report.records.append(
                Record(
                    "tenants", "\(name), answer to delivery: p99", unit: "ms", value: percentile(values, 0.99),
                    baseline: "p50", baselineValue: percentile(values, 0.5), better: "lower", target: "≤ 250 ms"))
        }
        report.records.append(
            Record(
                "tenants", "the broadcast to \(count) devices beside them: deliveries/s", unit: "/s", value: rate,
                baseline: "hub b's alerts sent meanwhile", baselineValue: Double(alerts.count), better: "higher"))
        report.tables = [
            """
            ## tenants: hub default broadcasts to \(count) devices (\(apns ? "the APNs double" : "inbox")) while hub b sends a one-person alert every 100 ms and default one every second (\(label))

            | sends | count | p50 ms | p99 ms | max ms |
            |---|---:|---:|---:|---:|
            | hub b's alerts (to_user, one device) | \(alerts.count) | \(format(percentile(alerts, 0.5))) | \(format(percentile(alerts, 0.99))) | \(format(alerts.last ?? 0)) |
            | hub default's secure pushes (to_user, one device) | \(secure.count) | \(format(percentile(secure, 0.5))) | \(format(percentile(secure, 0.99))) | \(format(secure.last ?? 0)) |
            | the broadcast: deliveries/s, Send to Completed | \(count) | \(format(rate)) | | |

            The broadcast's audience was staged in \(format(staging)) s; its pushes then took \(format(pushing)) s (\(format(Double(count) / max(pushing, 0.001)))/s).

            CPU per delivery of the broadcast while all of it ran: dispatch \(dispatchCPU)\(apns ? ", the APNs double \(format(1e6 * (cpu.last ?? 0) / Double(count))) µs" : "") (CPU seconds from `/proc`, between the broadcast's Send and its small sends' end, over the broadcast's devices).

            Latency: from the send's commit (Send answers right after) to \(apns ? "its push's arrival at the APNs double" : "its delivery's inbox row (written in the transaction that claims it)").
            """
        ]
        return report
    }

    /// ``FanoutScenario/seedRegistrations(_:path:platform:owner:)`` and ``seedPeople(path:)`` on PostgreSQL.
    static func seedPostgres(_ database: String, count: Int) throws {
        try seedPostgresFanout(
            database, count: count,
            more: """
                INSERT INTO herald_registration.registration (id, owner, platform, handle, created_at, updated_at, hub)
                VALUES ('r-bob', 'bob', \(Platform.apns.rawValue), '\(personalHandle)', 1, 1, 'b'),
                       ('r-alice', 'alice', \(Platform.apns.rawValue), '\(personalHandle)', 1, 1, 'default');
                INSERT INTO herald_registration.registration_tag (tag, registration_id)
                VALUES ('\(Names.userTag("bob"))', 'r-bob'), ('\(Names.userTag("alice"))', 'r-alice');
                """)
    }

    /// bob's and alice's device (one handle: the double watches it).
    static let personalHandle = String(repeating: "cd", count: 32)

    /// Each send's delivery's message id (one device each).
    static func messageIDs(of ids: [String], socket: String) async throws -> [String: String] {
        try await RPCClient.with(socketPath: socket, timeout: .seconds(60)) { client in
            var answer: [String: String] = [:]
            for id in ids {
                let deliveries = try await DispatchServiceClient(client).listDeliveries(
                    ListDeliveriesRequest(notificationID: id, limit: 10, scope: .all)
                ).deliveries
                if let first = deliveries.first { answer[id] = first.messageID }
            }
            return answer
        }
    }

    /// bob in hub `b` and alice in `default`, one device each, besides the broadcast's devices.
    static func seedPeople(path: String) throws {
        let pool = try DatabasePool(path: path, configuration: HeraldDatabase.configuration)
        let now = unixMillis()
        try pool.write { db in
            for (id, owner, hub) in [("r-bob", "bob", "b"), ("r-alice", "alice", "default")] {
                try db.execute(
                    sql: """
                        INSERT INTO registration (id, owner, platform, handle, created_at, updated_at, hub)
                        VALUES (?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [id, owner, Platform.apns.rawValue, personalHandle, now, now, hub])
                try db.execute(
                    sql: "INSERT INTO registration_tag (tag, registration_id) VALUES (?, ?)",
                    arguments: [Names.userTag(owner), id])
            }
        }
        try pool.close()
    }

    /// The broadcast, and the small sends until it completes and a second after; then waits for
    /// the small sends' outcomes.
    static func traffic(socket: String) async throws -> (
        broadcast: Outcome, started: Int64, small: [Small], finished: [String: Int64]
    ) {
        try await RPCClient.with(socketPath: socket, timeout: .seconds(3600)) { client in
            let dispatch = DispatchServiceClient(client)
            let payload = NativePayload(
                platform: .apns, body: Array(#"{"aps":{"alert":"tenants"}}"#.utf8), pushType: "alert")
            func send(_ edit: (inout SendRequest) -> Void) async throws -> Outcome {
                var request = SendRequest()
                request.payloads = [payload]
                request.sender = "bench"
                edit(&request)
                return try await dispatch.send(request).outcome ?? Outcome()
            }
            let started = unixMillis()
            var broadcast = try await send { $0.targetTag = "fanout" }
            var small: [Small] = []
            var tick = 0
            var over: Int64?
            let next = ContinuousClock.now
            while over.map({ unixMillis() < $0 + 1000 }) ?? true {
                let alert = try await send {
                    $0.targetUser = "bob"
                    $0.hub = "b"
                }
                small.append(Small(id: alert.notificationID, secure: false, committedAt: alert.createdAtUnixMs))
                if tick % 10 == 0 {
                    let secure = try await send { $0.targetUser = "alice" }
                    small.append(Small(id: secure.notificationID, secure: true, committedAt: secure.createdAtUnixMs))
                }
                tick += 1
                if over == nil {
                    broadcast =
                        try await dispatch.getOutcome(
                            GetOutcomeRequest(notificationID: broadcast.notificationID, scope: .all))
                    if broadcast.state != .enqueued, broadcast.state != .processing { over = unixMillis() }
                }
                try await Task.sleep(until: next + .milliseconds(100 * tick))
            }
            var finished: [String: Int64] = [:]
            for send in small {
                let deadline = ContinuousClock.now + .seconds(30)
                while ContinuousClock.now < deadline {
                    let outcome = try await dispatch.getOutcome(GetOutcomeRequest(notificationID: send.id, scope: .all))
                    if outcome.state != .enqueued, outcome.state != .processing {
                        if outcome.state == .completed { finished[send.id] = outcome.finishedAtUnixMs }
                        break
                    }
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
            return (broadcast, started, small, finished)
        }
    }

    /// The `q` quantile of `sorted` (nearest rank); 0 when empty.
    func percentile(_ sorted: [Double], _ q: Double) -> Double {
        sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * q))]
    }

    /// When each of `ids` was first recorded in the inbox (Unix ms).
    static func deliveredAt(_ ids: [String], path: String) throws -> [String: Int64] {
        let queue = try DatabaseQueue(path: path)
        defer { try? queue.close() }
        return try queue.read { db in
            var answer: [String: Int64] = [:]
            for row in try Row.fetchAll(
                db, sql: "SELECT notification_id, MIN(recorded_at) FROM inbox GROUP BY notification_id")
            where ids.contains(row[0]) {
                answer[row[0]] = row[1]
            }
            return answer
        }
    }
}
