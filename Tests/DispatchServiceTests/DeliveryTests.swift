import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import HeraldTelemetry
import HeraldTestSupport
import Logging
import PushProviders
import Synchronization
import Testing
import Tracing

@testable import DispatchService

@Suite("delivery: retries, outbox, inbox", .watchedForStalls)
struct DeliveryTests {
    @Test("backoff doubles with jitter in [½, 1], is capped, and never comes sooner than Retry-After")
    func backoff() {
        let policy = RetryPolicy(base: .seconds(1), cap: .seconds(60))
        #expect(policy.delay(afterAttempt: 1, retryAfter: nil, random: 1) == .seconds(1))
        #expect(policy.delay(afterAttempt: 3, retryAfter: nil, random: 1) == .seconds(4))
        #expect(policy.delay(afterAttempt: 3, retryAfter: nil, random: 0.5) == .seconds(2))
        #expect(policy.delay(afterAttempt: 20, retryAfter: nil, random: 1) == .seconds(60))
        #expect(policy.delay(afterAttempt: 1, retryAfter: .seconds(30), random: 0.5) == .seconds(30))
        for attempt in 1...8 {
            let delay = policy.delay(afterAttempt: attempt, retryAfter: nil)
            let full = Duration.seconds(min(1 << (attempt - 1), 60))
            #expect(delay >= full / 2 && delay <= full)
        }
        #expect(PushHTTP.retryAfter("120") == .seconds(120))
        #expect(PushHTTP.retryAfter("soon") == nil)
        let date = Date().addingTimeInterval(90)
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        let parsed = PushHTTP.retryAfter(formatter.string(from: date)) ?? .zero
        #expect(parsed > .seconds(85) && parsed <= .seconds(90))
    }

    static func outbox(now: @escaping @Sendable () -> Int64 = unixMillis) throws -> Outbox {
        try Outbox(db: .inMemory(), now: now)
    }

    static func payload() -> OutboxPayload {
        OutboxPayload(
            platform: .apns, options: DeliveryOptions(pushType: "alert", priority: 10), body: Array("{}".utf8))
    }

    @Test("payloads stored before delivery options were columns read back with the same options, expiry in ms")
    func deliveryOptionsMigration() async throws {
        let db = try DatabaseQueue(configuration: HeraldDatabase.configuration)
        try SQLiteDatabase.migrator(for: DispatchSchema.schema).migrate(db, upTo: "outbox-v1")
        try await db.write { db in
            try db.execute(sql: "INSERT INTO notification VALUES ('n', 's', 'u', '', 1, 0, 0)")
            for (platform, headers, expires) in [
                (
                    Platform.apns,
                    #"[["apns-push-type","background"],["apns-priority","5"],["content-type","application/json"]]"#,
                    1_700_000_000
                ),
                (.wns, #"[["x-wns-type","wns/raw"],["content-type","application/octet-stream"]]"#, 0),
                (.browser, #"[["urgency","low"]]"#, 0),
                (.fcm, #"[["content-type","application/json"]]"#, 0),
            ] as [(Platform, String, Int64)] {
                try db.execute(
                    sql: "INSERT INTO outbox_payload VALUES ('n', ?, ?, x'7b7d', ?, 'c')",
                    arguments: [platform.rawValue, headers, expires])
            }
        }
        let outbox = try Outbox(db: SQLiteDatabase(db))
        let payloads = try await outbox.sql.transaction { try await Outbox.payloads(of: ["n"], $0) }["n"] ?? [:]
        #expect(
            payloads[.native(.apns)]?.options
                == DeliveryOptions(
                    pushType: "background", priority: 5, contentType: "application/json",
                    expiresAtUnixMs: 1_700_000_000_000,
                    collapseID: "c"))
        #expect(
            payloads[.native(.wns)]?.options
                == DeliveryOptions(pushType: "wns/raw", contentType: "application/octet-stream", collapseID: "c"))
        #expect(payloads[.native(.browser)]?.options == DeliveryOptions(priority: 1, collapseID: "c"))
        #expect(payloads[.native(.fcm)]?.options == DeliveryOptions(contentType: "application/json", collapseID: "c"))
        #expect(payloads[.native(.apns)]?.body == Array("{}".utf8))
    }

    @Test("a lease left by a crash is due again at start-up, counted as a second attempt with the same message id")
    func leaseRecovery() async throws {
        let outbox = try Self.outbox()
        let targets = (0..<3).map { Outbox.Target(registrationID: "r-\($0)", platform: .apns, handle: "h\($0)") }
        _ = try await outbox.enqueue(
            Outbox.Send(
                id: "n-1", sender: "s", targetUser: "u", targetTag: "", payloads: [Self.payload()],
                retryWindow: .seconds(60)), targets: targets)
        let first = try await outbox.claim(limit: 10, platforms: [.apns])
        #expect(first.count == 3 && first.allSatisfy { $0.attempt == 1 })
        #expect(try await outbox.claim(limit: 10, platforms: [.apns]).isEmpty)  // leased: not handed out twice
        // The process dies here. The next one starts:
        #expect(try await outbox.recoverLeases() == 3)
        let again = try await outbox.claim(limit: 10, platforms: [.apns])
        #expect(again.map(\.messageID) == first.map(\.messageID))
        #expect(again.allSatisfy { $0.attempt == 2 })
    }

    @Test(
        "a file leased before leases expired (outbox-v14): its leases come back at start-up, its staging is made anew")
    func expiringLeasesMigration() async throws {
        let queue = try DatabaseQueue(configuration: HeraldDatabase.configuration)
        try SQLiteDatabase.migrator(for: DispatchSchema.schema).migrate(queue, upTo: "outbox-v13-due-by-platform")
        try await queue.write { db in
            try db.execute(
                sql: """
                    INSERT INTO notification (id, sender, target_user, target_tag, state, created_at, updated_at, hub)
                    VALUES ('n', 's', 'u', '', 2, 0, 0, 'default');
                    INSERT INTO outbox_payload (notification_id, platform, body, collapse_id, expires_at_ms)
                    VALUES ('n', 1, x'7b7d', '', 0);
                    INSERT INTO notification_platform (notification_id, platform, success, failure, pending) VALUES ('n', 1, 0, 0, 2);
                    INSERT INTO delivery (notification_id, registration_id, platform, handle, message_id, state, leased,
                                          attempts, next_attempt_at, give_up_at, updated_at)
                    VALUES ('n', 'r-0', 1, 'h0', 'm-0', 1, 1, 1, 0, 9999999999999, 0),
                           ('n', 'r-1', 1, 'h1', 'm-1', 1, 0, 0, 0, 9999999999999, 0);
                    INSERT INTO audience_staging (notification_id, position, registration_id, platform, handle, message_id)
                    VALUES ('x', 0, 'r-9', 1, 'h9', 'm-9');
                    """)
        }
        let outbox = try Outbox(db: SQLiteDatabase(queue))
        #expect(try await outbox.recoverLeases() == 1)
        let items = try await outbox.claim(limit: 10, platforms: [.apns])
        // The recovered lease is due from now: after the row that was due all along.
        #expect(items.map(\.messageID) == ["m-1", "m-0"])
        #expect(items.map(\.attempt) == [1, 2])
        #expect(try await outbox.outcome(of: "n", scope: .everyHub).platforms.first?.retries == 1)
        #expect(try await queue.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM audience_staging") } == 0)
        #expect(try await outbox.deleteAbandonedStaging() == 0)
    }

    @Test(
        "a staged audience becomes deliveries only at the commit, in order, with message ids numbered on; a failed one leaves nothing"
    )
    func stagedAudience() async throws {
        let outbox = try Self.outbox()
        let targets = (0..<7).map {
            Outbox.Target(registrationID: "r-\($0)", platform: $0 < 5 ? .apns : .fcm, handle: "h\($0)")
        }
        var staged = Outbox.StagedAudience(notificationID: "n-s")
        try await outbox.stage(Array(targets[0..<3]), to: &staged)
        try await outbox.stage(Array(targets[3..<5]), to: &staged)
        #expect(staged.count == 5 && staged.perPlatform == [.apns: 5])
        // Staged is not committed: nothing is due.
        #expect(try await outbox.claim(limit: 100, platforms: [.apns, .fcm]).isEmpty)
        let fcm = OutboxPayload(platform: .fcm, body: Array("{}".utf8))
        _ = try await outbox.enqueue(
            Outbox.Send(
                id: "n-s", sender: "s", targetUser: "", targetTag: "t", payloads: [Self.payload(), fcm],
                retryWindow: .seconds(60)), targets: Array(targets[5...]), staged: staged)
        let items = try await outbox.claim(limit: 100, platforms: [.apns, .fcm])
        #expect(items.map(\.registrationID) == targets.map(\.registrationID))
        #expect(items.map(\.handle) == targets.map(\.handle))
        #expect(Set(items.map(\.messageID)).count == 7)
        // One send's ids differ in their low bits only: the staged and in-memory parts share them.
        #expect(Set(items.map { $0.messageID.prefix(19) }).count == 1)
        let outcome = try await outbox.outcome(of: "n-s", scope: .everyHub)
        #expect(outcome.platforms.map(\.pending).reduce(0, +) == 7)
        #expect(try outbox.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM audience_staging") } == 0)

        // A send that fails before its commit: discarded now, or deleted at the next start.
        var failed = Outbox.StagedAudience(notificationID: "n-f")
        try await outbox.stage(targets, to: &failed)
        await outbox.discardStaged(failed)
        var orphan = Outbox.StagedAudience(notificationID: "n-o")
        try await outbox.stage(targets, to: &orphan)
        #expect(try await outbox.deleteAbandonedStaging() == 7)
        #expect(try outbox.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM audience_staging") } == 0)
        await #expect(throws: ServiceError.self) { try await outbox.outcome(of: "n-f", scope: .everyHub) }
    }

    @Test("a streaming audience spills at the threshold and keeps only the first max_devices")
    func spillingAudience() {
        let threshold = Outbox.StagedAudience.spillThreshold
        let batch = (0..<(threshold / 2)).map { Outbox.Target(registrationID: "r-\($0)", platform: .apns, handle: "h") }
        var audience = SpillingAudience(notificationID: "n", maxDevices: 0)
        #expect(audience.add(batch) == nil)
        #expect(audience.add(batch)?.count == threshold)
        #expect(audience.buffer.isEmpty)
        var limited = SpillingAudience(notificationID: "n", maxDevices: 3)
        #expect(limited.add(Array(batch.prefix(2))) == nil)
        #expect(limited.add(batch) == nil)
        #expect(limited.buffer.map(\.registrationID) == ["r-0", "r-1", "r-0"])
    }

    @Test("retries past the window are abandoned; the outcome counts reasons, removed handles and retries")
    func decisionsAndOutcome() async throws {
        let clock = ManualClock()
        let outbox = try Self.outbox(now: clock.function)
        let targets = (0..<4).map { Outbox.Target(registrationID: "r-\($0)", platform: .apns, handle: "h\($0)") }
        _ = try await outbox.enqueue(
            Outbox.Send(
                id: "n-2", sender: "s", targetUser: "u", targetTag: "", payloads: [Self.payload()],
                retryWindow: .seconds(10)), targets: targets)
        let worker = DeliveryWorker(
            outbox: outbox,
            senders: HubSenders(
                defaults: [:], inbox: try InboxProvider(db: .inMemory()), client: nil, timeout: .seconds(1)),
            registrations: RegistrationServiceClient(try RPCClient(socketPath: "/nonexistent")),
            policy: RetryPolicy(base: .seconds(4)),
            logger: Logger(label: "test"))
        var items = try await outbox.claim(limit: 10, platforms: [.apns])
        let now = clock.now
        try await outbox.record([
            worker.decide(items[0], .delivered(status: 200), now: now),
            worker.decide(items[1], .unregistered(status: 410, reason: "Unregistered", since: 5), now: now),
            worker.decide(items[2], .failed(status: 400, reason: "BadTopic"), now: now),
            worker.decide(items[3], .retry(status: 429, reason: "TooManyRequests", after: .seconds(3)), now: now),
        ])
        clock.advance(seconds: 5)
        items = try await outbox.claim(limit: 10, platforms: [.apns])
        try #require(items.count == 1 && items[0].attempt == 2)
        // A second 503 with Retry-After 30 s would land after the 10 s window: abandoned.
        let finished = try await outbox.record([
            worker.decide(
                items[0], .retry(status: 503, reason: "ServiceUnavailable", after: .seconds(30)), now: now + 5000)
        ])
        #expect(finished.map(\.state) == [.abandoned])
        let outcome = try #require(try await outbox.outcome(of: "n-2", scope: .everyHub).platforms.first)
        #expect(outcome.success == 1 && outcome.failure == 3 && outcome.pending == 0)
        #expect(outcome.removedHandles == 1 && outcome.retries == 1)
        #expect(outcome.failures.map(\.reason) == ["Abandoned", "BadTopic", "Unregistered"])
        #expect(try await outbox.pendingRemovals(limit: 10).map(\.handle) == ["h1"])

        // Retention: a finished send goes with its deliveries and counters; nothing else does.
        #expect(try await outbox.purge(before: now) == 0)
        #expect(try await outbox.purge(before: now + 10_000) == 1)
        await #expect(throws: ServiceError.self) { try await outbox.outcome(of: "n-2", scope: .everyHub) }
        #expect(try outbox.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM delivery") } == 0)
    }

    @Test(
        "the inbox's deliveries: a send woken is delivered at once; one no wake announces (another replica's, a retry come due) within the worker's poll"
    )
    func inboxClaims() async throws {
        let outbox = try Self.outbox()
        let inbox = try InboxProvider(db: .inMemory())
        let worker = DeliveryWorker(
            outbox: outbox,
            senders: HubSenders(defaults: [.apns: inbox], inbox: inbox, client: nil, timeout: .seconds(1)),
            registrations: RegistrationServiceClient(try RPCClient(socketPath: "/nonexistent")),
            policy: RetryPolicy(), logger: Logger(label: "test"))
        let running = Task { try await worker.run() }
        defer { running.cancel() }
        func send(_ id: String) async throws {
            _ = try await outbox.enqueue(
                Outbox.Send(
                    id: id, sender: "s", targetUser: "u", targetTag: "", payloads: [Self.payload()],
                    retryWindow: .seconds(60)),
                targets: [Outbox.Target(registrationID: "r-\(id)", platform: .apns, handle: "h")])
        }
        func delivered(_ id: String) async throws -> Bool {
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline {
                if try await outbox.outcome(of: id, scope: .everyHub).platforms.first?.success == 1 { return true }
                try await Task.sleep(for: .milliseconds(20))
            }
            return false
        }
        try await send("n-1")
        worker.wake()
        #expect(try await delivered("n-1"))
        // The worker has found the inbox empty since: a row no send announces is still claimed.
        try await send("n-2")
        #expect(try await delivered("n-2"))
        try await send("n-3")
        worker.wake()
        #expect(try await delivered("n-3"))
    }

    @Test("a bad credential file is a start-up error that names the setting, not its content")
    func badCredentials() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("herald-bad-\(UUID().uuidString).p8")
            .path
        try "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWJ1dC1ub3QtYS1rZXk=\n-----END PRIVATE KEY-----\n".write(
            toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let config = try DispatchConfig(
            reader: ConfigReader(arguments: [
                "--apns-key-file", path, "--apns-key-id", "K", "--apns-team-id", "T", "--apns-topic", "x",
            ]))
        let inbox = try InboxProvider(db: .inMemory())
        let client = PushHTTP.makeClient(extraCAFile: nil)
        await #expect {
            _ = try await config.senders(inbox: inbox, client: client)
        } throws: { error in
            "\(error)".contains("apns-key-file is not a P-256 private key") && !"\(error)".contains("c2VjcmV0")
        }
        #expect(throws: ConfigError.self) {
            _ = try DispatchConfig(reader: ConfigReader(arguments: ["--apns-key-file", path]))
        }
        let none = try DispatchConfig(reader: ConfigReader(arguments: []))
        let senders = try await none.senders(inbox: inbox, client: client)
        #expect(senders.real.isEmpty && senders.senders.values.allSatisfy { $0 is InboxProvider })
        try await client.shutdown()
    }

    @Test("the inbox records each device's own variant of a template send, however the batch mixes them")
    func inboxVariants() async throws {
        func item(_ n: Int, variant: Int) -> PushItem {
            PushItem(
                sequence: Int64(n), notificationID: "n-t", registrationID: "r\(n)", platform: .apns,
                handle: "h\(n)", messageID: "m\(n)", attempt: 1, giveUpAt: 0,
                payload: OutboxPayload(platform: .apns, body: Array("variant \(variant)".utf8), variant: variant))
        }
        // Installation n has template n % 4, so a claimed batch alternates variants.
        let items = (0..<8).map { item($0, variant: $0 % 4) }
        let inbox = try InboxProvider(db: .inMemory())
        #expect(await inbox.send(items) == Array(repeating: .delivered(status: 200), count: 8))
        let bodies = try await inbox.list(after: 0, limit: 10).map { String(decoding: $0.payload, as: UTF8.self) }
        #expect(bodies == (0..<8).map { "variant \($0 % 4)" })
    }

    @Test("message ids are distinct version-4 UUIDs")
    func messageIDs() {
        let first = MessageIDs()
        let ids = (0..<10_000).map { first.id($0) } + (0..<10_000).map { MessageIDs().id($0 % 3) }
        #expect(Set(ids).count == ids.count)
        for id in ids.prefix(100) {
            let uuid = UUID(uuidString: id)
            #expect(uuid != nil && id.count == 36 && id == id.lowercased())
            #expect(Array(id)[14] == "4" && "89ab".contains(Array(id)[19]))
        }
    }

}

/// A traced send's deliveries as spans: batch spans with counts, and request spans only for a few.
@Suite("delivery spans", .watchedForStalls)
struct DeliverySpanTests {
    @Test(
        "per batch a push span with counts; request spans for the send's first 8 delivered pushes and 8 failed per batch"
    )
    func bounded() async throws {
        let spans = Mutex<[FinishedSpan]>([])
        let tracer = HeraldTracer(resource: []) { span in spans.withLock { $0.append(span) } }
        let parent = tracer.startSpan(
            "outbox.enqueue", context: .topLevel, ofKind: .internal, at: DefaultTracerClock.now)
        let worker = DeliveryWorker(
            outbox: try DeliveryTests.outbox(now: { 0 }),
            senders: HubSenders(
                defaults: [:], inbox: try InboxProvider(db: .inMemory()), client: nil, timeout: .seconds(1)),
            registrations: RegistrationServiceClient(try RPCClient(socketPath: "/nonexistent")),
            policy: RetryPolicy(), logger: Logger(label: "test"))
        let items = (0..<30).map {
            PushItem(
                sequence: Int64($0), notificationID: "n-1", registrationID: "r-\($0)", platform: .apns, handle: "h",
                messageID: "m-\($0)", attempt: 1, giveUpAt: 0, payload: DeliveryTests.payload())
        }
        let results: [PushResult] = (0..<30).map {
            $0 < 20 ? .delivered(status: 200) : .failed(status: 400, reason: "BadTopic")
        }
        let now = DefaultTracerClock.now
        for _ in 0..<2 {
            worker.recordSpans(
                items, results, key: HubPlatform(hub: "default", platform: .apns), sent: (now, now),
                traced: ["n-1": parent.context], tracer: tracer)
        }
        let all = spans.withLock { $0 }
        let batches = all.filter { $0.name == "push apns" }
        #expect(batches.count == 2)
        #expect(batches.allSatisfy { $0.parentSpanID == parent.identity.spanID })
        #expect(batches.first?.attributes["herald.delivered"]?.toSpanAttribute() == .int64(20))
        #expect(batches.first?.attributes["herald.not_delivered"]?.toSpanAttribute() == .int64(10))
        let requests = all.filter { $0.name == "apns request" }
        // 8 delivered in the first batch, none in the second; 8 failed in each.
        #expect(requests.filter { $0.status == nil }.count == 8)
        #expect(requests.filter { $0.status?.code == .error }.count == 16)
        let batchIDs = batches.map { "\($0.trace.spanID)" }
        #expect(requests.allSatisfy { request in batchIDs.contains(request.parentSpanID.map { "\($0)" } ?? "") })
    }
}
