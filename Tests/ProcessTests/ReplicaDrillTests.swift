import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import HeraldStack
import HeraldTestSupport
import Logging
import PostgresNIO
import StackTestSupport
import Synchronization
import Testing

/// The drills run on PostgreSQL stacks only (`scripts/test.sh` runs them on their own, after the
/// PostgreSQL pass of the integration suite).
let replicaDrillEnabled = TestDatabases.postgresURL != nil && LiveStack.defaultDatabase == .postgres

/// herald-dispatch replicas sharing one PostgreSQL outbox, drilled with real processes: one is
/// killed, one is frozen, and the send still reaches every device with its counts right.
///
/// Runs with `HERALD_TEST_STACK_DATABASE=postgres`, on its own (`scripts/test.sh`).
/// Its time limit is a backstop against a hang: the drill with 20,000 devices took 263 s of an
/// earlier limit of 300 in a slow CI run, and 102 s of CI's 142 for these drills when alone. At
/// 6,000, 4,000 deliveries are still to go when one replica dies and another freezes: five times
/// what two replicas hold (800 each), for a freeze of 10 s past 5-second leases. (At 10,000 the
/// drill took 56 s of CI's 103 for both; the 4,000 more pushes after the freeze proved nothing new.)
@Suite(
    "dispatch replicas on PostgreSQL", .serialized, .timeLimit(.minutes(10)), .enabled(if: replicaDrillEnabled),
    .watchedForStalls)
struct ReplicaDrillTests {
    static let devices = 6_000
    /// Each replica's settings in the drills: leases short enough for a drill (renewed every
    /// 0.83 s by live replicas); a push that takes 10 s is retried. Each exports its metrics,
    /// which say how many deliveries it took over and how many of its pushes timed out.
    static let replicaSettings = [
        "--push-timeout-ms", "10000", "--lease-seconds", "5", "--delivery-batch", "200", "--delivery-workers", "4",
        "--metrics-listen", "127.0.0.1:0",
    ]
    /// What one replica can hold at once: `delivery-workers` batches of `delivery-batch`.
    static let heldByOneReplica = 4 * 200

    @Test(
        "drill: 3 dispatch replicas, 6,000 devices at a 5 ms APNs; kill -9 one and SIGSTOP one for 10 s mid-send: every device gets its push, takeovers and duplicates only for what those two held, counts add up"
    )
    func drill() async throws {
        try await Self.withReplicas { live, fixture, replicas, prefix in
            let handles = try await Self.seed(prefix: prefix, devices: Self.devices)
            let (id, started) = try await Self.send(live)
            // Mid-send: one replica dies, another freezes for 10 s (its leases expire after 5).
            _ = try await fixture.double.waitFor(2000, timeout: .seconds(60)) { $0.path.hasPrefix("/3/device/") }
            let seenAtDrill = fixture.double.requests.count
            kill(replicas.pid(0), SIGKILL)
            kill(replicas.pid(1), SIGSTOP)
            print(
                "replica drill: replica 1 killed, replica 2 stopped after \(seenAtDrill) pushes, \(ContinuousClock.now - started)"
            )
            #expect(seenAtDrill < Self.devices, "every push arrived before the drill; it proved nothing")
            try await Task.sleep(for: .seconds(10))  // the drill's freeze, not a wait for anything
            kill(replicas.pid(1), SIGCONT)
            let tally = try await Self.finish(
                live, id: id, started: started, handles: handles, fixture: fixture, replicas: replicas, skip: [0])
            // Only what the killed and the frozen replica held can have been taken over; and a
            // delivery went out twice only if it was taken over or its push timed out.
            #expect(tally.takenOver > 0, "no lease was taken over: the killed and frozen replicas held nothing")
            #expect(
                tally.takenOver <= 2 * Self.heldByOneReplica,
                "\(tally.takenOver) deliveries taken over: more than the killed and the frozen replica could hold")
            #expect(
                tally.repeated <= tally.takenOver + tally.timedOut,
                "\(tally.repeated) pushes arrived twice, \(tally.takenOver) taken over, \(tally.timedOut) timed out")
        }
    }

    @Test(
        "drill: 3 dispatch replicas, one throttled to a quarter of a core (SIGSTOP 150 ms, SIGCONT 50 ms) for the whole send: it loses no lease, nothing is taken over, counts add up"
    )
    func throttled() async throws {
        try await Self.withReplicas { live, fixture, replicas, prefix in
            let handles = try await Self.seed(prefix: prefix, devices: 5_000)
            let slow = replicas.pid(1)
            let throttle = Task.detached {
                while !Task.isCancelled {
                    kill(slow, SIGSTOP)
                    try? await Task.sleep(for: .milliseconds(150))
                    kill(slow, SIGCONT)
                    try? await Task.sleep(for: .milliseconds(50))
                }
                kill(slow, SIGCONT)
            }
            let (id, started) = try await Self.send(live)
            let tally: DrillTally
            do {
                tally = try await Self.finish(
                    live, id: id, started: started, handles: handles, fixture: fixture, replicas: replicas, skip: [],
                    whenFinal: { throttle.cancel() })
            } catch {
                throttle.cancel()
                throw error
            }
            #expect(tally.takenOver == 0, "\(tally.takenOver) deliveries taken over from live replicas")
            #expect(tally.pushedBy[2] ?? 0 > 0, "the throttled replica pushed nothing: the drill proved nothing")
            #expect(
                tally.repeated <= tally.timedOut,
                "\(tally.repeated) pushes arrived twice with no lease taken over, \(tally.timedOut) timed out")
        }
    }

    /// A stack on PostgreSQL with a provider double (APNs answering in 5 ms) and two more dispatch
    /// replicas beside its own, all with ``replicaSettings``.
    static func withReplicas(
        _ body: (LiveStack, ProviderFixture, Replicas, _ prefix: String) async throws -> Void
    ) async throws {
        try await LiveStack.withDirectory { folder in
            let fixture = try await ProviderFixture.start(in: folder)
            defer { Task { await fixture.stop() } }
            fixture.apnsDelay.withLock { $0 = .milliseconds(5) }
            let prefix = TestDatabases.freshPrefix()
            try await LiveStack.with(
                runner: .processes, directory: folder + "/stack", database: .postgres, schemaPrefix: prefix
            ) {
                configuration in
                fixture.configure(&configuration)
                configuration.extraArguments["dispatch", default: []] += Self.replicaSettings
            } _: { live in
                // Two more replicas on the same outbox, each with its own socket folder (so its own replica id).
                let replicas = Replicas(stack: live.configuration.runtimeDirectory)
                defer { replicas.stopAll() }
                for index in 1...2 {
                    let directory = "\(folder)/replica-\(index)"
                    replicas.add(
                        try await Self.startReplica(
                            directory: directory, live: live, prefix: prefix, fixture: fixture,
                            extra: Self.replicaSettings),
                        directory: directory)
                }
                try await body(live, fixture, replicas, prefix)
            }
        }
    }

    /// One send to every device tagged `drill`; its id and when it was asked for.
    static func send(_ live: LiveStack) async throws -> (id: String, started: ContinuousClock.Instant) {
        let started = ContinuousClock.now
        let outcome = try await RPCClient.with(
            socketPath: live.configuration.socketPath("dispatch"), transport: live.configuration.rpcTransport,
            timeout: .seconds(60)
        ) {
            try await DispatchServiceClient($0).send(
                SendRequest(
                    targetTag: "drill",
                    payloads: [NativePayload(platform: .apns, body: Array(#"{"aps":{"alert":"drill"}}"#.utf8))],
                    sender: "ops")
            ).outcome
        }
        let id = try #require(outcome?.notificationID)
        print("replica drill: deliveries committed after \(ContinuousClock.now - started)")
        return (id, started)
    }

    /// What a drill's send came to, from the outbox, the double and the replicas' metrics.
    struct DrillTally {
        /// apns-ids the double saw more than once.
        var repeated = 0
        /// Deliveries claimed after another holder's lease ended (`herald_outbox_takeovers_total`).
        var takenOver = 0
        /// Pushes that got no answer within the push timeout, to be retried.
        var timedOut = 0
        /// Deliveries each process pushed (0: the stack's own dispatch; 1, 2: the replicas).
        var pushedBy: [Int: Int] = [:]
    }

    /// Polls the send's outcome until it is final (180 s at most), then checks that every device
    /// got its push, that the outbox's records match what APNs saw, and that every apns-id seen
    /// more than once belongs to a delivery with at least as many attempts; and sums the metrics
    /// of every process but those in `skip` (killed). `whenFinal` runs once the outcome is final.
    static func finish(
        _ live: LiveStack, id: String, started: ContinuousClock.Instant, handles: Set<String>,
        fixture: ProviderFixture, replicas: Replicas, skip: Set<Int>, whenFinal: () -> Void = {}
    ) async throws -> DrillTally {
        let dispatch = live.configuration.socketPath("dispatch")
        // On a busy machine one poll may go unanswered in time; the next one asks again (the
        // 180 s bound holds).
        var final = Outcome()
        let deadline = ContinuousClock.now + .seconds(180)
        repeat {
            do {
                final = try await RPCClient.with(
                    socketPath: dispatch, transport: live.configuration.rpcTransport, timeout: .seconds(30)
                ) {
                    try await DispatchServiceClient($0).getOutcome(GetOutcomeRequest(notificationID: id, scope: .all))
                }
            } catch let error as ServiceError where error.code == .deadlineExceeded || error.code == .unavailable {
                print("replica drill: an outcome poll got \(error.code); polling again")
            }
            if final.state == .completed || final.state == .abandoned { break }
            try await Task.sleep(for: .milliseconds(250))
        } while ContinuousClock.now < deadline
        whenFinal()
        print("replica drill: \(final.state) after \(ContinuousClock.now - started)")
        #expect(final.state == .completed)
        let counts = try #require(final.platforms.first)
        #expect(counts.success == Int64(handles.count) && counts.failure == 0 && counts.pending == 0, "\(counts)")

        // The outbox's records against what APNs saw, by message id.
        let records = try await RPCClient.with(
            socketPath: dispatch, transport: live.configuration.rpcTransport, timeout: .seconds(60)
        ) {
            client in
            var records: [String: DeliveryRecord] = [:]
            var after: Int64 = 0
            while true {
                let page = try await DispatchServiceClient(client).listDeliveries(
                    ListDeliveriesRequest(notificationID: id, afterSequence: after, limit: 1000, scope: .all)
                ).deliveries
                for record in page { records[record.messageID] = record }
                guard let last = page.last else { return records }
                after = last.sequence
            }
        }
        #expect(records.count == handles.count)
        var seen: [String: Int] = [:]
        var devicesReached = Set<String>()
        for request in fixture.double.requests where request.path.hasPrefix("/3/device/") {
            seen[request.header("apns-id") ?? "", default: 0] += 1
            devicesReached.insert(String(request.path.dropFirst("/3/device/".count)))
        }
        #expect(devicesReached == handles, "\(handles.subtracting(devicesReached).count) devices got no push")
        #expect(Set(seen.keys) == Set(records.keys), "apns-ids APNs saw differ from the outbox's")
        let repeated = seen.filter { $0.value > 1 }
        let unexplained = repeated.filter { (records[$0.key]?.attempts ?? 0) < max(2, Int32($0.value)) }
        #expect(unexplained.isEmpty, "\(unexplained.count) pushes arrived twice without a second attempt")
        let retried = records.values.filter { $0.attempts > 1 }.count
        #expect(counts.retries >= Int64(retried))

        var tally = DrillTally(repeated: repeated.count)
        for (index, directory) in replicas.metricsDirectories.enumerated() where !skip.contains(index - 1) {
            let text = try await ReplicaDrillTests.metricsClient(directory: directory, service: "dispatch")
                .request("GET", "metrics").text
            tally.takenOver += Int(StackFixture.value(text, "herald_outbox_takeovers_total", []))
            tally.timedOut += Int(
                StackFixture.value(text, "herald_deliveries_total", ["platform=\"apns\"", "outcome=\"retry\""]))
            tally.pushedBy[index] = Int(
                StackFixture.value(text, "herald_deliveries_total", ["platform=\"apns\"", "outcome=\"delivered\""]))
        }
        print(
            "replica drill: \(repeated.count) pushes arrived twice (same apns-id); \(tally.takenOver) deliveries taken over after their lease ended, \(tally.timedOut) pushes timed out (\(retried) deliveries with more than one attempt); pushed by each live process: \(tally.pushedBy.sorted { $0.key < $1.key }.map(\.value))"
        )
        return tally
    }

    @Test("the edge spreads calls over two herald-registration replicas, and keeps answering when one is killed")
    func edgeOverReplicas() async throws {
        try await LiveStack.withDirectory { folder in
            let prefix = TestDatabases.freshPrefix()
            let second = "\(folder)/registration-2"
            try await LiveStack.with(
                runner: .processes, directory: folder + "/stack", database: .postgres, schemaPrefix: prefix
            ) {
                configuration in
                configuration.extraArguments["edge", default: []] += [
                    "--registration-socket",
                    "\(configuration.leanSocketPath("registration")),\(second)/registration.sock",
                    "--health-interval-ms", "200",
                ]
            } _: { live in
                let replica = try await Self.startProcess(
                    "registration", directory: second, live: live,
                    arguments: [
                        "--database-url",
                        try #require(TestDatabases.freshPostgresURL(service: "registration", prefix: prefix)),
                        "--metrics-listen", "127.0.0.1:0",
                    ])
                defer { if replica.isRunning { replica.terminate() } }
                let metrics = try await Self.metricsClient(directory: second, service: "registration")
                func upsertsAtSecond() async throws -> Double {
                    StackFixture.value(
                        try await metrics.request("GET", "metrics").text, "herald_rpc_requests_total",
                        ["RegistrationService/UpsertRegistration", "status=\"OK\""])
                }
                // Registrations through the edge until the second replica has served some (it is
                // used once the edge's health check has seen it), 200 at the most.
                var registered = 0
                while try await upsertsAtSecond() == 0, registered < 200 {
                    try await live.register("lb-\(registered % 5)", handle: apnsToken(3000 + registered))
                    registered += 1
                }
                let atSecond = try await upsertsAtSecond()
                #expect(atSecond > 0, "the second replica served no registration in \(registered)")
                // Both keep serving: 40 more go to each in turn.
                for n in 0..<40 { try await live.register("lb-\(n % 5)", handle: apnsToken(4000 + n)) }
                #expect(try await upsertsAtSecond() >= atSecond + 10, "calls did not take turns")

                kill(replica.processIdentifier, SIGKILL)
                // Every request keeps succeeding: calls that cannot reach it go to the first replica.
                for n in 0..<40 {
                    let id = try await live.register("lb-\(n % 5)", handle: apnsToken(5000 + n))
                    let deleted = try await live.edge.request("DELETE", "/api/register/\(id)", as: "lb-\(n % 5)")
                    #expect(deleted.status == 200, "DELETE api/register: \(deleted.status) \(deleted.text)")
                }
                print(
                    "edge over replicas: \(registered) registrations before the second replica served one; \(Int(atSecond)) upserts there"
                )
            }
        }
    }

    @Test("five failed logins spread over two herald-auth processes lock the account out on both (429 at the edge)")
    func lockoutOverAuthReplicas() async throws {
        try await LiveStack.withDirectory { folder in
            let prefix = TestDatabases.freshPrefix()
            let second = "\(folder)/auth-2"
            try await LiveStack.with(
                runner: .processes,
                directory: folder + "/stack", auth: .accounts, users: ["dora"], database: .postgres,
                schemaPrefix: prefix
            ) {
                configuration in
                configuration.extraArguments["edge", default: []] += [
                    "--auth-socket", "\(configuration.leanSocketPath("auth")),\(second)/auth.sock",
                    "--health-interval-ms",
                    "200",
                ]
            } _: { live in
                let replica = try await Self.startProcess(
                    "auth", directory: second, live: live,
                    arguments: [
                        "--auth-mode", "accounts", "--password-hash-log-n", "10", "--metrics-listen", "127.0.0.1:0",
                        "--database-url", try #require(TestDatabases.freshPostgresURL(service: "auth", prefix: prefix)),
                    ])
                defer { if replica.isRunning { replica.terminate() } }
                let metrics = try await Self.metricsClient(directory: second, service: "auth")
                // Every status's line: the failures count under UNAUTHENTICATED.
                func authenticationsAtSecond() async throws -> Double {
                    try await metrics.request("GET", "metrics").text.split(separator: "\n")
                        .filter {
                            $0.hasPrefix("herald_rpc_requests_total{") && $0.contains("AuthService/Authenticate")
                        }
                        .compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0, +)
                }
                // Right passwords until the edge uses the second replica (its health check has seen it).
                var calls = 0
                while try await authenticationsAtSecond() == 0, calls < 200 {
                    let reply = try await live.edge.request("GET", "/api/notifications/1", as: "dora")
                    #expect(reply.status == 404, "GET as dora: \(reply.status) \(reply.text)")
                    calls += 1
                }
                let before = try await authenticationsAtSecond()
                try #require(before > 0, "the second auth replica served no call in \(calls)")
                // Five wrong passwords, taking turns over the two replicas.
                for attempt in 0..<5 {
                    let reply = try await live.edge.request(
                        "GET", "/api/notifications/1", authorization: EdgeClient.basic("dora", "wrong \(attempt)"))
                    #expect(reply.status == 401, "wrong password \(attempt): \(reply.status) \(reply.text)")
                }
                // Turns alternate, so each replica got some of the five (1 to 4 at the second).
                let failuresAtSecond = try await authenticationsAtSecond() - before
                #expect(
                    (1...4).contains(failuresAtSecond),
                    "\(failuresAtSecond) of the 5 failures at the second replica: not both")
                // Locked out on both: the right password is refused with 429 whichever replica answers.
                for _ in 0..<4 {
                    let reply = try await live.edge.request("GET", "/api/notifications/1", as: "dora")
                    #expect(
                        reply.status == 429 && reply.header("Retry-After") != nil,
                        "after 5 failures: \(reply.status) \(reply.text)")
                }
            }
        }
    }

    /// An HTTP client of a process's metrics listener (`--metrics-listen 127.0.0.1:0`), once it has
    /// written its URL.
    static func metricsClient(directory: String, service: String) async throws -> EdgeClient {
        let urlFile = "\(directory)/\(service).metrics.url"
        let deadline = ContinuousClock.now + .seconds(10)
        while !FileManager.default.fileExists(atPath: urlFile), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        let url = try String(contentsOfFile: urlFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        return EdgeClient(base: try #require(URL(string: url)).deletingLastPathComponent())
    }

    /// Seeds `devices` APNs registrations tagged `drill` straight into herald-registration's
    /// schema (through the edge it would take minutes); returns their handles.
    static func seed(prefix: String, devices: Int) async throws -> Set<String> {
        let url = try #require(TestDatabases.freshPostgresURL(service: "registration", prefix: prefix))
        guard case .postgres(let location) = try DatabaseURL(url, service: "registration") else {
            throw ConfigError("not postgres")
        }
        let db = try HeraldPostgres(location, logger: Logger(label: "drill-seed"), maximumConnections: 1)
        try await db.query(
            """
            INSERT INTO registration (id, owner, platform, handle, created_at, updated_at)
            SELECT 'r-drill-' || g, 'drill', \(Platform.apns.rawValue), lpad(to_hex(g), 64, '0'), 1, 1
            FROM generate_series(1, \(Int64(devices))) g
            """)
        try await db.query(
            "INSERT INTO registration_tag (tag, registration_id) SELECT 'drill', 'r-drill-' || g FROM generate_series(1, \(Int64(devices))) g"
        )
        // As autovacuum would before long: without statistics each audience page reads every row.
        try await db.query("ANALYZE registration, registration_tag")
        return Set(
            (1...devices).map {
                String(repeating: "0", count: 64 - String($0, radix: 16).count) + String($0, radix: 16)
            })
    }

    /// Another herald-dispatch on the stack's outbox and registration service, in `directory`.
    static func startReplica(
        directory: String, live: LiveStack, prefix: String, fixture: ProviderFixture, extra: [String]
    ) async throws -> Process {
        let databaseURL = try #require(TestDatabases.freshPostgresURL(service: "dispatch", prefix: prefix))
        let configuration = live.configuration
        return try await startProcess(
            "dispatch", directory: directory, live: live,
            arguments: [
                "--registration-socket", configuration.leanSocketPath("registration"),
                "--registration-grpc-socket", configuration.grpcSocketPath("registration"),
                "--database-url", databaseURL,
            ] + fixture.dispatchArguments() + extra)
    }

    /// Starts `herald-<service>` with its own sockets in `directory` (logging to a file there) and
    /// waits until it answers SERVING.
    static func startProcess(_ service: String, directory: String, live: LiveStack, arguments: [String]) async throws
        -> Process
    {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let configuration = live.configuration
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "\(configuration.binDirectory)/herald-\(service)")
        process.arguments =
            [
                "--runtime-dir", directory, "--data-dir", directory, "--log-level", "info",
                "--rpc-transport", configuration.rpcTransport.rawValue,
            ]
            + (["dispatch", "payload"].contains(service)
                // Replicas of one database share its keyring: the stack's.
                ? ["--encryption-keys", "\(configuration.dataDirectory)/\(service).keys"] : []) + arguments
        let logPath = "\(directory)/\(service).log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.standardOutput = log
        process.standardError = log
        try process.run()
        let socket =
            configuration.rpcTransport == .grpc ? "\(directory)/\(service).grpc.sock" : "\(directory)/\(service).sock"
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            try #require(process.isRunning, "herald-\(service) in \(directory) exited: see \(logPath)")
            if FileManager.default.fileExists(atPath: socket),
                await HeraldProcess.checkHealth(
                    socketPath: socket, transport: configuration.rpcTransport, timeout: .milliseconds(500))
            {
                return process
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw StackError(description: "herald-\(service) in \(directory) was not healthy within 60 s; see \(logPath)")
    }
}

/// The extra replicas' processes, stopped (and thawed first) however the drill ends.
final class Replicas: Sendable {
    private let processes = Mutex<[Process]>([])
    /// Where each process writes its metrics URL: the stack's own dispatch first, then each replica's.
    private let directories: Mutex<[String]>

    init(stack: String) { directories = Mutex([stack]) }

    func add(_ process: Process, directory: String) {
        processes.withLock { $0.append(process) }
        directories.withLock { $0.append(directory) }
    }

    var metricsDirectories: [String] { directories.withLock { $0 } }

    func pid(_ index: Int) -> pid_t { processes.withLock { $0[index].processIdentifier } }

    func stopAll() {
        for process in processes.withLock({ $0 }) where process.isRunning {
            kill(process.processIdentifier, SIGCONT)
            process.terminate()
        }
    }
}
